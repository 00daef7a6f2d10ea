// FSDPStrategy: fully sharded data parallel (Lightning's FSDPStrategy, PyTorch's FullyShardedDataParallel), on the
// accelerator's own collectives: each rank keeps 1/N of the parameters, gradients and optimizer state.
//
// Set-up (ParallelStrategy, parallel_strategy.h) joins the ranks and starts them from rank 0's parameters. Then the
// auto-wrap policy picks the units (fsdp_unit.h): each unit's parameters become one FlatParameter
// (flat_parameter.h), sharded across the ranks; the parameters in no unit form the root unit. The optimizers
// configure_optimizers returns are pointed at the shards (ConnectOptimizers), so each rank steps its 1/N with the
// same optimizer (Kiln's fused ones included).
//
// In a step, as sharding_strategy says:
//   FULL_SHARD     a unit's parameters are gathered (all-gather) before its forward, freed after it, gathered again
//                  before its backward and freed after; its gradients are reduce-scattered as soon as they are all
//                  there, during the backward pass.
//   SHARD_GRAD_OP  as FULL_SHARD, but the parameters stay gathered from the forward to the end of the backward.
//   NO_SHARD       nothing is sharded: every rank keeps everything, gradients are all-reduced (DDP's result).
//   HYBRID_SHARD   FULL_SHARD within each node, every node holding the whole model: gradients reduce-scattered
//                  within the node, then all-reduced across the nodes (one node: FULL_SHARD).
// The root unit stays gathered (it is gathered again after each optimizer step). In a gradient-accumulation window
// the gradients stay whole and local until the window's last batch (Lightning's no_sync). Gradient clipping by norm
// takes the norm over every rank's shard.
//
// After a run that succeeded, the model is whole again on every rank (the parameters gathered, on the device where the
// whole model fits, in host memory otherwise; the units unwrapped):
// the module is as it was, trained. After a failure, parameters of units that were freed cannot be read.
//
// Checkpoints are full ones by default (WithFullState): rank 0 writes the model and the optimizers' state whole, in
// the layout DDP's checkpoints have, so that ddp, one device, torch.load and Lightning read them, and fsdp resumes
// them on any number of ranks. With state_dict_type "sharded", every rank writes its part of the same state at once,
// in torch.distributed.checkpoint's layout (trainer/checkpoint/sharded/sharded_checkpoint.h); any number of ranks
// resumes it. Both are made from the state made whole on every rank first (WithFullState), so a checkpoint needs the
// room of the whole model and optimizer state on each rank's host for a moment.
#ifndef KILN_TRAINER_STRATEGIES_FSDP_STRATEGY_H_
#define KILN_TRAINER_STRATEGIES_FSDP_STRATEGY_H_

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "torch/csrc/autograd/function.h"
#include "trainer/strategies/flat_parameter.h"
#include "trainer/strategies/fsdp_options.h"
#include "trainer/strategies/fsdp_unit.h"
#include "trainer/strategies/parallel_strategy.h"

namespace kiln {

class FsdpGatherer;
class GatherOnUseScope;

class FSDPStrategy final : public ParallelStrategy, private FsdpUnitHooks {
 public:
  explicit FSDPStrategy(FSDPOptions options = {});
  ~FSDPStrategy() override;

  std::string name() const override { return options_.cpu_offload ? "fsdp_cpu_offload" : "fsdp"; }

  absl::Status Setup(const Plan& plan, torch::nn::Module& model) override;
  // The batch on the device; under mixed precision its input (every floating tensor of a structured batch) cast to
  // param_dtype, as PyTorch's FSDP casts the root module's inputs.
  Batch BatchToDevice(const Batch& batch) const override;
  absl::Status ConnectOptimizers(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers) override;
  void Backward(const at::Tensor& loss, bool sync_gradients) override;
  void OptimizerStep(torch::optim::Optimizer& optimizer) override;
  void ClipGradientsNorm(const std::vector<at::Tensor>& parameters, double max_norm) override;
  absl::Status Finish() override;
  // The shards' inf/NaN flags summed over the shard group (PyTorch's ShardedGradScaler).
  std::function<void(at::Tensor&)> GradientOverflowAgreement() override;
  // Full checkpoints: the units gathered, and each optimizer's state turned from its shards into PyTorch's layout
  // for the model's own parameters (all-gathers), and back.
  absl::Status WithFullState(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                             const OptimizerStateCodec& codec, bool restoring,
                             absl::FunctionRef<absl::Status()> body) override;

  bool SavesShardedCheckpoints() const override { return options_.state_dict_type == StateDictType::kSharded; }
  // A model built on the meta device is made one unit at a time in Setup, each sharded before the next is made.
  bool MaterializesMetaTensors() const override { return true; }

  const FSDPOptions& options() const { return options_; }
  // The mixed precision this run uses (valid after Setup): options().mixed_precision, or, when that is empty, what
  // the precision implies (FsdpMixedPrecisionFor); empty under NO_SHARD when implied.
  const FsdpMixedPrecision& mixed_precision() const { return mixed_precision_; }
  // The units, root last (valid after Setup, until Teardown). For tests and the README's memory figures.
  const std::vector<std::unique_ptr<FlatParameter>>& flat_parameters() const { return flats_; }

 private:
  friend class FsdpGatherer;
  void BeforeForward(int unit) override;
  at::Tensor AfterForward(int unit, at::Tensor output) override;
  void ReleaseState() override;
  // Removes the hooks, puts the model's modules back and gives each parameter its own memory (whole where it was
  // gathered). Never throws.
  void Unwrap();
  // Puts a post-hook on each member's gradient accumulator (GradientReady); UnhookGradients takes them off. Hooked
  // again after a checkpoint moved members to the host (FlatParameter::GatherToHost: autograd made new accumulators).
  void HookGradients();
  void UnhookGradients();
  // Autograd's post-hook on each gradient: when a unit's are all there, it is reduced (and freed).
  void GradientReady(int unit);
  void FinishUnitBackward(int unit);
  // Waits for the travelling gradient reduction, if any, and puts it in its unit's shard.
  void FinishReduction();
  // Gather on use (gather_on_use.h): whether `unit` is the one being used and whole; makes `units` whole (an operator
  // reads them), recording the first step's order, freeing the units the forward has left (FULL_SHARD, or no
  // backward to follow) and prefetching the next.
  bool UnitReady(int unit) const;
  void GatherUnits(const std::vector<int>& units);
  // Hooks each member's gradient: before the first of a unit's arrives in a backward, the unit's flat gradient is
  // made (FlatParameter::PrepareGradients).
  void HookGradientArrival();
  // Starts gathering the unit `step` places from `unit` in the first step's forward order (none past either end).
  void Prefetch(int unit, int step);
  // Sets each sharded unit's reduction (gradient_reduction).
  void ChooseGradientReduction();
  bool ReshardsAfterForward() const { return options_.sharding_strategy == ShardingStrategy::kFullShard; }

  // An optimizer ConnectOptimizers pointed at the shards: its groups as configure_optimizers made them and as they
  // are now, and where each of the model's parameters is.
  struct Connected {
    std::vector<std::vector<at::Tensor>> original;  // By group.
    std::vector<std::vector<at::Tensor>> sharded;   // By group: unit shards, and members of units not sharded.
  };
  // The dictionary (PyTorch's layout) of `connected`'s optimizer for its original groups, from the one of its
  // sharded groups (all-gathers of the per-element state), and the reverse (this rank's part; no collective).
  c10::IValue FullStateDict(const Connected& connected, const c10::IValue& sharded_dict);
  c10::IValue ShardedStateDict(const Connected& connected, const c10::IValue& full_dict) const;
  // The unit (index) and member a parameter of the model is, by its TensorImpl; {-1, -1} for none.
  std::pair<int, int> Locate(const at::Tensor& parameter) const;

  FSDPOptions options_;
  FsdpMixedPrecision mixed_precision_;
  std::optional<c10::ScalarType> input_dtype_;  // param_dtype, when a unit computes in it.
  // The buffers cast to buffer_dtype, with their own type (put back by Unwrap).
  std::vector<std::pair<at::Tensor, c10::ScalarType>> cast_buffers_;
  std::unordered_map<const torch::optim::Optimizer*, Connected> connected_;
  std::unordered_map<const c10::TensorImpl*, std::pair<int, int>> location_;  // Parameter -> (unit, member).
  FsdpWrapping wrapping_;
  std::vector<std::unique_ptr<FlatParameter>> flats_;  // By unit index; the root's last.
  std::vector<int> ready_;                             // Gradients accumulated this backward, by unit.
  std::vector<bool> reduced_;                          // Already reduced this backward, by unit.
  std::vector<bool> prepared_;                         // Its flat gradient made this backward, by unit.
  std::vector<std::vector<bool>> inside_;              // [a][b]: unit a's module is inside unit b's.
  int current_ = -1;                                   // The unit an operator last read.
  std::unique_ptr<FsdpGatherer> gatherer_;
  std::unique_ptr<GatherOnUseScope> gather_scope_;
  std::vector<std::pair<at::Tensor, unsigned>> arrival_hooks_;  // Each member's hook, to remove.
  bool sync_gradients_ = true;
  bool reduce_scatter_lacking_ = false;  // The device's backend declares no reduce-scatter: kAuto all-reduces.
  std::vector<int> order_;      // The units in the order of the first training step's forward.
  std::vector<int> position_;   // Each unit's place in order_ (-1: not seen).
  bool recording_ = true;       // Until the first backward.
  int reducing_ = -1;           // The unit whose gradient reduction is travelling (at most one); -1: none.
  // The ranks a unit is sharded across (every rank; HYBRID_SHARD: this node's), and those that hold the same shard
  // (HYBRID_SHARD across nodes: this local rank's; null otherwise).
  c10::intrusive_ptr<c10d::ProcessGroup> shard_group_;
  c10::intrusive_ptr<c10d::ProcessGroup> replicate_group_;
  bool in_backward_ = false;
  // Each gradient accumulator hooked, with its hook's key (kept alive: autograd holds them only weakly).
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_STRATEGIES_FSDP_STRATEGY_H_
