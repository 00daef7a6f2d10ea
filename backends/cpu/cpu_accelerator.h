// The CPU accelerator, registered as "cpu" (priority 0, so any available hardware accelerator wins "auto").
//
// As in Lightning, `devices=N` means N processes on this machine, each on the CPU device; "auto" means one.
//
// Device statistics (GetDeviceStats), all read from Linux's /proc:
//   process_rss_bytes               resident memory of this process
//   process_cpu_percent             CPU time of this process / wall time since the previous call (or since the
//                                   accelerator was made, on the first call); above 100 with several threads
//   machine_memory_total_bytes      MemTotal
//   machine_memory_available_bytes  MemAvailable
//   machine_memory_used_percent     100 * (1 - available / total)
//   machine_cpu_count               logical CPUs online
// A value that cannot be read is left out.
#ifndef KILN_BACKENDS_CPU_CPU_ACCELERATOR_H_
#define KILN_BACKENDS_CPU_CPU_ACCELERATOR_H_

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "hal/accelerator.h"

namespace kiln {

class CpuAccelerator final : public Accelerator {
 public:
  CpuAccelerator();

  std::string name() const override { return "cpu"; }
  absl::StatusOr<std::vector<int>> ParseDevices(const Devices& devices) const override;
  int AutoDeviceCount() const override { return 1; }
  absl::Status CheckAvailable() const override { return absl::OkStatus(); }
  std::vector<c10::Device> ParallelDevices(const std::vector<int>& indices) const override;
  absl::Status SetupDevice(const LogicalDevice& device) override;
  absl::Status TeardownDevice(const LogicalDevice& device) override;
  absl::StatusOr<DeviceStats> GetDeviceStats(const LogicalDevice& device) const override;
  std::string ProcessGroupBackend() const override { return "gloo"; }
  std::vector<Precision> SupportedPrecisions() const override;
  std::optional<PrecisionSubstitute> SubstitutePrecision(Precision requested) const override;

 private:
  struct CpuSample {
    absl::Time wall;
    double cpu_seconds = 0;
  };
  mutable absl::Mutex mutex_;
  mutable CpuSample last_sample_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace kiln

#endif  // KILN_BACKENDS_CPU_CPU_ACCELERATOR_H_
