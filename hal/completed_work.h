// CompletedWork: the c10d::Work of a collective that finished before the call that started it returned, as a
// backend over a library whose calls block (a vendor's CCL through the plugin C API, a staged copy) gives it.
// wait() returns at once; result() and getFuture() hold the tensors the collective wrote, the future already
// completed, so that c10d::Reducer's callbacks chained on it run at once.
#ifndef KILN_HAL_COMPLETED_WORK_H_
#define KILN_HAL_COMPLETED_WORK_H_

#include <vector>

#include "ATen/core/Tensor.h"
#include "c10/util/intrusive_ptr.h"
#include "torch/csrc/distributed/c10d/Work.hpp"

namespace kiln {

// `tensors` are the collective's results (its outputs, or the tensors it reduced in place), already written.
c10::intrusive_ptr<c10d::Work> CompletedWork(int rank, c10d::OpType type, std::vector<at::Tensor> tensors);

}  // namespace kiln

#endif  // KILN_HAL_COMPLETED_WORK_H_
