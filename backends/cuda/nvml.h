// NVIDIA's Management Library (NVML), loaded at run time: device statistics for the CUDA backend with no CUDA
// toolkit at build time and no hard dependency at run time.
//
// `Nvml::Load` opens the library with dlopen (the seam: tests pass the path of a library that does not exist, or of
// a fake NVML built by the test), looks up the few functions in nvml_api.h and initialises NVML. On a machine
// without NVIDIA's driver it returns an error saying so; callers report that in the statistics rather than fail.
//
// Thread-safety: a loaded Nvml is immutable and NVML's functions are thread-safe, so every const method may be
// called from any thread. Ownership: the Nvml owns the library handle and NVML's initialisation; destroying it calls
// nvmlShutdown and dlclose. Nothing here throws.
#ifndef KILN_BACKENDS_CUDA_NVML_H_
#define KILN_BACKENDS_CUDA_NVML_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/cuda/nvml_api.h"
#include "hal/accelerator.h"

namespace kiln::cuda {

// The soname NVIDIA's driver installs (the unversioned libnvidia-ml.so comes only with development packages).
inline constexpr char kNvmlLibrary[] = "libnvidia-ml.so.1";

class Nvml {
 public:
  // Loads `library` (a soname searched like any dlopen argument, or a path) and calls nvmlInit_v2.
  // Errors: NotFound when the library cannot be loaded (names it and dlerror's reason: usually no NVIDIA driver),
  // Unavailable when a function is missing (names it: an NVML older than driver 325) or nvmlInit_v2 fails (names
  // NVML's error string). May block briefly while NVML talks to the driver.
  static absl::StatusOr<std::unique_ptr<Nvml>> Load(const std::string& library = kNvmlLibrary);

  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;
  ~Nvml();

  // The library Load opened, as given to it.
  const std::string& library() const { return library_; }

  // GPUs present on the machine (NVML ignores CUDA_VISIBLE_DEVICES). Unavailable with NVML's error string on failure.
  absl::StatusOr<int> DeviceCount() const;

  // The UUID ("GPU-...") of every device, in NVML order.
  absl::StatusOr<std::vector<std::string>> DeviceUuids() const;

  // The readings of NVML device `nvml_index`, under these keys (units in the names):
  //   utilization_gpu_percent     percent of the last sample period in which a kernel ran
  //   utilization_memory_percent  percent of the last sample period in which device memory was read or written
  //   memory_total_bytes, memory_used_bytes, memory_free_bytes
  //   temperature_celsius         GPU die
  //   power_watts                 power draw of the board
  //   clock_graphics_mhz, clock_sm_mhz, clock_memory_mhz   current clocks
  // A reading NVML refuses (not supported on this GPU, no permission) is left out. InvalidArgument when the index is
  // not a device; Unavailable when NVML cannot give a handle for it (names NVML's error string).
  absl::StatusOr<DeviceStats> ReadDevice(int nvml_index) const;

 private:
  struct Functions {
    nvmlInit_v2_fn init = nullptr;
    nvmlShutdown_fn shutdown = nullptr;
    nvmlErrorString_fn error_string = nullptr;
    nvmlDeviceGetCount_v2_fn get_count = nullptr;
    nvmlDeviceGetHandleByIndex_v2_fn get_handle = nullptr;
    nvmlDeviceGetUUID_fn get_uuid = nullptr;
    nvmlDeviceGetUtilizationRates_fn get_utilization = nullptr;
    nvmlDeviceGetMemoryInfo_fn get_memory = nullptr;
    nvmlDeviceGetTemperature_fn get_temperature = nullptr;
    nvmlDeviceGetPowerUsage_fn get_power = nullptr;
    nvmlDeviceGetClockInfo_fn get_clock = nullptr;
  };

  Nvml(std::string library, void* handle, Functions functions)
      : library_(std::move(library)), handle_(handle), fn_(functions) {}
  std::string ErrorString(nvmlReturn_t result) const;

  const std::string library_;
  void* const handle_;  // From dlopen; owned.
  const Functions fn_;
};

}  // namespace kiln::cuda

#endif  // KILN_BACKENDS_CUDA_NVML_H_
