// What a vendor writes to make an out-of-tree LibTorch device (c10::DeviceType::PrivateUse1) with Kiln's device kit:
// one class, kiln::device_kit::Device, with the few calls only the device's runtime can make (how many devices,
// memory, copies). The kit (device_kit.h) turns it into the rest of a LibTorch device: the device's name, its
// allocator with statistics per device, its device guard, the copy, view and factory kernels, every other operator
// through LibTorch's CPU fallback until the vendor registers a real kernel for it, autocast's casts, and the runtime
// hooks LibTorch asks a named device for.
//
// The kit depends on LibTorch and the C++ standard library alone (no Kiln library, no Abseil), so that a plugin built
// outside Bazel can compile it in: hal/device_kit/*.cc and *.h, against the same LibTorch as the Kiln that loads it.
//
// Thread-safety: the kit calls a Device from any thread, several at once; a Device must allow that.
#ifndef KILN_HAL_DEVICE_KIT_DEVICE_H_
#define KILN_HAL_DEVICE_KIT_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::device_kit {

enum class CopyKind {
  kHostToDevice,    // dst is device memory, src host memory.
  kDeviceToHost,    // dst is host memory, src device memory.
  kDeviceToDevice,  // both on the same device.
};

class Device {
 public:
  virtual ~Device() = default;

  // The name LibTorch gives the device type: "acme_npu" makes tensors' devices "acme_npu:0", "acme_npu:1", ...
  // Lower-case letters, digits and '_'. Constant.
  virtual std::string Name() const = 0;

  // How many devices this process can use; 0 when none. Cheap, called often, never throws.
  virtual int Count() const noexcept = 0;

  // `bytes` (more than 0) of memory on device `index` (0 <= index < Count()), or nullptr when the device is out of
  // memory (the kit then throws LibTorch's out-of-memory error, naming the device and the bytes in use).
  virtual void* Allocate(int index, size_t bytes) = 0;

  // Returns memory that Allocate(index, ...) gave. Never throws.
  virtual void Free(int index, void* data) noexcept = 0;

  // Copies `bytes` bytes from `src` to `dst` (see CopyKind for where each is); `index` is the device's. The copy is
  // complete when this returns: the kit reads host buffers and frees staging memory right after. May throw
  // c10::Error (TORCH_CHECK) on failure; the operator that copied then fails with that error.
  virtual void Copy(void* dst, const void* src, size_t bytes, CopyKind kind, int index) = 0;

  // Optional. The calling thread now works on device `index` (LibTorch's DeviceGuard, a module's to(device)). The kit
  // keeps the current device per thread itself; a runtime with its own notion of it sets it here.
  virtual void SetCurrent(int index) {}

  // Optional. Returns when all work queued on device `index` is done. The kit's device has one stream per device.
  virtual void Synchronize(int index) {}

  // Optional. The bytes device `index` has in all, or -1 when unknown: reported as the statistic memory_total_bytes
  // beside the kit's own counters. Cheap; never throws.
  virtual int64_t MemoryCapacity(int index) const noexcept { return -1; }
};

}  // namespace kiln::device_kit

#endif  // KILN_HAL_DEVICE_KIT_DEVICE_H_
