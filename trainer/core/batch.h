// A batch of examples: inputs and targets, as tensors whose first dimension is the batch.
#ifndef KILN_TRAINER_CORE_BATCH_H_
#define KILN_TRAINER_CORE_BATCH_H_

#include "ATen/core/Tensor.h"

namespace kiln {

struct Batch {
  at::Tensor input;
  at::Tensor target;  // May be undefined (prediction data).

  int64_t size() const { return input.defined() && input.dim() > 0 ? input.size(0) : 0; }
};

}  // namespace kiln

#endif  // KILN_TRAINER_CORE_BATCH_H_
