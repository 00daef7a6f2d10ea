// What the fake NVML library (fake_nvml.cc, built as libfake_nvml.so) reports, as formulas of the device index, so
// that tests derive every expected statistic instead of repeating numbers. Test support only.
//
// The fake stands in for NVIDIA's libnvidia-ml.so.1 at the HAL's hardware boundary, on machines without a GPU. It
// proves that Kiln's loader, symbol lookup, device mapping and unit conversions work end to end; it says nothing
// about whether the real library's ABI matches nvml_api.h (that needs a machine with NVIDIA's driver).
#ifndef KILN_BACKENDS_CUDA_TESTING_FAKE_NVML_VALUES_H_
#define KILN_BACKENDS_CUDA_TESTING_FAKE_NVML_VALUES_H_

#include <string>

namespace kiln::cuda::fake_nvml {

// Devices the fake reports.
inline constexpr int kDeviceCount = 3;

// The fake refuses the power reading of this device with NVML_ERROR_NOT_SUPPORTED, as some GPUs do.
inline constexpr int kDeviceWithoutPower = 1;

// When this environment variable is set, nvmlInit_v2 fails with NVML_ERROR_DRIVER_NOT_LOADED.
inline constexpr char kFailInitVariable[] = "KILN_FAKE_NVML_FAIL_INIT";
inline constexpr char kDriverNotLoadedText[] = "Driver Not Loaded";

inline std::string Uuid(int i) { return "GPU-fa4e0000-0000-4000-8000-00000000000" + std::to_string(i); }
constexpr unsigned int UtilizationGpuPercent(int i) { return 10u * (i + 1); }
constexpr unsigned int UtilizationMemoryPercent(int i) { return 5u * (i + 1); }
constexpr unsigned long long MemoryTotalBytes(int i) { return (16ull << 30) * (i + 1); }
constexpr unsigned long long MemoryUsedBytes(int i) { return (1ull << 30) * (i + 1); }
constexpr unsigned long long MemoryFreeBytes(int i) { return MemoryTotalBytes(i) - MemoryUsedBytes(i); }
constexpr unsigned int TemperatureCelsius(int i) { return 40u + i; }
constexpr unsigned int PowerMilliwatts(int i) { return 100500u + 1000u * i; }
constexpr unsigned int ClockGraphicsMhz(int i) { return 1400u + i; }
constexpr unsigned int ClockSmMhz(int i) { return 1500u + i; }
constexpr unsigned int ClockMemoryMhz(int i) { return 5000u + i; }

}  // namespace kiln::cuda::fake_nvml

#endif  // KILN_BACKENDS_CUDA_TESTING_FAKE_NVML_VALUES_H_
