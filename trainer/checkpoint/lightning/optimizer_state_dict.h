// An optimizer's state in the layout PyTorch's Optimizer.state_dict() gives, for LibTorch's optimizers:
//
//   {"state": {<index>: {"step": <float64 tensor>, "exp_avg": <tensor>, ...}},
//    "param_groups": [{"lr": ..., "betas": (..., ...), ..., "params": [<index>, ...]}]}
//
// Parameters are numbered across the groups in order, as PyTorch does, and each parameter's state and each group's
// options carry PyTorch's names, so that torch.optim.<Same>.load_state_dict accepts what Kiln writes and Kiln loads
// what PyTorch wrote. Differences, all of which load both ways:
//   - "step" is a float64 tensor (PyTorch writes float32, which stops counting exactly past 2^24 steps); either is
//     read.
//   - The options LibTorch has no counterpart for are written with PyTorch's defaults (maximize False, foreach and
//     fused None, capturable and differentiable False) and, on reading, must have those values, except foreach,
//     fused, capturable and differentiable, which only choose a kernel.
// Covered: SGD, Adam, AdamW, RMSprop, Adagrad. Any other optimizer (LBFGS, a user's own) is written as LibTorch's own
// serialisation, in a uint8 tensor under "kiln_libtorch_archive", beside empty "state" and its "param_groups".
#ifndef KILN_TRAINER_CHECKPOINT_LIGHTNING_OPTIMIZER_STATE_DICT_H_
#define KILN_TRAINER_CHECKPOINT_LIGHTNING_OPTIMIZER_STATE_DICT_H_

#include <cstddef>
#include <functional>
#include <memory>

#include "ATen/core/ivalue.h"
#include "absl/status/statusor.h"
#include "torch/optim/optimizer.h"
#include "trainer/checkpoint/format/pickle_writer.h"
#include "trainer/checkpoint/format/snapshot_dict.h"

namespace kiln {

// `optimizer`'s state dict, with every tensor copied to the CPU (SnapshotTensor: a copy of its own even when it was
// there already, so the result does not change as the optimizer steps). Thread-compatible: reads `optimizer`.
// Every container in it is Any-typed (snapshot_dict.h). The same as OptimizerStateDict(TakeOptimizerState(...)).
absl::StatusOr<c10::IValue> OptimizerStateDict(const torch::optim::Optimizer& optimizer);

// An optimizer's state as it was when taken (TakeOptimizerState): copies of its state tensors (SnapshotTensor) and
// of its groups' options, and nothing of the optimizer itself, so that its state dict can be built later, on another
// thread, while the optimizer steps on. Immutable; copies share it.
class TakenOptimizerState {
 public:
  struct Contents;  // optimizer_state_dict.cc's.
  explicit TakenOptimizerState(std::shared_ptr<const Contents> contents) : contents_(std::move(contents)) {}
  const Contents& contents() const { return *contents_; }
  // The bytes of the tensors it holds.
  size_t tensor_bytes() const;

 private:
  std::shared_ptr<const Contents> contents_;
};

// Takes `optimizer`'s state: the tensor copies and cloned options that its state dict is built from; no dictionary is
// made. Thread-compatible: reads `optimizer`. InternalError when LibTorch refuses (an optimizer of another kind
// whose options have no learning rate, or whose state LibTorch cannot save).
absl::StatusOr<TakenOptimizerState> TakeOptimizerState(const torch::optim::Optimizer& optimizer);

// The state dict of what TakeOptimizerState took, as OptimizerStateDict above gives it. Any thread, any number of
// times (each call builds a dictionary of its own around the same tensors).
absl::StatusOr<c10::IValue> OptimizerStateDict(const TakenOptimizerState& taken);
// The same, written into a pickle or a value being built (snapshot_dict.h), without a dictionary made for it.
absl::Status OptimizerStateDict(PickleWriter& out, const TakenOptimizerState& taken);
absl::Status OptimizerStateDict(ValueBuilder& out, const TakenOptimizerState& taken);

// A CPU copy of `tensor`'s data that shares no storage with it (detached; on the CPU already, a clone), so that a
// checkpoint may be serialised on another thread while training updates `tensor` in place.
at::Tensor SnapshotTensor(const at::Tensor& tensor);

// Reads `state_dict` (as above, written by Kiln or by PyTorch) for `optimizer` and checks all of it: the number of
// groups and of parameters in each, every option and every state tensor's shape. Returns what puts it into
// `optimizer` (the state's tensors already on their parameters' devices); until that runs, `optimizer` is untouched.
// It may run more than once (each run puts the same state back), and must not outlive `optimizer`. For the
// optimizers read from LibTorch's archive, it throws c10::Error when the archive does not fit.
// InvalidArgument names the group, parameter or key that does not fit.
absl::StatusOr<std::function<void()>> PrepareOptimizerLoad(torch::optim::Optimizer& optimizer,
                                                           const c10::IValue& state_dict);

}  // namespace kiln

#endif  // KILN_TRAINER_CHECKPOINT_LIGHTNING_OPTIMIZER_STATE_DICT_H_
