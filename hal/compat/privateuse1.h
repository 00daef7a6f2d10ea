// What an out-of-tree device (c10::DeviceType::PrivateUse1) gets from each LibTorch version Kiln supports, in one
// place, so that a backend's own code has no version checks:
//
//                        LibTorch 1.13                        LibTorch 2.x
//   device name          always "privateuseone"               the backend's own (c10::register_privateuse1_backend)
//   autocast             none                                 AutocastPrivateUse1 (the backend registers its casts)
//   c10::Allocator       allocate() const, no copy_data()     allocate() not const, copy_data() required
//   SymInt sizes         c10::asIntArrayRefSlow(sizes)        c10::asIntArrayRefSlow(sizes, file, line)
//   checkpoints          load only with a CPU map location    load straight onto the named device
//   runtime hooks        none                                 PrivateUse1HooksInterface, required once the device
//                                                             is named: at::manual_seed asks it for the device
//                                                             count and a default generator per device
//
// Thread-safety: NamePrivateUse1Backend is meant for a backend's static initialiser, before any tensor exists on the
// device; the rest may be called from any thread.
#ifndef KILN_HAL_COMPAT_PRIVATEUSE1_H_
#define KILN_HAL_COMPAT_PRIVATEUSE1_H_

#include <cstddef>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "c10/core/Allocator.h"
#include "c10/core/SymIntArrayRef.h"
#include "c10/util/ArrayRef.h"
#include "torch/version.h"

namespace kiln::compat {

// Whether this LibTorch lets a PrivateUse1 backend give its devices a name of its own.
inline constexpr bool kCanNamePrivateUse1 = TORCH_VERSION_MAJOR >= 2;

// Gives PrivateUse1 devices the name `name` ("virtual_npu:0" instead of "privateuseone:0"), where this LibTorch
// can (kCanNamePrivateUse1); elsewhere it does nothing. OK too when the name is already `name`; FailedPrecondition
// when another backend named PrivateUse1 first (one process has one PrivateUse1 backend). Never throws.
absl::Status NamePrivateUse1Backend(absl::string_view name);

// What the runtime hooks of LibTorch 2.x are answered from.
struct PrivateUse1Runtime {
  // How many devices this process has; 0 when none can be used. Must not throw.
  std::function<int()> device_count;
};

// Registers LibTorch 2.x's PrivateUse1 hooks, answering from `runtime`: built; available while device_count() > 0;
// every device has its primary context; one default generator per device, which at::manual_seed seeds (a device
// computing through the CPU's kernels draws from the CPU's generator, so these hold seeds only). Does nothing under
// LibTorch 1.13, which has no such hooks. Call once per process, from the backend's static initialiser.
void RegisterPrivateUse1Runtime(PrivateUse1Runtime runtime);

// The name LibTorch gives PrivateUse1 devices now: "privateuseone", or the registered name.
std::string PrivateUse1Name();

// The sizes of a kernel's SymInt arguments as plain integers; throws c10::Error, as LibTorch does, for a symbolic
// size.
c10::IntArrayRef AsIntArrayRef(c10::SymIntArrayRef sizes);

// A device memory allocator for either version's c10::Allocator: implement Allocate(); copy_data (2.x) copies host
// memory with memcpy, which is right for a device whose memory the host can address, and must be overridden by one
// whose memory it cannot.
class DeviceAllocator : public c10::Allocator {
 public:
  // Contract: as c10::Allocator::allocate (a null DataPtr for size 0; throws c10::Error when out of memory).
  virtual c10::DataPtr Allocate(size_t size) const = 0;

#if TORCH_VERSION_MAJOR >= 2
  c10::DataPtr allocate(size_t size) final { return Allocate(size); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#else
  c10::DataPtr allocate(size_t size) const final { return Allocate(size); }
#endif
};

}  // namespace kiln::compat

#endif  // KILN_HAL_COMPAT_PRIVATEUSE1_H_
