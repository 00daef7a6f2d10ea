#include "hal/accelerator.h"

#include "absl/strings/str_cat.h"

namespace kiln {

std::string LogicalDevice::ToString() const {
  std::string name = absl::StrCat(accelerator, ":", index);
  // A c10 device named like the logical one ("cuda:1" for cuda:1) adds nothing; one named otherwise is shown.
  if (compute.str() != name) absl::StrAppend(&name, " (on ", compute.str(), ")");
  return name;
}

std::vector<LogicalDevice> LogicalDevices(const Accelerator& accelerator, const std::vector<int>& indices) {
  const std::vector<c10::Device> compute = accelerator.ParallelDevices(indices);
  std::vector<LogicalDevice> devices;
  devices.reserve(indices.size());
  for (size_t i = 0; i < indices.size() && i < compute.size(); ++i) {
    devices.push_back({.accelerator = accelerator.name(), .index = indices[i], .compute = compute[i]});
  }
  return devices;
}

absl::Status CheckIndexIsCompute(const LogicalDevice& device) {
  if (!device.compute.has_index() || device.compute.index() == device.index) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("device ", device.ToString(), " is not one of ", device.accelerator,
                                                 "'s devices: its index is not its c10 device's"));
}

absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> Accelerator::MakeCollectiveBackend(
    const LogicalDevice& device, const CollectiveOptions& options) {
  if (device.compute.is_cpu()) return MakeGlooCollectiveBackend(options);
  return absl::UnimplementedError(absl::StrCat(
      "accelerator '", name(), "' brings no collective backend for its ", device.compute.str(),
      " tensors, so data-parallel training cannot exchange them; its backend must implement "
      "Accelerator::MakeCollectiveBackend (hal/accelerator.h, hal/collectives.h: a c10d backend for its device type, "
      "as ProcessGroupNCCL is for CUDA), or train on one device"));
}

LogicalDevice LogicalDeviceOf(const Accelerator& accelerator, const c10::Device& compute) {
  return {.accelerator = accelerator.name(), .index = compute.has_index() ? compute.index() : 0, .compute = compute};
}

}  // namespace kiln
