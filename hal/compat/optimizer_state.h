// An optimizer's state, loaded from the archive torch::optim::Optimizer::save wrote under LibTorch 2.x or under
// LibTorch 1.13 (which Kiln built against until 2026-12: its checkpoints must still load). The archive's layout is the same in both ("state": one sub-archive per parameter, keyed by the
// parameter's address as text; "param_groups": each group's parameter keys and options), but the text is not:
// LibTorch 1.13 wrote the address in hex ("0x55d5c3a0"), 2.x writes it in decimal and parses it back as a decimal
// number, so under 2.x every key a 1.13 checkpoint holds parses to 0 and the state of one parameter lands on another
// (found by replaying 1.13-written checkpoints in tests/fuzz). LoadOptimizer matches the keys as text, as 1.13 did,
// so checkpoints of either version load.
//
// Thread-compatible (it changes `optimizer`); throws c10::Error when the archive does not fit the optimizer, and
// then leaves the optimizer unchanged.
#ifndef KILN_HAL_COMPAT_OPTIMIZER_STATE_H_
#define KILN_HAL_COMPAT_OPTIMIZER_STATE_H_

#include <memory>

#include "torch/optim/optimizer.h"
#include "torch/serialize/input-archive.h"

namespace kiln::compat {

// optimizer.load(archive), with the keys matched as text. LibTorch's Adam, AdamW, SGD, RMSprop and Adagrad are read
// by Kiln; any other optimizer (LBFGS, a user's own) goes through its own load().
void LoadOptimizer(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive);

// The state `optimizer` holds for `param` (keyed by the parameter's TensorImpl), or null. Never throws.
const torch::optim::OptimizerParamState* StateOf(const torch::optim::Optimizer& optimizer, const at::Tensor& param);

// Sets (or, with null, removes) the state `optimizer` holds for `param`.
void SetStateOf(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                std::unique_ptr<torch::optim::OptimizerParamState> state);

}  // namespace kiln::compat

#endif  // KILN_HAL_COMPAT_OPTIMIZER_STATE_H_
