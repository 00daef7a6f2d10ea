#include "virtual_npu_accelerator.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "device.h"
#include "hal/compat/autocast.h"
#include "hal/device_kit/device_kit.h"
#include "hal/registry.h"
#include "hal/staged_collectives.h"

namespace virtual_npu {
namespace {

// VIRTUAL_NPU_PRIORITY as read when the program started (the registration needs it before main()).
const absl::StatusOr<int>& Priority() {
  static const absl::StatusOr<int>* const priority =
      new absl::StatusOr<int>(ParsePriority(std::getenv(kPriorityVariable)));
  return *priority;
}

std::string VisibilityHint() {
  const char* value = std::getenv(kDevicesVariable);
  return absl::StrCat(kDevicesVariable, "=", value != nullptr && *value != '\0' ? value : "unset (2 devices)");
}

}  // namespace

absl::StatusOr<int> ParsePriority(const char* value) {
  if (value == nullptr || *value == '\0') return kDefaultPriority;
  int priority = 0;
  if (!absl::SimpleAtoi(value, &priority)) {
    return absl::InvalidArgumentError(absl::StrCat(kPriorityVariable, "='", value,
                                                   "' is not an integer; set it to a priority such as 100 (above "
                                                   "every built-in accelerator), or unset it for ",
                                                   kDefaultPriority));
  }
  return priority;
}

absl::StatusOr<std::vector<int>> VirtualNpuAccelerator::ParseDevices(const kiln::Devices& devices) const {
  if (!DeviceCount().ok()) return DeviceCount().status();
  // Chosen: the device is registered and takes its name now, before the plan names devices (a probe,
  // CheckAvailable, registers nothing).
  if (absl::Status registered = RegistrationStatus(); !registered.ok()) return registered;
  absl::StatusOr<kiln::DeviceSelection> selection = kiln::ParseDevicesSyntax(devices);
  if (!selection.ok()) return selection.status();
  if (selection->kind == kiln::DeviceSelection::Kind::kAuto) return std::vector<int>{0};
  return kiln::ParseDeviceIndices(devices, *DeviceCount(), kName, VisibilityHint());
}

// One device, as Lightning's MPS accelerator: see the header.
int VirtualNpuAccelerator::AutoDeviceCount() const { return DeviceCountOrZero() > 0 ? 1 : 0; }

absl::Status VirtualNpuAccelerator::CheckAvailable() const {
  if (!DeviceCount().ok()) return absl::FailedPreconditionError(DeviceCount().status().message());
  if (!Priority().ok()) return absl::FailedPreconditionError(Priority().status().message());
  if (std::string taken = kiln::device_kit::CheckCanRegister(kDeviceName); !taken.empty()) {
    return absl::FailedPreconditionError(taken);
  }
  return absl::OkStatus();
}

std::vector<c10::Device> VirtualNpuAccelerator::ParallelDevices(const std::vector<int>& indices) const {
  (void)RegistrationStatus();  // Named, where it can be, before the devices are printed; SetupDevice reports a failure.
  std::vector<c10::Device> devices;
  devices.reserve(indices.size());
  for (int index : indices) devices.emplace_back(kDeviceType, static_cast<c10::DeviceIndex>(index));
  return devices;
}

absl::Status VirtualNpuAccelerator::SetupDevice(const kiln::LogicalDevice& logical) {
  const c10::Device& device = logical.compute;
  if (absl::Status registered = RegistrationStatus(); !registered.ok()) return registered;
  if (absl::Status status = kiln::CheckIndexIsCompute(logical); !status.ok()) return status;
  if (absl::Status status = CheckDevice(device); !status.ok()) return status;
  kiln::device_kit::SetCurrentDevice(device.index());
  kiln::device_kit::ResetPeakMemoryStats(device.index());
  return absl::OkStatus();
}

absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> VirtualNpuAccelerator::MakeCollectiveBackend(
    const kiln::LogicalDevice& device, const kiln::CollectiveOptions& options) {
  if (absl::Status status = CheckDevice(device.compute); !status.ok()) return status;
  return kiln::StagedCollectives::Create(options, kCollectiveBackendName, kDeviceType);
}

absl::Status VirtualNpuAccelerator::TeardownDevice(const kiln::LogicalDevice& device) {
  if (absl::Status status = kiln::CheckIndexIsCompute(device); !status.ok()) return status;
  return CheckDevice(device.compute);
}

absl::StatusOr<kiln::DeviceStats> VirtualNpuAccelerator::GetDeviceStats(const kiln::LogicalDevice& logical) const {
  const c10::Device& device = logical.compute;
  if (absl::Status status = kiln::CheckIndexIsCompute(logical); !status.ok()) return status;
  if (absl::Status status = CheckDevice(device); !status.ok()) return status;
  kiln::DeviceStats stats;
  for (const kiln::device_kit::Statistic& statistic : kiln::device_kit::DeviceStatistics(device.index())) {
    stats[statistic.name] = statistic.value;
  }
  return stats;
}

std::optional<double> VirtualNpuAccelerator::PeakFlops(const kiln::LogicalDevice& device,
                                                      c10::ScalarType dtype) const {
  (void)device;  // Every device of the sample is the same chip.
  switch (dtype) {
    case c10::kFloat:
      return kPeakFlopsFloat32;
    case c10::kDouble:
      return kPeakFlopsFloat32 / 2;
    case c10::kBFloat16:
    case c10::kHalf:
      return kPeakFlopsFloat32 * 4;
    default:
      return std::nullopt;
  }
}

std::vector<kiln::Precision> VirtualNpuAccelerator::SupportedPrecisions() const {
  std::vector<kiln::Precision> precisions = {kiln::Precision::k32True, kiln::Precision::k64True};
  // bf16-mixed where LibTorch has autocast for out-of-tree devices (2.x; the device kit registers the casts).
  if (kiln::compat::HasAutocast(kDeviceType)) precisions.push_back(kiln::Precision::kBf16Mixed);
  return precisions;
}

KILN_REGISTER_ACCELERATOR({
    .name = kName,
    .description = "A sample out-of-tree device (PrivateUse1) in host memory, computing through the CPU kernels.",
    .aliases = {"vnpu"},
    .priority = Priority().ok() ? *Priority() : kDefaultPriority,
    .factory = [] { return std::make_shared<VirtualNpuAccelerator>(); },
});

}  // namespace virtual_npu
