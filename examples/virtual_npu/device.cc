#include "device.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "hal/device_kit/device_kit.h"

namespace virtual_npu {
namespace {

// Each device's trace: whether it records, and what it recorded (copies are made from any thread).
struct Trace {
  std::atomic<bool> on{false};
  std::mutex mutex;
  std::vector<CopyRecord> records;
};
std::array<Trace, kMaxDevices>& Traces() {
  static auto* const traces = new std::array<Trace, kMaxDevices>();
  return *traces;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* CopyName(kiln::device_kit::CopyKind kind) {
  switch (kind) {
    case kiln::device_kit::CopyKind::kHostToDevice:
      return "Memcpy HtoD";
    case kiln::device_kit::CopyKind::kDeviceToHost:
      return "Memcpy DtoH";
    case kiln::device_kit::CopyKind::kDeviceToDevice:
      return "Memcpy DtoD";
  }
  return "Memcpy";
}

// The virtual NPU's runtime, as the kit asks for it: its memory is host memory (64-byte aligned), copies are
// memcpy. A real device's runtime calls its driver here; the kit does the rest. Each block starts with a header that
// holds its size, so that Free can give the bytes back to the device's count (VIRTUAL_NPU_MEMORY_LIMIT).
class HostMemoryDevice final : public kiln::device_kit::Device {
 public:
  std::string Name() const override { return kDeviceName; }
  int Count() const noexcept override { return DeviceCountOrZero(); }

  void* Allocate(int index, size_t bytes) override {
    const int64_t limit = MemoryLimit().ok() ? *MemoryLimit() : 0;
    std::atomic<int64_t>& in_use = in_use_[index];
    const auto size = static_cast<int64_t>(bytes);
    if (in_use.fetch_add(size) + size > limit && limit > 0) {
      in_use.fetch_sub(size);
      return nullptr;  // The kit throws the device's out-of-memory error.
    }
    auto* block = static_cast<char*>(std::aligned_alloc(kAlignment, kAlignment + Rounded(bytes)));
    if (block == nullptr) {
      in_use.fetch_sub(size);
      return nullptr;
    }
    std::memcpy(block, &bytes, sizeof(bytes));
    return block + kAlignment;
  }

  void Free(int index, void* data) noexcept override {
    if (data == nullptr) return;
    char* block = static_cast<char*>(data) - kAlignment;
    size_t bytes = 0;
    std::memcpy(&bytes, block, sizeof(bytes));
    in_use_[index].fetch_sub(static_cast<int64_t>(bytes));
    std::free(block);
  }

  void Copy(void* dst, const void* src, size_t bytes, kiln::device_kit::CopyKind kind, int index) override {
    Trace* trace = index >= 0 && index < kMaxDevices ? &Traces()[index] : nullptr;
    if (trace == nullptr || !trace->on.load(std::memory_order_relaxed)) {
      std::memmove(dst, src, bytes);
      return;
    }
    const int64_t start = NowNs();
    std::memmove(dst, src, bytes);
    const int64_t end = NowNs();
    std::lock_guard<std::mutex> lock(trace->mutex);
    trace->records.push_back({CopyName(kind), start, end - start});
  }

  int64_t MemoryCapacity(int index) const noexcept override {
    return MemoryLimit().ok() && *MemoryLimit() > 0 ? *MemoryLimit() : -1;
  }

 private:
  static constexpr size_t kAlignment = 64;  // Also the header's size: the data after it stays aligned.
  static size_t Rounded(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

  std::array<std::atomic<int64_t>, kMaxDevices> in_use_{};  // Bytes asked for and not yet freed, per device.
};

}  // namespace

absl::StatusOr<int> ParseDeviceCount(const char* value) {
  if (value == nullptr || *value == '\0') return kDefaultDeviceCount;
  int count = 0;
  if (!absl::SimpleAtoi(value, &count) || count < 1 || count > kMaxDevices) {
    return absl::InvalidArgumentError(absl::StrCat(kDevicesVariable, "='", value,
                                                   "' is not a device count; set it to an integer from 1 to ",
                                                   kMaxDevices, ", or unset it for ", kDefaultDeviceCount));
  }
  return count;
}

absl::StatusOr<int64_t> ParseMemoryLimit(const char* value) {
  if (value == nullptr || *value == '\0') return 0;
  int64_t limit = 0;
  if (!absl::SimpleAtoi(value, &limit) || limit < 1) {
    return absl::InvalidArgumentError(absl::StrCat(kMemoryLimitVariable, "='", value,
                                                   "' is not a number of bytes; set it to an integer >= 1 (the bytes ",
                                                   "each device may hold at once), or unset it for no limit"));
  }
  return limit;
}

const absl::StatusOr<int64_t>& MemoryLimit() {
  static const absl::StatusOr<int64_t>* const limit =
      new absl::StatusOr<int64_t>(ParseMemoryLimit(std::getenv(kMemoryLimitVariable)));
  return *limit;
}

const absl::StatusOr<int>& DeviceCount() {
  static const absl::StatusOr<int>* const count =
      new absl::StatusOr<int>(ParseDeviceCount(std::getenv(kDevicesVariable)));
  return *count;
}

int DeviceCountOrZero() noexcept { return DeviceCount().ok() ? *DeviceCount() : 0; }

absl::Status CheckDevice(const c10::Device& device) {
  if (!DeviceCount().ok()) return DeviceCount().status();
  const int count = *DeviceCount();
  if (device.type() != kDeviceType || !device.has_index() || device.index() < 0 || device.index() >= count) {
    const std::string name = kiln::device_kit::PrivateUse1Name();
    return absl::InvalidArgumentError(absl::StrCat("'", device.str(), "' is not a virtual_npu device; this process has ",
                                                   count, " (", name, ":0 to ", name, ":", count - 1, ", set by ",
                                                   kDevicesVariable, ")"));
  }
  return absl::OkStatus();
}

void StartTrace(int index) {
  Trace& trace = Traces()[index];
  std::lock_guard<std::mutex> lock(trace.mutex);
  trace.records.clear();
  trace.on.store(true, std::memory_order_relaxed);
}

std::vector<CopyRecord> StopTrace(int index) {
  Trace& trace = Traces()[index];
  std::lock_guard<std::mutex> lock(trace.mutex);
  trace.on.store(false, std::memory_order_relaxed);
  return std::exchange(trace.records, {});
}

absl::Status RegistrationStatus() {
  static const absl::Status* const status = [] {
    const std::string error = kiln::device_kit::Register(std::make_shared<HostMemoryDevice>());
    return new absl::Status(error.empty() ? absl::OkStatus() : absl::FailedPreconditionError(error));
  }();
  return *status;
}

}  // namespace virtual_npu
