// The CUDA accelerator, registered as "cuda" with the alias "gpu" (priority 20: "auto" prefers it to hpu and cpu).
//
// Availability and the device count come from LibTorch's CUDA hooks (at::detail::getCUDAHooks()), which exist in
// every LibTorch build: Debian's CPU-only LibTorch reports no CUDA runtime, so on such a build the backend is
// registered but unavailable, and says why. In a CUDA build, counting calls cudaGetDeviceCount, which initialises
// the CUDA driver (no context is created); a process that forks afterwards must not use CUDA in the child.
//
// `devices` follows Lightning's GPU rules (hal/devices.h, ParseDeviceIndices): an int N means the first N visible
// devices, -1 and "auto" all of them, a list or "0,2" exactly those; errors name the visible devices and
// CUDA_VISIBLE_DEVICES. Set-up selects the device for the process; tear-down waits for it and releases the caching
// allocator's cached memory (the latter only in a --config=cuda build, see caching_allocator.h).
//
// Device statistics (GetDeviceStats) for device cuda:N, or the current device for a bare "cuda":
//   nvml_available        1 when the NVML keys below were read; 0 when NVIDIA's libnvidia-ml.so.1 is absent or
//                         refuses (NvmlStatus() says why), or the device cannot be mapped to NVML's numbering
//   utilization_gpu_percent, utilization_memory_percent, memory_total_bytes, memory_used_bytes, memory_free_bytes,
//   temperature_celsius, power_watts, clock_graphics_mhz, clock_sm_mhz, clock_memory_mhz
//                         from NVML (see nvml.h; a reading the GPU does not support is left out). CUDA index N is
//                         mapped to NVML's index through CUDA_VISIBLE_DEVICES (see visible_devices.h).
//   allocator_available   1 when the caching allocator's keys were read (a --config=cuda build), else 0
//   allocator_*           see caching_allocator.h
// A device is this accelerator's when its type is CUDA and its index is below the number of visible devices, as
// LibTorch counts them, or, when LibTorch counts none (a CPU-only LibTorch on a GPU machine), as NVML and
// CUDA_VISIBLE_DEVICES count them.
//
// Peak FLOP/s (PeakFlops): from the device's compute capability, SM count and peak SM clock, read from the CUDA
// runtime, by the table in peak_flops.h (which says what it covers and what is unknown); float32 counts as TF32 when
// LibTorch lets cuBLAS use it. Unknown in a build without --config=cuda.
//
// Collective backend: nccl. Precisions: 32-true, 64-true, 16-mixed, bf16-mixed, 16-true, bf16-true (bf16 needs a GPU
// that supports it, compute capability 8.0 or later for speed; this is not checked here).
#ifndef KILN_BACKENDS_CUDA_CUDA_ACCELERATOR_H_
#define KILN_BACKENDS_CUDA_CUDA_ACCELERATOR_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "backends/cuda/nvml.h"
#include "hal/accelerator.h"

namespace kiln {

struct CudaOptions {
  // The NVML library loaded (on first use) for statistics: a soname or a path. Tests point it at a fake NVML or at
  // a path that does not exist.
  std::string nvml_library = cuda::kNvmlLibrary;
};

class CudaAccelerator final : public Accelerator {
 public:
  explicit CudaAccelerator(CudaOptions options = {});

  std::string name() const override { return "cuda"; }
  absl::StatusOr<std::vector<int>> ParseDevices(const Devices& devices) const override;
  int AutoDeviceCount() const override;
  absl::Status CheckAvailable() const override;
  std::vector<c10::Device> ParallelDevices(const std::vector<int>& indices) const override;
  absl::Status SetupDevice(const LogicalDevice& device) override;
  absl::Status TeardownDevice(const LogicalDevice& device) override;
  absl::StatusOr<DeviceStats> GetDeviceStats(const LogicalDevice& device) const override;
  std::string ProcessGroupBackend() const override { return "nccl"; }
  // LibTorch's ProcessGroupNCCL (in libtorch_cuda) in a --config=cuda build, its timeout the options'; in a CPU build,
  // FailedPrecondition saying how to build with it.
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> MakeCollectiveBackend(const LogicalDevice& device,
                                                                          const CollectiveOptions& options) override;
  std::vector<Precision> SupportedPrecisions() const override;
  std::optional<double> PeakFlops(const LogicalDevice& device, c10::ScalarType dtype) const override;

  // OK when NVML statistics can be read; otherwise why not (the library is absent, too old, or refuses to start).
  // Loads NVML on the first call (also made by GetDeviceStats); never throws.
  absl::Status NvmlStatus() const;

 private:
  // The loaded NVML, or null with NvmlStatus() saying why.
  const cuda::Nvml* LoadedNvml() const;

  const CudaOptions options_;
  mutable absl::Mutex mutex_;
  mutable bool nvml_tried_ ABSL_GUARDED_BY(mutex_) = false;
  mutable absl::Status nvml_status_ ABSL_GUARDED_BY(mutex_);
  mutable std::unique_ptr<cuda::Nvml> nvml_ ABSL_GUARDED_BY(mutex_);
};

// Lightning's GPU rules for `devices` with `visible_count` CUDA devices; error messages carry the value of
// CUDA_VISIBLE_DEVICES (`cuda_visible_devices`, nullopt when unset). CudaAccelerator::ParseDevices is this function
// with LibTorch's count and the environment's value. Never throws.
absl::StatusOr<std::vector<int>> ParseCudaDevices(const Devices& devices, int visible_count,
                                                  std::optional<absl::string_view> cuda_visible_devices);

}  // namespace kiln

#endif  // KILN_BACKENDS_CUDA_CUDA_ACCELERATOR_H_
