// What an out-of-tree device (c10::DeviceType::PrivateUse1) needs from LibTorch 2.x, piece by piece, for a backend
// that registers its device by hand. A new backend uses Kiln's device kit instead (hal/device_kit/device_kit.h),
// which makes the whole device from its runtime's count, memory and copies, and registers it when it is chosen; the
// naming and runtime hooks here are the kit's.
//   device name          the backend's own (c10::register_privateuse1_backend)
//   autocast             AutocastPrivateUse1 (the backend registers its casts)
//   c10::Allocator       allocate() not const, copy_data() required
//   SymInt sizes         c10::asIntArrayRefSlow(sizes, file, line)
//   runtime hooks        PrivateUse1HooksInterface, required once the device is named: at::manual_seed asks it for
//                        the device count and a default generator per device
//   memory statistics    c10::DeviceAllocator (LibTorch 2.9 and newer; 2.8 has no common interface for them)
// (In 0.1.0, this file also hid LibTorch 1.13's differences; CHANGELOG.md.)
//
// Naming has a cost beyond the name: LibTorch 2.x then takes PrivateUse1 for the process's accelerator
// (at::getAccelerator), and from then on every backward over CUDA tensors in the process fails inside autograd
// ("opt_ready_stream && opt_parent_stream INTERNAL ASSERT FAILED", pytorch/pytorch#161129; measured on an H200 with
// LibTorch 2.11, docs/backends.md "GPU check"). So a backend that can be linked beside CUDA names its device when it
// is first used (the accelerator's ParseDevices and SetupDevice), not when its library loads, and answers
// CheckAvailable, a probe, with CheckPrivateUse1Name, which names nothing.
//
// Thread-safety: NamePrivateUse1Backend must run before any tensor exists on the device; the rest may be called
// from any thread.
#ifndef KILN_HAL_COMPAT_PRIVATEUSE1_H_
#define KILN_HAL_COMPAT_PRIVATEUSE1_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "c10/core/Allocator.h"
#include "c10/core/SymIntArrayRef.h"
#include "c10/util/ArrayRef.h"

namespace kiln::compat {

// Every LibTorch Kiln builds against (2.8 or newer) lets a PrivateUse1 backend name its devices. Kept for backends
// written against the release that also supported LibTorch 1.13, where it was false; always true now.
[[deprecated("always true: Kiln needs LibTorch 2.x, which names PrivateUse1 devices")]] inline constexpr bool
    kCanNamePrivateUse1 = true;

// Gives PrivateUse1 devices the name `name` ("virtual_npu:0" instead of "privateuseone:0"). OK too when the name is
// already `name`; FailedPrecondition when another backend named PrivateUse1 first (one process has one PrivateUse1
// backend). Never throws.
absl::Status NamePrivateUse1Backend(absl::string_view name);

// What NamePrivateUse1Backend(name) would return, without naming anything: a probe for CheckAvailable. Never throws.
absl::Status CheckPrivateUse1Name(absl::string_view name);

// Whether PrivateUse1's registered allocator keeps memory statistics LibTorch can read (it is a c10::DeviceAllocator).
// False without an allocator, and always under LibTorch 2.8. Never throws.
bool PrivateUse1AllocatorHasStats();

// Device `index`'s memory statistics from PrivateUse1's allocator, as DeviceStats keys: memory_allocated_bytes,
// memory_allocated_peak_bytes, memory_reserved_bytes, memory_active_blocks, memory_alloc_retries, and
// memory_free_bytes and memory_total_bytes where the allocator knows them. nullopt when it keeps none
// (PrivateUse1AllocatorHasStats) or reading them failed. Never throws.
std::optional<std::map<std::string, double>> PrivateUse1AllocatorStats(int index);

// What the runtime hooks of LibTorch 2.x are answered from.
struct PrivateUse1Runtime {
  // How many devices this process has; 0 when none can be used. Must not throw.
  std::function<int()> device_count;
};

// Registers LibTorch's PrivateUse1 hooks, answering from `runtime`: built; available while device_count() > 0;
// every device has its primary context; one default generator per device, which at::manual_seed seeds (a device
// computing through the CPU's kernels draws from the CPU's generator, so these hold seeds only). Call once per
// process, when the device is first chosen (device_kit::RegisterRuntimeHooks; device_kit::Register calls it itself).
void RegisterPrivateUse1Runtime(PrivateUse1Runtime runtime);

// The name LibTorch gives PrivateUse1 devices now: "privateuseone", or the registered name.
std::string PrivateUse1Name();

// The sizes of a kernel's SymInt arguments as plain integers; throws c10::Error, as LibTorch does, for a symbolic
// size.
c10::IntArrayRef AsIntArrayRef(c10::SymIntArrayRef sizes);

// A device memory allocator as a c10::Allocator: implement Allocate(); copy_data copies host memory with memcpy,
// which is right for a device whose memory the host can address, and must be overridden by one whose memory it
// cannot.
class DeviceAllocator : public c10::Allocator {
 public:
  // Contract: as c10::Allocator::allocate (a null DataPtr for size 0; throws c10::Error when out of memory).
  virtual c10::DataPtr Allocate(size_t size) const = 0;

  c10::DataPtr allocate(size_t size) final { return Allocate(size); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
};

}  // namespace kiln::compat

#endif  // KILN_HAL_COMPAT_PRIVATEUSE1_H_
