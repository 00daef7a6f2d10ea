// c10d (torch.distributed's C++ core), as both LibTorch versions Kiln supports have it. In LibTorch 1.13,
// ProcessGroupGloo is a c10d::ProcessGroup; in 2.x it is a c10d::Backend, which a ProcessGroup dispatches to per
// device type. Kiln's strategies hold a c10d::ProcessGroup either way. The store, the Gloo options and the
// collectives (allreduce, broadcast_coalesced) are spelt the same in both.
#ifndef KILN_HAL_COMPAT_C10D_H_
#define KILN_HAL_COMPAT_C10D_H_

#include <chrono>

#include "c10/util/intrusive_ptr.h"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"
#include "torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"
#include "torch/csrc/distributed/c10d/Store.hpp"

namespace kiln::compat {

// A process group of `size` ranks, this one `rank`, that runs every collective on Gloo with `options` (its
// devices, and the timeout of each collective), meeting through `store`. Blocks until every rank has connected or
// `join_timeout` has passed (Gloo's own connect included); throws what c10d throws (c10::Error,
// std::runtime_error) when they do not meet. `options` is not changed.
c10::intrusive_ptr<c10d::ProcessGroup> MakeGlooProcessGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    const c10::intrusive_ptr<c10d::ProcessGroupGloo::Options>& options, std::chrono::milliseconds join_timeout);

}  // namespace kiln::compat

#endif  // KILN_HAL_COMPAT_C10D_H_
