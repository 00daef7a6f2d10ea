// The virtual NPU as a Kiln accelerator, registered as "virtual_npu" (alias "vnpu").
//
// It is written exactly as a vendor would write a backend: against Kiln's HAL (@kiln//hal) alone, registered with
// one KILN_REGISTER_ACCELERATOR line, and linked into Kiln's programs by listing it in `kiln_backends` in a
// WORKSPACE (@kiln//tools:backends.bzl). Kiln's own code never names it.
//
//   devices       VIRTUAL_NPU_DEVICES devices (default 2), chosen by Lightning's GPU rules (-1 all of them, N the
//                 first N, "0,1" or [1] exactly those), except that "auto" means one device, device 0, as for
//                 Lightning's MPS accelerator. Several devices mean one process each, and data-parallel training
//                 needs a collective that can reduce the device's tensors; the sample has none (see collective),
//                 so "auto" stays on one device and `fit --accelerator=virtual_npu` trains with no other flag.
//   devices used  virtual_npu:<index> (c10::register_privateuse1_backend).
//   priority      VIRTUAL_NPU_PRIORITY (default -10). The CPU's is 0, so by default "auto" keeps training on the
//                 CPU and the virtual NPU is used when asked for by name; VIRTUAL_NPU_PRIORITY=100 makes "auto"
//                 choose it over every built-in accelerator. Read once, when the program starts.
//   availability  available whenever the two variables are valid; otherwise unavailable, saying which is wrong.
//   set-up        makes the device current for the calling thread and resets its peak memory counter;
//                 tear-down has nothing to release (memory goes back when tensors are freed).
//   collective    "vnccl": its own c10d backend for its tensors (Kiln's StagedCollectives, hal/staged_collectives.h),
//                 which stages them through host memory over Gloo, as a vendor's backend would call its CCL.
//                 `--devices=4 --strategy=ddp` trains on it.
//   precisions    32-true, 64-true and bf16-mixed (the device kit registers autocast's casts).
//   peak FLOP/s   declared per dtype, as a vendor declares its chip's (PeakFlops): kPeakFlopsFloat32 for float32,
//                 half that for float64, four times it for bfloat16 and float16. The device computes on the host,
//                 so the figures are a datasheet a simulator makes up, not a measurement: what they give is a device
//                 with a known peak, on which MFU (ThroughputMonitor's device/mfu) is device/flops_per_sec divided
//                 by it, and tests check exactly that.
//
// Device statistics (GetDeviceStats), from the device kit's allocator, per device:
//   memory_allocated_bytes       bytes in use on the device now
//   memory_allocated_peak_bytes  most bytes in use at once since SetupDevice
//   memory_active_blocks         allocations not yet freed
//   memory_total_blocks          allocations ever made on the device
//   cpu_fallback_calls           operators computed through the CPU fallback so far, all devices together
//   device_to_host_copies        reads of the device's memory by the host so far, all devices together
#ifndef VIRTUAL_NPU_VIRTUAL_NPU_ACCELERATOR_H_
#define VIRTUAL_NPU_VIRTUAL_NPU_ACCELERATOR_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hal/accelerator.h"

namespace virtual_npu {

inline constexpr char kName[] = "virtual_npu";
inline constexpr char kCollectiveBackendName[] = "vnccl";
inline constexpr int kDefaultPriority = -10;
inline constexpr char kPriorityVariable[] = "VIRTUAL_NPU_PRIORITY";
inline constexpr double kPeakFlopsFloat32 = 1.0e12;  // The made-up datasheet's float32 figure (see above).

// Parses a VIRTUAL_NPU_PRIORITY value; null or empty means kDefaultPriority. InvalidArgument names the value. Pure.
absl::StatusOr<int> ParsePriority(const char* value);

class VirtualNpuAccelerator final : public kiln::Accelerator {
 public:
  std::string name() const override { return kName; }
  absl::StatusOr<std::vector<int>> ParseDevices(const kiln::Devices& devices) const override;
  int AutoDeviceCount() const override;
  absl::Status CheckAvailable() const override;
  std::vector<c10::Device> ParallelDevices(const std::vector<int>& indices) const override;
  absl::Status SetupDevice(const kiln::LogicalDevice& device) override;
  absl::Status TeardownDevice(const kiln::LogicalDevice& device) override;
  absl::StatusOr<kiln::DeviceStats> GetDeviceStats(const kiln::LogicalDevice& device) const override;
  std::string ProcessGroupBackend() const override { return kCollectiveBackendName; }
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> MakeCollectiveBackend(
      const kiln::LogicalDevice& device, const kiln::CollectiveOptions& options) override;
  std::vector<kiln::Precision> SupportedPrecisions() const override;
  std::optional<double> PeakFlops(const kiln::LogicalDevice& device, c10::ScalarType dtype) const override;
};

}  // namespace virtual_npu

#endif  // VIRTUAL_NPU_VIRTUAL_NPU_ACCELERATOR_H_
