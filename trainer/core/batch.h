// A batch of examples. Two shapes, as Lightning users write them:
//   - an input and a target: tensors whose first dimension is the batch (`input`, `target`; the target may be
//     undefined for data to predict on);
//   - any structure of tensors (`data`, a c10::IValue): dictionaries with text keys ({"input_ids", "attention_mask",
//     "labels"}), lists and tuples, nested as deep as needed, with plain values (numbers, text, booleans, None)
//     beside the tensors. A language model's, a two-tower model's or a detector's batch is one of these.
// The loops move the whole batch to the device (MapTensors), the precision plugin converts its tensors, and
// TensorDataLoader makes either shape (named tensors give dictionary batches).
#ifndef KILN_TRAINER_CORE_BATCH_H_
#define KILN_TRAINER_CORE_BATCH_H_

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "ATen/core/Tensor.h"
#include "ATen/core/ivalue.h"
#include "c10/core/Device.h"

namespace kiln {

struct Batch {
  at::Tensor input;
  at::Tensor target;  // May be undefined (prediction data).
  // A batch of any other structure (None for an input/target batch): see above.
  c10::IValue data;

  // The examples in the batch: the first dimension of `input`, else of the first tensor in `data` (depth first, a
  // dictionary's entries in order); 0 when there is none.
  int64_t size() const;
  // Whether the batch is `data` rather than input and target.
  bool structured() const { return !data.isNone(); }
  // The tensor under `key` of a dictionary batch (batch["input_ids"]). Throws c10::Error naming the keys there are
  // when `data` is not a dictionary or has no such tensor.
  at::Tensor operator[](std::string_view key) const;
};

// `value` with every tensor in it (at any depth of dictionaries, lists and tuples) replaced by fn(tensor); other
// values as they are. An undefined tensor in `value` is passed to fn too.
c10::IValue MapTensors(const c10::IValue& value, const std::function<at::Tensor(const at::Tensor&)>& fn);
// `batch` with fn applied to its input, target and every tensor of its data.
Batch MapTensors(const Batch& batch, const std::function<at::Tensor(const at::Tensor&)>& fn);
// `batch` on `device`, every tensor of its structure, with copies that need not wait where the source allows (a
// no-op for tensors already there). What the strategies' BatchToDevice and the default transfer_batch_to_device do.
Batch MoveBatch(const Batch& batch, const c10::Device& device);
// Every tensor of `batch`, in MapTensors' order (input, target, then data's), undefined ones left out.
std::vector<at::Tensor> BatchTensors(const Batch& batch);

}  // namespace kiln

#endif  // KILN_TRAINER_CORE_BATCH_H_
