// A fake of NVIDIA's libnvidia-ml.so.1 for tests on machines without a GPU: the functions Kiln looks up, answering
// with the values in fake_nvml_values.h. Like the real library it counts nvmlInit_v2/nvmlShutdown calls and refuses
// device queries while not initialised, so a caller that forgets to initialise fails here too. Test support only;
// built as libfake_nvml.so and loaded through Nvml::Load(path).
#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/cuda/nvml_api.h"
#include "backends/cuda/testing/fake_nvml_values.h"

namespace {

namespace values = kiln::cuda::fake_nvml;

struct FakeDevice {
  int index;
};
FakeDevice devices[values::kDeviceCount] = {{0}, {1}, {2}};
int init_count = 0;  // Tests call from one thread at a time.

int IndexOf(nvmlDevice_t device) {
  for (const FakeDevice& fake : devices) {
    if (reinterpret_cast<nvmlDevice_t>(const_cast<FakeDevice*>(&fake)) == device) return fake.index;
  }
  return -1;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) nvmlReturn_t nvmlInit_v2(void) {
  if (std::getenv(values::kFailInitVariable) != nullptr) return NVML_ERROR_DRIVER_NOT_LOADED;
  ++init_count;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlShutdown(void) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  --init_count;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return values::kDriverNotLoadedText;
    default:
      return "Unknown Error";
  }
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = values::kDeviceCount;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                                                  nvmlDevice_t* device) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (device == nullptr || index >= static_cast<unsigned int>(values::kDeviceCount)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *device = reinterpret_cast<nvmlDevice_t>(&devices[index]);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid,
                                                                      unsigned int length) {
  const int i = IndexOf(device);
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (i < 0 || uuid == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const std::string text = values::Uuid(i);
  if (text.size() + 1 > length) return NVML_ERROR_INVALID_ARGUMENT;
  std::memcpy(uuid, text.c_str(), text.size() + 1);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                                                  nvmlUtilization_t* utilization) {
  const int i = IndexOf(device);
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (i < 0 || utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  utilization->gpu = values::UtilizationGpuPercent(i);
  utilization->memory = values::UtilizationMemoryPercent(i);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  const int i = IndexOf(device);
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (i < 0 || memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  memory->total = values::MemoryTotalBytes(i);
  memory->used = values::MemoryUsedBytes(i);
  memory->free = values::MemoryFreeBytes(i);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device,
                                                                             nvmlTemperatureSensors_t sensor,
                                                                             unsigned int* celsius) {
  const int i = IndexOf(device);
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (i < 0 || celsius == nullptr || sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  *celsius = values::TemperatureCelsius(i);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device,
                                                                            unsigned int* milliwatts) {
  const int i = IndexOf(device);
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (i < 0 || milliwatts == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (i == values::kDeviceWithoutPower) return NVML_ERROR_NOT_SUPPORTED;
  *milliwatts = values::PowerMilliwatts(i);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                                           unsigned int* mhz) {
  const int i = IndexOf(device);
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (i < 0 || mhz == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  switch (type) {
    case NVML_CLOCK_GRAPHICS:
      *mhz = values::ClockGraphicsMhz(i);
      return NVML_SUCCESS;
    case NVML_CLOCK_SM:
      *mhz = values::ClockSmMhz(i);
      return NVML_SUCCESS;
    case NVML_CLOCK_MEM:
      *mhz = values::ClockMemoryMhz(i);
      return NVML_SUCCESS;
  }
  return NVML_ERROR_INVALID_ARGUMENT;
}

}  // extern "C"
