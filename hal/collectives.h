// The collective seam: what an accelerator gives data-parallel training so that its processes can exchange its own
// device's tensors. PyTorch lets a device bring its own c10d backend (ProcessGroupNCCL for CUDA, a vendor's CCL for
// its device); Kiln asks the accelerator for one (Accelerator::MakeCollectiveBackend), and the strategies put it in a
// c10d::ProcessGroup for the device's type, beside Gloo for host values where the device is not the CPU.
//
// What a collective backend must do, on tensors of the accelerator's device type (dense, contiguous, one per call
// unless noted), as c10d::Backend declares it:
//   allreduce (sum, and max on integers), broadcast, allgather (equal sizes), _allgather_base (into one flat
//   tensor), _reduce_scatter_base (sum, out of one flat tensor), barrier;
//   each returns a c10d::Work whose wait() returns once the result is in the tensors (or throws), and whose
//   getFuture() completes with the same result (c10d::Reducer chains on it);
//   each is bounded by CollectiveOptions::timeout: a peer that never arrives makes wait() throw within it, naming
//   the collective (never hang).
// A backend that cannot do some of them says so (Accelerator::SupportedCollectives): the conformance suite then skips
// their checks, saying why, and fsdp, which needs all-gather and reduce-scatter, is refused before training.
// Errors: a backend that cannot be made returns a Status whose message says why and what to do; collectives report
// failures by throwing from wait(), as c10d's own backends do: c10::DistBackendError (or another c10::DistError) when
// a peer failed or did not come within the timeout, c10::Error or std::runtime_error for anything else (a tensor it
// cannot carry). The trainer tells the two apart: the first is a peer to look for, the second the backend's to fix.
//
// Thread-safety: MakeCollectiveBackend is called once per process, from the loop thread, before training; a
// backend's collectives are issued from the loop thread and from autograd's threads (the reducer's hooks), in the
// same order in every process.
#ifndef KILN_HAL_COLLECTIVES_H_
#define KILN_HAL_COLLECTIVES_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "c10/util/intrusive_ptr.h"
#include "hal/devices.h"
#include "torch/csrc/distributed/c10d/Backend.hpp"
#include "torch/csrc/distributed/c10d/Store.hpp"

namespace kiln {

// A network endpoint a host-side transport (Gloo, or a vendor's host path) may use: an interface name ("eth0") or a
// host name or address. The strategy chooses them from the launcher's environment (GLOO_SOCKET_IFNAME, MASTER_ADDR;
// trainer/strategies/gloo_devices.h).
struct HostEndpoint {
  bool is_interface = false;
  std::string name;
};

struct CollectiveOptions {
  // Where the ranks meet and exchange what a backend needs to connect (a unique id, addresses), already prefixed
  // for this backend: keys do not collide with anything else's. Shared; the backend may keep it.
  c10::intrusive_ptr<c10d::Store> store;
  int rank = 0;        // This process's global rank.
  int world_size = 1;  // How many processes take part.
  int device_index = 0;  // The c10 index of the device this process computes on (its LogicalDevice's compute).
  // The bound on each collective, and on joining: the backend's constructor returns (or fails) within it.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  std::vector<HostEndpoint> host_endpoints;  // For host-side transports; at least one.
  // Which of the accelerator's backends (Accelerator::ProcessGroupBackends) to make; "" for its own
  // (ProcessGroupBackend). An accelerator with one backend may ignore it.
  std::string backend;
};

// What a collective backend can do, of hal/collectives.h's list. Everything, by default: a backend lists what it
// lacks by clearing its flags (a vendor's CCL without a reduce-scatter).
struct CollectiveSupport {
  bool allgather = true;       // allgather and _allgather_base.
  bool reduce_scatter = true;  // _reduce_scatter_base.

  // The collectives lacking, by their c10d names ("_reduce_scatter_base"), comma-separated; "" when none.
  std::string Lacking() const;
};

// A Gloo backend for `options` (CPU tensors). What the CPU accelerator gives, and what a device whose memory the host
// can address may stage its tensors through. Where every rank is on this host, it is Gloo wrapped with a
// shared-memory path for CPU tensors (hal/shared_memory_collectives.h; KILN_SHARED_MEMORY_COLLECTIVES=0 keeps plain
// Gloo); it is named "gloo" either way. Returns Unavailable, with c10d's message, when the ranks do not meet within
// the timeout; never throws.
absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> MakeGlooCollectiveBackend(const CollectiveOptions& options);

}  // namespace kiln

#endif  // KILN_HAL_COLLECTIVES_H_
