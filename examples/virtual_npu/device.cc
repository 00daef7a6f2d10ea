#include "device.h"

#include <array>
#include <atomic>
#include <chrono>
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
// memcpy. A real device's runtime calls its driver here; the kit does the rest.
class HostMemoryDevice final : public kiln::device_kit::Device {
 public:
  std::string Name() const override { return kDeviceName; }
  int Count() const noexcept override { return DeviceCountOrZero(); }

  void* Allocate(int index, size_t bytes) override {
    constexpr size_t kAlignment = 64;
    return std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  }

  void Free(int index, void* data) noexcept override { std::free(data); }

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
