// An accelerator made from a LibTorch PrivateUse1 library as a vendor ships it (Ascend's torch_npu, Gaudi's bridge,
// PyTorch's OpenReg): a shared library that registers its device with c10 when it is loaded (kernels, allocator,
// device guard, runtime hooks). Kiln adopts it from "this library, this device name":
//
//   fit --accelerator_library=/opt/acme/lib/libacme_torch.so --accelerator=acme_npu --devices=2 --strategy=ddp
//   kiln::Trainer trainer({.accelerator = kiln::AdoptPrivateUse1Library("/opt/acme/lib/libacme_torch.so", "acme_npu")});
//   kiln_backends(name = "kiln_backends", libraries = {"acme_npu": "/opt/acme/lib/libacme_torch.so"})  (WORKSPACE)
//
// The library is loaded when the accelerator is chosen (its devices parsed or set up), never when the program loads,
// so that a program may name several and use one (LibTorch has one PrivateUse1 device per process). Everything else
// comes from what the library registered with c10: the device count, the current device and synchronisation from its
// device guard (c10::impl::VirtualGuardImpl), memory statistics from its allocator where it is a c10::DeviceAllocator,
// random numbers from its PrivateUse1 hooks (at::manual_seed seeds them). When it loads, one log line says what the
// library lacks ("acme_npu (libacme_torch.so) lacks: memory statistics (its allocator is not a
// c10::DeviceAllocator)"). Data-parallel training runs on the library's own c10d backend when it exports one creator
// (hal/c10d_creators.h: "occl" from c10d::ProcessGroupOCCL::createProcessGroupOCCL), called with Kiln's store, rank,
// world size and timeout; process_group_backend chooses among several. Without one, and as "<name>_staged" always, on
// Kiln's staged collectives (Gloo over host copies, hal/staged_collectives.h).
//
// Thread-safety: as hal/accelerator.h; loading is serialised.
#ifndef KILN_HAL_PRIVATEUSE1_LIBRARY_H_
#define KILN_HAL_PRIVATEUSE1_LIBRARY_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "hal/accelerator.h"
#include "hal/registry.h"

namespace kiln {

// The accelerator `name` (also the device's: tensors on "<name>:0") made from the library at `path` (absolute, or
// relative to the working directory). Nothing is loaded here; the library is checked (a file that exists) by
// CheckAvailable and loaded when the accelerator is chosen. A library that registers no device, or names its device
// otherwise, or a PrivateUse1 device another library registered first, is an error then, naming both.
std::shared_ptr<Accelerator> AdoptPrivateUse1Library(const std::string& path, const std::string& name);

// Registers AdoptPrivateUse1Library(path, name) in `registry` under `name`, loading nothing. InvalidArgument for a name
// LibTorch would not take as a device's (a lower-case letter, then lower-case letters, digits and '_') or a path
// without a '/' (no directory is searched); the registry's error for a name already taken.
absl::Status RegisterPrivateUse1Library(AcceleratorRegistry& registry, const std::string& path, const std::string& name);

// RegisterPrivateUse1Library from "NAME=PATH", the conformance suites' form (kiln_accelerator_conformance_test's
// `library`): PATH is a path even without a '/' (a file in the workspace's root package). InvalidArgument without '='.
absl::Status RegisterPrivateUse1LibrarySpec(AcceleratorRegistry& registry, const std::string& spec);

namespace internal {
// RegisterPrivateUse1Library into AcceleratorRegistry::Default() at static initialisation; a failure becomes one of its
// startup errors (said when an accelerator is chosen), as KILN_REGISTER_ACCELERATOR's do.
bool RegisterPrivateUse1LibraryAtStartup(const char* name, const char* path);
}  // namespace internal

// The statistics of PrivateUse1 device `index` from what its library registered: from its allocator when it is a
// c10::DeviceAllocator (memory_allocated_bytes, memory_allocated_peak_bytes, memory_reserved_bytes,
// memory_active_blocks, memory_alloc_retries; memory_free_bytes and memory_total_bytes where it knows them),
// otherwise memory_stats_available = 0. For any PrivateUse1 device, not only those Kiln's device kit makes. Never
// throws.
DeviceStats PrivateUse1DeviceStats(int index);

}  // namespace kiln

#define KILN_REGISTER_PRIVATEUSE1_LIBRARY_CONCAT_(a, b) a##b
#define KILN_REGISTER_PRIVATEUSE1_LIBRARY_NAME_(line) \
  KILN_REGISTER_PRIVATEUSE1_LIBRARY_CONCAT_(kiln_registered_privateuse1_library_, line)
// Registers the PrivateUse1 library at `path` as accelerator `name` in AcceleratorRegistry::Default() when the program
// starts, loading nothing (kiln_backends' `libraries` attribute writes one such line per library).
#define KILN_REGISTER_PRIVATEUSE1_LIBRARY(name, path)                                           \
  [[maybe_unused]] static const bool KILN_REGISTER_PRIVATEUSE1_LIBRARY_NAME_(__LINE__) = \
      ::kiln::internal::RegisterPrivateUse1LibraryAtStartup(name, path)

#endif  // KILN_HAL_PRIVATEUSE1_LIBRARY_H_
