#include "backends/cuda/caching_allocator.h"

#ifdef KILN_WITH_CUDA
#include "ATen/Context.h"
#include "absl/strings/str_cat.h"
#include "c10/cuda/CUDACachingAllocator.h"
#include "c10/util/Exception.h"
#endif

namespace kiln::cuda {

#ifdef KILN_WITH_CUDA

bool CachingAllocatorBuiltIn() { return true; }

absl::Status AddCachingAllocatorStats(int device_index, DeviceStats* stats) {
  namespace allocator = ::c10::cuda::CUDACachingAllocator;
  try {
    // getDeviceStats indexes per-device state that only exists once LibTorch's CUDA state is initialised.
    // --config=cuda builds against LibTorch 2.x only (tools/libtorch.bzl), whose statistics types are c10's.
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
    const c10::CachingDeviceAllocator::DeviceStats device_stats =
        allocator::getDeviceStats(static_cast<c10::DeviceIndex>(device_index));
    constexpr size_t kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    (*stats)["allocator_allocated_bytes"] = static_cast<double>(device_stats.allocated_bytes[kAll].current);
    (*stats)["allocator_allocated_peak_bytes"] = static_cast<double>(device_stats.allocated_bytes[kAll].peak);
    (*stats)["allocator_reserved_bytes"] = static_cast<double>(device_stats.reserved_bytes[kAll].current);
    (*stats)["allocator_reserved_peak_bytes"] = static_cast<double>(device_stats.reserved_bytes[kAll].peak);
    (*stats)["allocator_active_bytes"] = static_cast<double>(device_stats.active_bytes[kAll].current);
    (*stats)["allocator_alloc_retries"] = static_cast<double>(device_stats.num_alloc_retries);
    (*stats)["allocator_ooms"] = static_cast<double>(device_stats.num_ooms);
  } catch (const c10::Error& error) {
    return absl::InternalError(absl::StrCat("reading the CUDA caching allocator's statistics of device ", device_index,
                                            " failed: ", error.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::Status EmptyCache() {
  try {
    ::c10::cuda::CUDACachingAllocator::emptyCache();
  } catch (const c10::Error& error) {
    return absl::InternalError(
        absl::StrCat("releasing the CUDA caching allocator's memory failed: ", error.what_without_backtrace()));
  }
  return absl::OkStatus();
}

#else  // !KILN_WITH_CUDA

bool CachingAllocatorBuiltIn() { return false; }

absl::Status AddCachingAllocatorStats(int device_index, DeviceStats* stats) {
  (void)device_index;
  (void)stats;
  return absl::UnimplementedError(
      "this build of Kiln cannot read the CUDA caching allocator; build with --config=cuda against a CUDA-enabled "
      "LibTorch (see docs/backends.md, 'CUDA backend')");
}

absl::Status EmptyCache() { return absl::OkStatus(); }

#endif  // KILN_WITH_CUDA

}  // namespace kiln::cuda
