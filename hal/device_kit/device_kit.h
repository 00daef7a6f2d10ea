// Kiln's device kit: a LibTorch out-of-tree device (PrivateUse1) made from a kiln::device_kit::Device (device.h).
//
//   kiln::device_kit::Register(std::make_shared<AcmeDevice>())
//
// registers, in this order and only when the process has no other PrivateUse1 device: the runtime hooks, the device
// guard, the allocator (one per device, each counting its bytes), the kernels LibTorch cannot do without a device
// (empty, empty_strided, _copy_from, _copy_from_and_resize, resize_, as_strided, view, _reshape_alias, set_ on a
// storage, _has_compatible_shallow_copy_type), LibTorch's CPU fallback for every other operator (the operator's
// tensors are copied to the host, the CPU kernel runs, results are copied back: slow and exact), autocast's casts
// (AutocastPrivateUse1, the lists LibTorch's accelerators share), and then the device's name. A vendor replaces the
// fallback operator by operator with its own kernels, registered with torch::Library for PrivateUse1 after Register.
//
// Nothing registers when the library loads: a backend calls Register when its device is first chosen (a Kiln
// accelerator's ParseDevices and SetupDevice; for a plugin, Kiln calls the plugin's Device_Register). That keeps a
// program that links several out-of-tree backends, or one beside CUDA, working: LibTorch has one PrivateUse1 device
// per process, and a named one takes over autograd's streams for the whole process (hal/compat/privateuse1.h).
//
// Errors are returned as messages ("" is success): the kit depends on LibTorch and the standard library alone.
//
// Thread-safety: every function may be called from any thread; Register and RecordRegistration serialise.
#ifndef KILN_HAL_DEVICE_KIT_DEVICE_KIT_H_
#define KILN_HAL_DEVICE_KIT_DEVICE_KIT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hal/device_kit/device.h"

namespace kiln::device_kit {

// The most devices the kit serves (c10::DeviceIndex is 8 bits).
inline constexpr int kMaxDevices = 64;

// Makes `device` this process's PrivateUse1 device and names it device->Name(). "" on success, also when this same
// device (the same object) is registered already. Otherwise why not, before anything is registered: another device
// holds PrivateUse1 (the message names both), the name is not one LibTorch accepts, or Count() is above kMaxDevices.
//
// Register before the process's first backward pass. LibTorch's autograd engine sizes its queues for devices once,
// at the first backward pass, from the devices registered then; on a device registered later every backward fails.
// Register runs one backward pass on device 0 to find out, and when it fails the device is registered but the
// message says so (and so does every later call). Kiln's accelerators register when chosen, which fit and the
// Trainer do before training; a program that trains on the CPU and then on the device in one process chooses the
// device first. Never call it from a static initialiser of a library that is loaded with dlopen: that backward pass
// starts autograd's threads, which wait for the loader's lock that the loading thread holds until the initialiser
// returns, and the process hangs (seen 2026-12-06 with a self-registering library adopted at run time). Never throws.
std::string Register(std::shared_ptr<Device> device);

// Register without its backward-pass probe, for a vendor's library that registers its device from a static
// initialiser when it is loaded, as LibTorch extensions do (torch_npu, OpenReg): there the probe would hang (above).
// Whoever loads the library runs the probe (ProbeAutograd, below) once the loader has returned: Kiln's
// AdoptPrivateUse1Library does (hal/privateuse1_library.h). Never throws.
std::string RegisterWhenLoaded(std::shared_ptr<Device> device);

// One backward pass on PrivateUse1 device 0: "" when it ran, else LibTorch's message (it names
// "device_ready_queues_" when the device was registered after the process's first backward pass). What Register runs
// after registering, and what the loader of a library that used RegisterWhenLoaded runs once dlopen has returned.
// Never throws.
std::string ProbeAutograd();

// What Register would say about a device named `name`, without registering anything: "" when PrivateUse1 is free or
// is `name`'s already. A probe for an accelerator's CheckAvailable. Never throws.
std::string CheckCanRegister(const std::string& name);

// Records that a device named `name` was registered with LibTorch outside this copy of the kit (a plugin compiles
// its own copy in): `origin` says by whom ("accelerator plugin /x/libacme.so"), for the message that refuses the
// next device. Kiln's plugin loader calls it after a plugin's Device_Register.
void RecordRegistration(const std::string& name, const std::string& origin);

// The name of the device this process registered through the kit (or recorded), or "" when none.
std::string RegisteredName();

// Names PrivateUse1 `name` without registering a device (for a backend that registers its device itself). "" when
// named, also when it is `name` already; otherwise why not. Never throws.
std::string NamePrivateUse1(const std::string& name);

// The name LibTorch gives PrivateUse1 devices now: "privateuseone", or the registered name.
std::string PrivateUse1Name();

// Registers LibTorch's PrivateUse1 runtime hooks, answering the device count from `device_count`: built; available
// while it is above 0; every device has its primary context; one default generator per device, which
// at::manual_seed seeds (a device computing through the CPU fallback draws from the CPU's generator, so these hold
// seeds only). Register does this itself; for a backend that registers its device by hand. Call once per process.
void RegisterRuntimeHooks(std::function<int()> device_count);

struct MemoryStats {
  int64_t allocated_bytes = 0;       // Bytes in use now (as requested, not rounded).
  int64_t peak_allocated_bytes = 0;  // Most bytes in use at once since the last ResetPeakMemoryStats.
  int64_t active_blocks = 0;         // Allocations not yet freed.
  int64_t total_blocks = 0;          // Allocations ever made (never reset).
};

// Device `index`'s counters (0 <= index < kMaxDevices; zeros for a device never used). Throws c10::Error for an index
// out of range.
MemoryStats GetMemoryStats(int index);
// Sets device `index`'s peak to the bytes in use now.
void ResetPeakMemoryStats(int index);

// One statistic of a device: `name` is a string literal, lower_snake_case with its unit (Kiln's statistic names).
struct Statistic {
  const char* name;
  double value;
};

// Device `index`'s statistics, as every backend made with the kit reports them: memory_allocated_bytes,
// memory_allocated_peak_bytes (since the last ResetPeakMemoryStats), memory_active_blocks, memory_total_blocks (from
// GetMemoryStats), cpu_fallback_calls and device_to_host_copies (all devices together), and memory_total_bytes when
// the device knows its capacity (Device::MemoryCapacity). Throws c10::Error for an index out of range, as
// GetMemoryStats.
std::vector<Statistic> DeviceStatistics(int index);

// Operator calls that went through the CPU fallback in this process.
int64_t CpuFallbackCalls();

// Times the host read the device's memory in this process: a copy from the device to the CPU (a .to(cpu), a
// checkpoint's snapshot), or an operator whose result is not a tensor (item()'s _local_scalar_dense, is_nonzero). On
// a real device each waits for the device to finish what was queued. The CPU fallback's own copies, which are how an
// operator without a kernel computes, do not count.
int64_t DeviceToHostCopies();

// The calling thread's current device (0 until set), and setting it (also calls Device::SetCurrent). SetCurrentDevice
// checks nothing: callers check the index first.
int CurrentDevice();
void SetCurrentDevice(int index);

}  // namespace kiln::device_kit

#endif  // KILN_HAL_DEVICE_KIT_DEVICE_KIT_H_
