// The c10d backends a vendor's shared library defines, found by reading the library, as a C++ program must find them:
// LibTorch's C++ has no registry of c10d backends by name (torch.distributed.Backend.register_backend is Python's;
// checked in LibTorch 2.11), so a vendor's library that registers "occl" or "hccl" does so from its Python package,
// with a creator function its library exports. Kiln finds those creators by their signature, c10d's
//
//   c10::intrusive_ptr<c10d::Backend> Create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
//                                            const std::chrono::duration<float>& timeout)
//
// (what register_backend calls: PyTorch's out-of-tree backend ProcessGroupOCCL::createProcessGroupOCCL, the
// cpp-extension tutorial's BackendDummy::createBackendDummy), and names each backend as c10d's conventions do: the
// class after "ProcessGroup" or "Backend" in lower case ("occl", "dummy"), or the function after "createProcessGroup"
// or "createBackend". Nobody writes a mangled name: the library's dynamic symbols are demangled and matched.
//
// Thread-safety: every function may be called from any thread. Nothing here throws.
#ifndef KILN_HAL_C10D_CREATORS_H_
#define KILN_HAL_C10D_CREATORS_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "c10/util/intrusive_ptr.h"
#include "hal/collectives.h"

namespace kiln {

// c10d's creator signature (above). The function must return a c10d::Backend (its own class derived from it, with
// c10d::Backend its first base), as register_backend's creators do.
using C10dCreatorFunction = c10::intrusive_ptr<c10d::Backend> (*)(const c10::intrusive_ptr<c10d::Store>&, int, int,
                                                                  const std::chrono::duration<float>&);

struct C10dCreator {
  std::string backend;   // "occl"; "" when the function's name follows no convention (it is listed, never chosen).
  std::string function;  // The creator's readable name: "c10d::ProcessGroupOCCL::createProcessGroupOCCL".
  C10dCreatorFunction create = nullptr;
};

// The creators the shared library `path` exports, in the order of its symbol table. The library must be loaded already
// (dlopen'ed by the caller, by that path or soname; it is not loaded here). Errors: a file that is not a 64-bit ELF shared library,
// or that is not loaded.
absl::StatusOr<std::vector<C10dCreator>> FindC10dCreators(const std::string& path);

// The backend name c10d's conventions give the creator `function` (a readable qualified name), or "".
std::string C10dBackendNameOf(const std::string& function);

// Calls `creator` with Kiln's store, rank, world size and timeout, as c10d's register_backend passes them. Errors:
// Unavailable when the ranks did not meet (c10d's DistError, or a timeout), Internal with the backend's message for
// anything else it threw, and for a creator that returned no backend.
absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> CreateC10dBackend(const C10dCreator& creator,
                                                                    const CollectiveOptions& options);

}  // namespace kiln

#endif  // KILN_HAL_C10D_CREATORS_H_
