#include "device.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "c10/core/impl/DeviceGuardImplInterface.h"
#include "c10/util/Exception.h"
#include "hal/compat/privateuse1.h"

namespace virtual_npu {
namespace {

thread_local c10::DeviceIndex current_device = 0;

// LibTorch's device guard for the virtual NPU: it selects the current device (DeviceGuard, the dispatcher's
// device switching) and reports the device count. The device has one stream per device, and no events: work is
// finished when a kernel returns, because every kernel runs synchronously on the host.
class VirtualNpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return kDeviceType; }

  c10::Device exchangeDevice(c10::Device device) const override {
    const c10::Device previous = getDevice();
    setDevice(device);
    return previous;
  }

  c10::Device getDevice() const override { return c10::Device(kDeviceType, current_device); }

  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == kDeviceType, "virtual_npu's device guard got a ", device.type(), " device");
    if (!device.has_index()) return;
    const absl::Status status = CheckDevice(device);
    TORCH_CHECK(status.ok(), std::string(status.message()));
    current_device = device.index();
  }

  void uncheckedSetDevice(c10::Device device) const noexcept override {
    if (device.has_index()) current_device = device.index();
  }

  c10::Stream getStream(c10::Device device) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }

  c10::Stream exchangeStream(c10::Stream stream) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, stream.device());
  }

  c10::DeviceIndex deviceCount() const noexcept override { return static_cast<c10::DeviceIndex>(DeviceCountOrZero()); }

  // Synchronous device: every stream is always idle.
  bool queryStream(const c10::Stream& stream) const override { return true; }
  void synchronizeStream(const c10::Stream& stream) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, VirtualNpuGuardImpl);

// The runtime hooks that LibTorch 2.x asks a PrivateUse1 device for, registered when the library loads. The name
// waits for the device's first use (NamingStatus): see hal/compat/privateuse1.h.
[[maybe_unused]] const bool hooks_registered = [] {
  kiln::compat::RegisterPrivateUse1Runtime({.device_count = [] { return DeviceCountOrZero(); }});
  return true;
}();

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
    return absl::InvalidArgumentError(
        absl::StrCat("'", device.str(), "' is not a virtual_npu device; this process has ", count, " (",
                     kiln::compat::PrivateUse1Name(), ":0 to ", kiln::compat::PrivateUse1Name(), ":", count - 1,
                     ", set by ", kDevicesVariable, ")"));
  }
  return absl::OkStatus();
}

absl::Status NamingStatus() {
  static const absl::Status* const status = new absl::Status(kiln::compat::NamePrivateUse1Backend(kDeviceName));
  return *status;
}

c10::DeviceIndex CurrentDevice() noexcept { return current_device; }

void SetCurrentDevice(c10::DeviceIndex index) noexcept { current_device = index; }

}  // namespace virtual_npu
