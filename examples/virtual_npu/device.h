// The virtual NPU's device: how many devices this process has, and the device itself, made with Kiln's device kit
// (hal/device_kit) from host memory.
//
// The virtual NPU is an out-of-tree LibTorch device: tensors live under c10::DeviceType::PrivateUse1 (named
// "virtual_npu:<index>"), in host memory obtained from its own allocator, and every operator computes through
// LibTorch's CPU kernels (the kit's CPU fallback). Its numbers are therefore the CPU's, bit for bit, which is what
// makes it a useful sample: a run on it can be checked exactly against a run on the CPU. Everything but its memory
// and copies (device.cc's HostMemoryDevice, some 30 lines) is the kit's.
//
// Configuration, read once per process from the environment:
//   VIRTUAL_NPU_DEVICES   number of virtual devices, 1..64 (default 2).
//   VIRTUAL_NPU_PRIORITY  the accelerator's priority for Kiln's "auto" (default -10: below cpu's 0, so "auto" keeps
//                         choosing the CPU unless the user raises it; see virtual_npu_accelerator.h).
//   VIRTUAL_NPU_MEMORY_LIMIT  a fake's knob: bytes each device may hold at once (default: unset, no limit). An
//                         allocation that would take a device past it fails as a real device's does when its memory
//                         runs out (LibTorch's c10::OutOfMemoryError, from the kit), so that what handles running out
//                         of device memory (the batch-size finder, trainer/tuner.h) can be tested without a GPU. The
//                         limit counts the bytes asked for, as the statistic memory_allocated_bytes does; it is
//                         reported as memory_total_bytes.
// An invalid value does not crash the process: the device reports it as the reason it is unavailable.
//
// Thread-safety: every function may be called from any thread. The current device is per thread, as in CUDA.
#ifndef VIRTUAL_NPU_DEVICE_H_
#define VIRTUAL_NPU_DEVICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "c10/core/Device.h"

namespace virtual_npu {

inline constexpr c10::DeviceType kDeviceType = c10::DeviceType::PrivateUse1;
inline constexpr int kDefaultDeviceCount = 2;
inline constexpr int kMaxDevices = 64;
inline constexpr char kDevicesVariable[] = "VIRTUAL_NPU_DEVICES";

// Parses a VIRTUAL_NPU_DEVICES value; null or empty means the default. InvalidArgument names the value and the
// accepted range. Pure.
absl::StatusOr<int> ParseDeviceCount(const char* value);

inline constexpr char kMemoryLimitVariable[] = "VIRTUAL_NPU_MEMORY_LIMIT";

// Parses a VIRTUAL_NPU_MEMORY_LIMIT value: bytes, an integer >= 1; null or empty means no limit (0). InvalidArgument
// names the value and what is accepted. Pure.
absl::StatusOr<int64_t> ParseMemoryLimit(const char* value);

// This process's memory limit per device in bytes, 0 for none (VIRTUAL_NPU_MEMORY_LIMIT, read on first use), or the
// error that the variable gives. Never throws.
const absl::StatusOr<int64_t>& MemoryLimit();

// This process's device count (VIRTUAL_NPU_DEVICES, read on first use), or the error that the variable gives.
// Never throws.
const absl::StatusOr<int>& DeviceCount();

// DeviceCount(), or 0 when the variable is invalid. Never throws.
int DeviceCountOrZero() noexcept;

// The name LibTorch gives the device type (c10::register_privateuse1_backend).
inline constexpr char kDeviceName[] = "virtual_npu";

// Registers the device with LibTorch and names it kDeviceName on the first call (the accelerator calls it when the
// device is chosen, before it hands out a device) and returns OK, or why it could not (another out-of-tree device
// holds PrivateUse1 in this process: the message names both). Not when the library loads: a program may link this
// backend beside CUDA or another out-of-tree backend (hal/device_kit/device_kit.h). Never throws.
absl::Status RegistrationStatus();

// OK when `device` is a virtual NPU device that exists in this process; otherwise InvalidArgument saying which
// devices exist. Never throws.
absl::Status CheckDevice(const c10::Device& device);

// The device's own trace (the accelerator's StartDeviceTrace and StopDeviceTrace): while device `index` traces, each
// copy to, from or within its memory is recorded with its wall-clock time (system_clock, ns since the epoch), named as
// CUDA's traces name copies ("Memcpy HtoD", "Memcpy DtoH", "Memcpy DtoD"). Copies are the only work the virtual NPU
// does itself (its operators run on the CPU's kernels, which LibTorch's profiler sees already). Not tracing, a copy
// costs one relaxed atomic load more. Thread-safe. `index` must be a device of this process (CheckDevice).
struct CopyRecord {
  std::string name;
  int64_t start_ns = 0;
  int64_t duration_ns = 0;
};
void StartTrace(int index);
std::vector<CopyRecord> StopTrace(int index);  // The copies recorded since StartTrace; stops recording.

}  // namespace virtual_npu

#endif  // VIRTUAL_NPU_DEVICE_H_
