// docs/collectives.md's c10d backend skeleton (store_ccl.h, compiled from the page as written) behind an accelerator
// whose devices compute on the CPU, "store_npu", so that the conformance suite and its fsdp training run on the
// skeleton across real processes. The page's MakeCollectiveBackend (store_ccl_make.inc) is compiled here too.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hal/accelerator.h"
#include "hal/collectives.h"
#include "hal/registry.h"
#include "tests/readme/store_ccl.h"

namespace {

class StoreNpu final : public kiln::Accelerator {
 public:
  std::string name() const override { return "store_npu"; }
  absl::StatusOr<std::vector<int>> ParseDevices(const kiln::Devices& devices) const override {
    return kiln::ParseDeviceCount(devices, 2, name());
  }
  int AutoDeviceCount() const override { return 2; }
  absl::Status CheckAvailable() const override { return absl::OkStatus(); }
  std::vector<c10::Device> ParallelDevices(const std::vector<int>& indices) const override {
    return std::vector<c10::Device>(indices.size(), c10::Device(c10::DeviceType::CPU));
  }
  absl::Status SetupDevice(const kiln::LogicalDevice&) override { return absl::OkStatus(); }
  absl::Status TeardownDevice(const kiln::LogicalDevice&) override { return absl::OkStatus(); }
  absl::StatusOr<kiln::DeviceStats> GetDeviceStats(const kiln::LogicalDevice& device) const override {
    if (!device.compute.is_cpu()) return absl::InvalidArgumentError(device.ToString() + " is not a store_npu device");
    return kiln::DeviceStats{{"devices", 2.0}};
  }
  std::string ProcessGroupBackend() const override { return "storeccl"; }
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> MakeCollectiveBackend(
      const kiln::LogicalDevice& device, const kiln::CollectiveOptions& options) override;
  std::vector<kiln::Precision> SupportedPrecisions() const override { return {kiln::Precision::k32True}; }
};

#include "tests/readme/store_ccl_make.inc"

KILN_REGISTER_ACCELERATOR({
    .name = "store_npu",
    .description = "docs/collectives.md's store-based c10d backend skeleton on CPU devices (tests/readme only).",
    .aliases = {},
    .priority = -1000,
    .factory = [] { return std::make_shared<StoreNpu>(); },
});

}  // namespace
