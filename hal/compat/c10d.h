// c10d (torch.distributed's C++ core): ProcessGroupGloo is a c10d::Backend, which a c10d::ProcessGroup dispatches
// to per device type. Kiln's strategies hold a c10d::ProcessGroup. Where LibTorch 2.8 and 2.11 differ (Gloo's
// collective timeout, c10d::Reducer's constructor), the functions here take either.
#ifndef KILN_HAL_COMPAT_C10D_H_
#define KILN_HAL_COMPAT_C10D_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "c10/util/intrusive_ptr.h"
#include "torch/csrc/distributed/c10d/Backend.hpp"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"
#include "torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"
#include "torch/csrc/distributed/c10d/Store.hpp"

namespace c10d {
class Reducer;
}  // namespace c10d

namespace kiln::compat {

// A Gloo backend of `size` ranks, this one `rank`, with `options` (its devices, and the timeout of each collective),
// meeting through `store`. Blocks until every rank has connected or `join_timeout` has passed (Gloo's own connect
// included); throws what c10d throws (c10::Error, std::runtime_error) when they do not meet. `options` is not
// changed. Gloo carries CPU tensors (and CUDA ones, staged through the host).
c10::intrusive_ptr<c10d::Backend> MakeGlooBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                  const c10::intrusive_ptr<c10d::ProcessGroupGloo::Options>& options,
                                                  std::chrono::milliseconds join_timeout);

// A process group of `size` ranks, this one `rank`, that runs every collective on Gloo with `options` (its
// devices, and the timeout of each collective), meeting through `store`. Blocks until every rank has connected or
// `join_timeout` has passed (Gloo's own connect included); throws what c10d throws (c10::Error,
// std::runtime_error) when they do not meet. `options` is not changed.
c10::intrusive_ptr<c10d::ProcessGroup> MakeGlooProcessGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    const c10::intrusive_ptr<c10d::ProcessGroupGloo::Options>& options, std::chrono::milliseconds join_timeout);

// What PyTorch's DistributedDataParallel gives c10d::Reducer, in C++.
struct ReducerOptions {
  size_t first_bucket_bytes = 1024 * 1024;  // DDP's _DEFAULT_FIRST_BUCKET_BYTES.
  size_t bucket_bytes = 25 * 1024 * 1024;   // DDP's bucket_cap_mb=25.
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
};

// PyTorch's own DDP gradient reducer (torch/csrc/distributed/c10d/reducer.hpp) over `parameters` (the same, in the
// same order, on one device, in every rank), its buckets assigned as DDP assigns them (by size, in reverse order of
// the parameters). The group's backend for the parameters' device type carries the all-reduces. Throws c10::Error
// as the Reducer does.
std::shared_ptr<c10d::Reducer> MakeReducer(const std::vector<at::Tensor>& parameters,
                                           const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                           const ReducerOptions& options);

}  // namespace kiln::compat

#endif  // KILN_HAL_COMPAT_C10D_H_
