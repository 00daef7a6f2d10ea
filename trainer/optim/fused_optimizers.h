// Adam, AdamW and SGD with LibTorch's fused kernels (aten::_fused_adam_, _fused_adamw_, _fused_sgd_): each step
// updates every parameter of a device in one call and one pass over its memory, where torch::optim runs five to
// eight operators per parameter. They are torch::optim::Adam, AdamW and SGD in every other respect: the same options
// and param_groups, the same state (AdamParamState, SGDParamState) under the same keys, so state_dict(), Kiln's
// checkpoints (PyTorch's layout), learning-rate schedulers and LearningRateMonitor see no difference.
//
// Where the kernels do not run on the parameters' device, step() is
// torch::optim's, unchanged; fused() says which ran. MakeOptimizer picks them by default (fit's --fused_optimizer).
//
// What differs from torch::optim's result is rounding, element by element (measured in fused_optimizers_test):
//   - Adam and AdamW: the kernel computes each element's update in one expression in float, with the first moment
//     as a lerp towards the gradient (m + (1 - beta1)(g - m)) instead of beta1 m + (1 - beta1) g, the step count as
//     a float32 tensor, and the bias corrections in double from it; torch::optim rounds after every operator.
//   - SGD: the same arithmetic, one element at a time; momentum buffers start at zero and take the first gradient
//     exactly (torch::optim clones it), which is the same value when dampening is 0.
//
// They implement DeviceSkipOptimizer: with a found_inf flag, the kernel skips the update on the device (Adam's step
// counts stay, via one add of 1 - found_inf), so the trainer need not read the loss on the host every step.
//
// Thread-compatible, like torch::optim.
#ifndef KILN_TRAINER_OPTIM_FUSED_OPTIMIZERS_H_
#define KILN_TRAINER_OPTIM_FUSED_OPTIMIZERS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "torch/optim/adam.h"
#include "torch/optim/adamw.h"
#include "torch/optim/sgd.h"
#include "trainer/core/device_skip_optimizer.h"

namespace kiln {

// The float32 step count each Adam parameter's kernel reads on the device, kept beside torch::optim's int64 count.
class DeviceStepCounts {
 public:
  // The device tensor for `param`, re-made from `host_step` whenever the host's count moved without it or `state`
  // (one of the parameter's state tensors) is not the one it was made with (a loaded checkpoint, a step
  // torch::optim took). The host then counts this step (host_step + 1); FusedAdamStep counts it on the device.
  at::Tensor& For(const at::Tensor& param, const at::Tensor& state, int64_t host_step);
  // Copies each device count into the host's (`set(param, count)`); reads the device.
  template <typename SetStep>
  void SyncToHost(SetStep set);

 private:
  struct Entry {
    at::Tensor param, state, count;
    int64_t host_step = 0;  // The host's count when `count` last moved with it.
  };
  absl::flat_hash_map<const void*, Entry> entries_;
};

// Adam (Base = torch::optim::Adam) and AdamW (torch::optim::AdamW: decoupled weight decay), fused: FusedAdam and
// FusedAdamW below.
template <typename Base, typename Options, typename State, bool kDecoupledWeightDecay>
class FusedAdamOptimizer final : public Base, public DeviceSkipOptimizer {
 public:
  explicit FusedAdamOptimizer(std::vector<at::Tensor> params, Options defaults = {})
      : Base(std::move(params), std::move(defaults)) {}
  at::Tensor step(torch::optim::Optimizer::LossClosure closure = nullptr) override;
  bool fused() const { return fused_.value_or(false); }
  bool can_skip_on_device() const override;
  void set_found_inf(at::Tensor found_inf) override;
  void SyncStateToHost() override;

 private:
  static constexpr const char* kName = kDecoupledWeightDecay ? "AdamW" : "Adam";
  std::optional<bool> fused_;  // Decided at the first step, from the parameters' device.
  DeviceStepCounts counts_;
  at::Tensor found_inf_;
  bool flag_seen_ = false;
};

using FusedAdam =
    FusedAdamOptimizer<torch::optim::Adam, torch::optim::AdamOptions, torch::optim::AdamParamState, false>;
using FusedAdamW =
    FusedAdamOptimizer<torch::optim::AdamW, torch::optim::AdamWOptions, torch::optim::AdamWParamState, true>;
extern template class FusedAdamOptimizer<torch::optim::Adam, torch::optim::AdamOptions, torch::optim::AdamParamState,
                                         false>;
extern template class FusedAdamOptimizer<torch::optim::AdamW, torch::optim::AdamWOptions, torch::optim::AdamWParamState,
                                         true>;

class FusedSGD final : public torch::optim::SGD, public DeviceSkipOptimizer {
 public:
  FusedSGD(std::vector<at::Tensor> params, torch::optim::SGDOptions defaults);
  at::Tensor step(LossClosure closure = nullptr) override;
  bool fused() const { return fused_.value_or(false); }
  // Not with dampening and momentum both set: a skipped first step would leave the buffers unset.
  bool can_skip_on_device() const override;
  void set_found_inf(at::Tensor found_inf) override;
  void SyncStateToHost() override {}  // SGD's state lives on the device alone.

 private:
  std::optional<bool> fused_;
  at::Tensor found_inf_;
};

// Whether this LibTorch has the fused kernels: always, since Kiln needs LibTorch 2.8 or newer (until 2026-12 it
// also built against 1.13, which had none). Kept for a release for programs that ask.
[[deprecated("always true: every LibTorch Kiln builds against has the fused kernels")]] bool FusedOptimizersAvailable();

// A built-in optimizer and its settings, by fit's names.
struct OptimizerSettings {
  std::string name = "adam";  // "adam", "adamw" or "sgd" (torch.optim's Adam, AdamW, SGD).
  double learning_rate = 1e-3;
  std::optional<double> momentum;      // sgd; unset: 0.9 (Kiln's default; PyTorch's SGD has 0).
  std::optional<double> weight_decay;  // Unset: PyTorch's default (0; AdamW 0.01).
};

// The built-in optimizer `settings` names, fused where `fused` (each steps as torch::optim on a device the kernels do
// not run on), else torch::optim's own classes.
std::shared_ptr<torch::optim::Optimizer> MakeOptimizer(const OptimizerSettings& settings,
                                                       std::vector<at::Tensor> params, bool fused);
// The same with the defaults of OptimizerSettings but `name` and `learning_rate`.
std::shared_ptr<torch::optim::Optimizer> MakeOptimizer(const std::string& name, std::vector<at::Tensor> params,
                                                       double learning_rate, bool fused);

}  // namespace kiln

#endif  // KILN_TRAINER_OPTIM_FUSED_OPTIMIZERS_H_
