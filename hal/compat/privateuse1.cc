#include "hal/compat/privateuse1.h"

#include <exception>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "c10/core/DeviceType.h"
#include "hal/device_kit/device_kit.h"
#include "torch/version.h"

#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 9
#include "c10/core/CachingDeviceAllocator.h"
#define KILN_HAS_DEVICE_ALLOCATOR 1
#else
#define KILN_HAS_DEVICE_ALLOCATOR 0
#endif

namespace kiln::compat {
namespace {

#if KILN_HAS_DEVICE_ALLOCATOR
c10::DeviceAllocator* StatsAllocator() {
  try {
    return dynamic_cast<c10::DeviceAllocator*>(c10::GetAllocator(c10::DeviceType::PrivateUse1));
  } catch (const std::exception&) {
    return nullptr;  // No allocator registered.
  }
}
#endif

}  // namespace

bool PrivateUse1AllocatorHasStats() {
#if KILN_HAS_DEVICE_ALLOCATOR
  return StatsAllocator() != nullptr;
#else
  return false;
#endif
}

std::optional<std::map<std::string, double>> PrivateUse1AllocatorStats(int index) {
#if KILN_HAS_DEVICE_ALLOCATOR
  c10::DeviceAllocator* allocator = StatsAllocator();
  if (allocator == nullptr) return std::nullopt;
  const auto device = static_cast<c10::DeviceIndex>(index);
  const auto aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  std::map<std::string, double> stats;
  try {
    const c10::CachingDeviceAllocator::DeviceStats read = allocator->getDeviceStats(device);
    stats["memory_allocated_bytes"] = static_cast<double>(read.allocated_bytes[aggregate].current);
    stats["memory_allocated_peak_bytes"] = static_cast<double>(read.allocated_bytes[aggregate].peak);
    stats["memory_reserved_bytes"] = static_cast<double>(read.reserved_bytes[aggregate].current);
    stats["memory_active_blocks"] = static_cast<double>(read.active[aggregate].current);
    stats["memory_alloc_retries"] = static_cast<double>(read.num_alloc_retries);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  try {
    const auto [free, total] = allocator->getMemoryInfo(device);
    stats["memory_free_bytes"] = static_cast<double>(free);
    stats["memory_total_bytes"] = static_cast<double>(total);
  } catch (const std::exception&) {
    // Not every allocator knows the device's capacity (c10's default refuses).
  }
  return stats;
#else
  (void)index;
  return std::nullopt;
#endif
}

void RegisterPrivateUse1Runtime(PrivateUse1Runtime runtime) {
  device_kit::RegisterRuntimeHooks(std::move(runtime.device_count));
}

absl::Status CheckPrivateUse1Name(absl::string_view name) {
  if (!c10::is_privateuse1_backend_registered()) return absl::OkStatus();
  const std::string current = c10::get_privateuse1_backend();
  if (current == name) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("cannot name LibTorch's out-of-tree device (PrivateUse1) '", name,
                                                    "': it is '", current,
                                                    "' already, and one process has one PrivateUse1 device"));
}

absl::Status NamePrivateUse1Backend(absl::string_view name) {
  const std::string error = device_kit::NamePrivateUse1(std::string(name));
  if (error.empty()) return absl::OkStatus();
  return c10::is_privateuse1_backend_registered() ? absl::FailedPreconditionError(error)
                                                   : absl::InvalidArgumentError(error);
}

std::string PrivateUse1Name() { return device_kit::PrivateUse1Name(); }

c10::IntArrayRef AsIntArrayRef(c10::SymIntArrayRef sizes) { return c10::asIntArrayRefSlow(sizes, __FILE__, __LINE__); }

}  // namespace kiln::compat
