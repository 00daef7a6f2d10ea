// The HPU accelerator (Habana / Intel Gaudi), registered as "hpu" (priority 10: below cuda, above cpu).
//
// Devices are found from the driver's device nodes and sysfs entries (discovery.h); only devices that are really
// there are counted, and a failed query counts 0 with the reason, never a guess. Training also needs Habana's
// PyTorch bridge, which gives LibTorch's `hpu` device type its kernels: the library for the execution mode
// (bridge.h: libhabana_pytorch2_plugin.so for eager mode, libhabana_pytorch_plugin.so for lazy mode, chosen by
// PT_HPU_LAZY_MODE as Habana's loader does) is loaded with dlopen (once, process-wide, only when devices were found)
// by CheckAvailable and SetupDevice, and its absence is an error that names every library tried.
//
// `devices` follows Lightning's HPU rules: "auto" means every device found, an int N (or "N") the first N; -1 and
// lists of indices are errors, because the Habana runtime, not the user, assigns a device to each process. As in
// Lightning, every process runs on the device `hpu` (no index). Collective backend: hccl. Precisions: 32-true and
// bf16-mixed.
//
// Device statistics (GetDeviceStats) of `hpu` (the first device found) or `hpu:N` (the N-th), from sysfs:
//   device_operational   1 when `status` is "operational", else 0
//   clock_current_mhz    clk_cur_freq_mhz (Gaudi)
//   clock_max_mhz        clk_max_freq_mhz (Gaudi)
//   power_limit_watts    max_power (milliwatts in the file)
//   hard_reset_count     hard_reset_cnt, since the driver was loaded
//   soft_reset_count     soft_reset_cnt, since the driver was loaded
//   temperature_celsius  temp1_input of the driver's hwmon device (millidegrees in the file)
//   power_watts          power1_input of the driver's hwmon device (microwatts in the file)
// A value the driver does not expose is left out. Memory use is not in sysfs (hl-smi asks the driver through its
// ioctl interface), so it is not reported. With several processes per host, the runtime decides which device each
// process takes; statistics by discovery index do not follow that choice.
#ifndef KILN_BACKENDS_HPU_HPU_ACCELERATOR_H_
#define KILN_BACKENDS_HPU_HPU_ACCELERATOR_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "backends/hpu/discovery.h"
#include "hal/accelerator.h"

namespace kiln {

struct HpuOptions {
  // Where the driver's files are read: "/" on a real host; tests point it at a fake device tree.
  std::string root = "/";
  // Habana's PyTorch bridge: a soname or a path; empty (the default) picks the mode's library (bridge.h) by
  // PT_HPU_LAZY_MODE. Tests point it at a path that does not exist, or at a stand-in.
  std::string bridge_library;
  // The folder the mode's bridge libraries are taken from (habana_frameworks/torch/lib); empty: the dynamic loader's
  // search path (LD_LIBRARY_PATH). Used only when bridge_library is empty.
  std::string bridge_folder;
};

class HpuAccelerator final : public Accelerator {
 public:
  explicit HpuAccelerator(HpuOptions options = {});

  std::string name() const override { return "hpu"; }
  absl::StatusOr<std::vector<int>> ParseDevices(const Devices& devices) const override;
  int AutoDeviceCount() const override;
  absl::Status CheckAvailable() const override;
  std::vector<c10::Device> ParallelDevices(const std::vector<int>& indices) const override;
  absl::Status SetupDevice(const LogicalDevice& device) override;
  absl::Status TeardownDevice(const LogicalDevice& device) override;
  absl::StatusOr<DeviceStats> GetDeviceStats(const LogicalDevice& device) const override;
  std::string ProcessGroupBackend() const override { return "hccl"; }
  // Habana's HCCL backend for c10d (ProcessGroupHCCL), made by the creator a library exports with c10d's signature
  // (hal/c10d_creators.h): the library KILN_HCCL_LIBRARY names, then the bridge. FailedPrecondition naming what was
  // searched when none exports it, so that data-parallel training on Gaudi stops before it starts, saying so.
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> MakeCollectiveBackend(const LogicalDevice& device,
                                                                          const CollectiveOptions& options) override;
  std::vector<Precision> SupportedPrecisions() const override;

  // What discovery finds now (see discovery.h). Reads files only; never throws.
  hpu::Discovery Discover() const;

 private:
  // OK once the bridge is loaded; otherwise FailedPrecondition naming every library tried. Tries dlopen once per
  // accelerator.
  absl::Status LoadBridge() const;
  // The bridge library that loaded, or the one configured (for messages).
  std::string BridgeLibrary() const;

  const HpuOptions options_;
  mutable absl::Mutex mutex_;
  mutable bool bridge_tried_ ABSL_GUARDED_BY(mutex_) = false;
  mutable absl::Status bridge_status_ ABSL_GUARDED_BY(mutex_);
  mutable std::string bridge_library_ ABSL_GUARDED_BY(mutex_);
};

// Lightning's HPU rules for `devices`, with `present` devices found. Never throws.
absl::StatusOr<std::vector<int>> ParseHpuDevices(const Devices& devices, int present);

}  // namespace kiln

#endif  // KILN_BACKENDS_HPU_HPU_ACCELERATOR_H_
