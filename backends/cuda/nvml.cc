#include "backends/cuda/nvml.h"

#include <dlfcn.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kiln::cuda {
namespace {

// Looks up `name` in `handle`; records the first missing name in `missing`.
template <typename Fn>
void Resolve(void* handle, const char* name, Fn* out, std::string* missing) {
  *out = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*out == nullptr && missing->empty()) *missing = name;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Nvml>> Nvml::Load(const std::string& library) {
  dlerror();  // Clear any earlier error, so that the one reported is ours.
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* reason = dlerror();
    return absl::NotFoundError(absl::StrCat(
        "NVIDIA's management library ", library, " cannot be loaded (", reason == nullptr ? "unknown reason" : reason,
        "); it comes with NVIDIA's driver, so GPU statistics need a machine with the driver installed"));
  }
  Functions fn;
  std::string missing;
  Resolve(handle, "nvmlInit_v2", &fn.init, &missing);
  Resolve(handle, "nvmlShutdown", &fn.shutdown, &missing);
  Resolve(handle, "nvmlErrorString", &fn.error_string, &missing);
  Resolve(handle, "nvmlDeviceGetCount_v2", &fn.get_count, &missing);
  Resolve(handle, "nvmlDeviceGetHandleByIndex_v2", &fn.get_handle, &missing);
  Resolve(handle, "nvmlDeviceGetUUID", &fn.get_uuid, &missing);
  Resolve(handle, "nvmlDeviceGetUtilizationRates", &fn.get_utilization, &missing);
  Resolve(handle, "nvmlDeviceGetMemoryInfo", &fn.get_memory, &missing);
  Resolve(handle, "nvmlDeviceGetTemperature", &fn.get_temperature, &missing);
  Resolve(handle, "nvmlDeviceGetPowerUsage", &fn.get_power, &missing);
  Resolve(handle, "nvmlDeviceGetClockInfo", &fn.get_clock, &missing);
  if (!missing.empty()) {
    dlclose(handle);
    return absl::UnavailableError(absl::StrCat(library, " has no function ", missing,
                                               "; it is older than Kiln needs (NVIDIA driver 325 or later)"));
  }
  const nvmlReturn_t init = fn.init();
  if (init != NVML_SUCCESS) {
    const char* text = fn.error_string(init);
    dlclose(handle);
    return absl::UnavailableError(absl::StrCat("nvmlInit_v2 from ", library,
                                               " failed: ", text == nullptr ? "unknown error" : text, " (NVML error ",
                                               static_cast<int>(init), "); check that NVIDIA's driver is loaded"));
  }
  return std::unique_ptr<Nvml>(new Nvml(library, handle, fn));
}

Nvml::~Nvml() {
  fn_.shutdown();
  dlclose(handle_);
}

std::string Nvml::ErrorString(nvmlReturn_t result) const {
  const char* text = fn_.error_string(result);
  return absl::StrCat(text == nullptr ? "unknown error" : text, " (NVML error ", static_cast<int>(result), ")");
}

absl::StatusOr<int> Nvml::DeviceCount() const {
  unsigned int count = 0;
  if (nvmlReturn_t result = fn_.get_count(&count); result != NVML_SUCCESS) {
    return absl::UnavailableError(absl::StrCat("nvmlDeviceGetCount_v2 failed: ", ErrorString(result)));
  }
  return static_cast<int>(count);
}

absl::StatusOr<std::vector<std::string>> Nvml::DeviceUuids() const {
  absl::StatusOr<int> count = DeviceCount();
  if (!count.ok()) return count.status();
  std::vector<std::string> uuids;
  for (int i = 0; i < *count; ++i) {
    nvmlDevice_t device = nullptr;
    if (nvmlReturn_t result = fn_.get_handle(static_cast<unsigned int>(i), &device); result != NVML_SUCCESS) {
      return absl::UnavailableError(
          absl::StrCat("nvmlDeviceGetHandleByIndex_v2(", i, ") failed: ", ErrorString(result)));
    }
    char uuid[kNvmlDeviceUuidBufferSize] = {};
    if (nvmlReturn_t result = fn_.get_uuid(device, uuid, sizeof(uuid)); result != NVML_SUCCESS) {
      return absl::UnavailableError(absl::StrCat("nvmlDeviceGetUUID(", i, ") failed: ", ErrorString(result)));
    }
    uuids.emplace_back(uuid);
  }
  return uuids;
}

absl::StatusOr<DeviceStats> Nvml::ReadDevice(int nvml_index) const {
  absl::StatusOr<int> count = DeviceCount();
  if (!count.ok()) return count.status();
  if (nvml_index < 0 || nvml_index >= *count) {
    return absl::InvalidArgumentError(
        absl::StrCat("NVML device ", nvml_index, " requested, but NVML reports ", *count, " device(s)"));
  }
  nvmlDevice_t device = nullptr;
  if (nvmlReturn_t result = fn_.get_handle(static_cast<unsigned int>(nvml_index), &device); result != NVML_SUCCESS) {
    return absl::UnavailableError(
        absl::StrCat("nvmlDeviceGetHandleByIndex_v2(", nvml_index, ") failed: ", ErrorString(result)));
  }
  DeviceStats stats;
  if (nvmlUtilization_t utilization{}; fn_.get_utilization(device, &utilization) == NVML_SUCCESS) {
    stats["utilization_gpu_percent"] = utilization.gpu;
    stats["utilization_memory_percent"] = utilization.memory;
  }
  if (nvmlMemory_t memory{}; fn_.get_memory(device, &memory) == NVML_SUCCESS) {
    stats["memory_total_bytes"] = static_cast<double>(memory.total);
    stats["memory_used_bytes"] = static_cast<double>(memory.used);
    stats["memory_free_bytes"] = static_cast<double>(memory.free);
  }
  if (unsigned int celsius = 0; fn_.get_temperature(device, NVML_TEMPERATURE_GPU, &celsius) == NVML_SUCCESS) {
    stats["temperature_celsius"] = celsius;
  }
  if (unsigned int milliwatts = 0; fn_.get_power(device, &milliwatts) == NVML_SUCCESS) {
    stats["power_watts"] = milliwatts / 1000.0;
  }
  for (const auto& [type, key] :
       {std::pair{NVML_CLOCK_GRAPHICS, "clock_graphics_mhz"}, std::pair{NVML_CLOCK_SM, "clock_sm_mhz"},
        std::pair{NVML_CLOCK_MEM, "clock_memory_mhz"}}) {
    if (unsigned int mhz = 0; fn_.get_clock(device, type, &mhz) == NVML_SUCCESS) stats[key] = mhz;
  }
  return stats;
}

}  // namespace kiln::cuda
