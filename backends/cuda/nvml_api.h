// The few declarations Kiln needs from NVIDIA's Management Library (NVML), so that the CUDA backend can read device
// statistics without the CUDA toolkit (or nvml.h) at build time. libnvidia-ml.so.1 ships with NVIDIA's driver and is
// loaded at run time (see nvml.h); these types and prototypes describe the symbols looked up there.
//
// Everything below is copied in meaning, not in text, from NVML's public, stable C API ("NVML API Reference",
// nvml.h of the CUDA toolkit / GPU Deployment Kit): the numeric values of nvmlReturn_t, nvmlTemperatureSensors_t and
// nvmlClockType_t, the field order of nvmlUtilization_t and nvmlMemory_t, and the signatures of the functions.
// Only the `_v2` entry points that NVML has exported since driver 325 are used. Nothing here may change size or
// order: the real library reads and writes these structs.
#ifndef KILN_BACKENDS_CUDA_NVML_API_H_
#define KILN_BACKENDS_CUDA_NVML_API_H_

extern "C" {

typedef enum nvmlReturn_enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_UNKNOWN = 999,
} nvmlReturn_t;

// An opaque handle owned by NVML; valid between nvmlInit_v2 and nvmlShutdown.
typedef struct nvmlDevice_st* nvmlDevice_t;

typedef struct nvmlUtilization_st {
  unsigned int gpu;     // Percent of the last sample period in which a kernel ran.
  unsigned int memory;  // Percent of the last sample period in which device memory was read or written.
} nvmlUtilization_t;

typedef struct nvmlMemory_st {
  unsigned long long total;  // Bytes.
  unsigned long long free;   // Bytes.
  unsigned long long used;   // Bytes.
} nvmlMemory_t;

typedef enum nvmlTemperatureSensors_enum {
  NVML_TEMPERATURE_GPU = 0,
} nvmlTemperatureSensors_t;

typedef enum nvmlClockType_enum {
  NVML_CLOCK_GRAPHICS = 0,
  NVML_CLOCK_SM = 1,
  NVML_CLOCK_MEM = 2,
} nvmlClockType_t;

// NVML_DEVICE_UUID_V2_BUFFER_SIZE: large enough for any UUID string NVML returns.
enum { kNvmlDeviceUuidBufferSize = 96 };

// Function types of the symbols looked up with dlsym. Names match NVML's exported symbols.
typedef nvmlReturn_t (*nvmlInit_v2_fn)(void);
typedef nvmlReturn_t (*nvmlShutdown_fn)(void);
typedef const char* (*nvmlErrorString_fn)(nvmlReturn_t result);
typedef nvmlReturn_t (*nvmlDeviceGetCount_v2_fn)(unsigned int* device_count);
typedef nvmlReturn_t (*nvmlDeviceGetHandleByIndex_v2_fn)(unsigned int index, nvmlDevice_t* device);
typedef nvmlReturn_t (*nvmlDeviceGetUUID_fn)(nvmlDevice_t device, char* uuid, unsigned int length);
typedef nvmlReturn_t (*nvmlDeviceGetUtilizationRates_fn)(nvmlDevice_t device, nvmlUtilization_t* utilization);
typedef nvmlReturn_t (*nvmlDeviceGetMemoryInfo_fn)(nvmlDevice_t device, nvmlMemory_t* memory);
typedef nvmlReturn_t (*nvmlDeviceGetTemperature_fn)(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                                    unsigned int* celsius);
typedef nvmlReturn_t (*nvmlDeviceGetPowerUsage_fn)(nvmlDevice_t device, unsigned int* milliwatts);
typedef nvmlReturn_t (*nvmlDeviceGetClockInfo_fn)(nvmlDevice_t device, nvmlClockType_t type, unsigned int* mhz);

}  // extern "C"

#endif  // KILN_BACKENDS_CUDA_NVML_API_H_
