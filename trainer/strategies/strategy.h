// The strategy seam: how the trainer places the model and data, runs backward and steps optimizers, reduces
// values across processes, and decides who does rank-zero work. SingleDeviceStrategy is here; DDPStrategy
// (ddp_strategy.h) implements the same interface.
//
// A strategy is also a StrategyDescriptor, so users can pass an instance (`.strategy = std::make_shared<
// DDPStrategy>(...)`); the connector reads its name and whether it is distributed, and the trainer connects it to
// the resolved plan in Setup. One instance serves one trainer at a time.
//
// Collectives: every method that talks to other processes (Setup, Backward with sync, ReduceMean, ReduceAny,
// AllGather, Barrier, Teardown) must be called by every process in the same order.
//
// Thread-safety: a strategy belongs to the loop thread, but for ExchangeThroughStore, which a checkpoint writer's
// thread calls.
#ifndef KILN_TRAINER_STRATEGIES_STRATEGY_H_
#define KILN_TRAINER_STRATEGIES_STRATEGY_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ATen/core/ivalue.h"
#include "c10/util/intrusive_ptr.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "connector/plan.h"
#include "connector/strategy_descriptor.h"
#include "torch/nn/module.h"
#include "torch/optim/optimizer.h"
#include "trainer/core/batch.h"

namespace c10d {
class ProcessGroup;
}  // namespace c10d

namespace kiln {

class DeviceMesh;  // trainer/core/device_mesh.h

// How the methods fail: Setup and Teardown return errors as values (and must not throw). The step's methods
// (Backward, OptimizerStep, ReduceMean, ReduceAny, AllGather, Barrier) run inside the trainer's loop, which catches
// exceptions: they throw (c10::Error or std::runtime_error) with a message naming this rank and what failed, as
// LibTorch's own calls do, and the trainer turns that into the run's Status. The accessors never throw or block.
class Strategy : public StrategyDescriptor {
 public:
  // Sets up this process's device through the plan's accelerator, joins the other processes (distributed
  // strategies, within their timeout) and moves `model` there. Blocks while joining. Errors (a device that cannot be
  // set up, peers that never come, a collective backend that cannot carry the device's tensors) stop the run before
  // training. Teardown follows it, also after a failure. Called once per run, on the loop thread.
  virtual absl::Status Setup(const Plan& plan, torch::nn::Module& model) = 0;
  // Releases the process group and the device. Safe after a failed or partial Setup, and twice. Never throws.
  virtual absl::Status Teardown() = 0;

  // The c10 device this process computes on (valid after Setup). Never throws.
  virtual c10::Device root_device() const = 0;
  // `batch` on root_device() (copies that need not wait, where the source allows). Throws what LibTorch throws.
  virtual Batch BatchToDevice(const Batch& batch) const = 0;
  // Backward pass. `sync_gradients` is false on the batches of a gradient-accumulation window that do not end in an
  // optimizer step, where distributed strategies skip their gradient all-reduce (Lightning's no_sync). A collective:
  // every process calls it with the same `sync_gradients`. Blocks until the gradients are averaged; throws when a
  // peer fails or the timeout passes.
  virtual void Backward(const at::Tensor& loss, bool sync_gradients) = 0;
  // Steps `optimizer` (after Backward with sync_gradients). Throws what the optimizer throws.
  virtual void OptimizerStep(torch::optim::Optimizer& optimizer) = 0;
  // The mean of `value` over all processes (the value itself with one process), on `value`'s device and of its
  // type. A collective; throws when a peer fails or the timeout passes.
  virtual at::Tensor ReduceMean(const at::Tensor& value) = 0;
  // True when `decision` is true in any process (Lightning's reduce_boolean_decision(all=False)). A collective, as
  // ReduceMean.
  virtual bool ReduceAny(bool decision) = 0;
  // Every process's `value`, in rank order, on the CPU. The values may differ in their first dimension (the other
  // dimensions and the type must agree). With one process, {value}. The default serves one process and throws for
  // more (naming the strategy), so that a strategy written before this method existed still builds; the trainer
  // calls it only to gather predictions over several processes. A collective, as ReduceMean.
  virtual std::vector<at::Tensor> AllGather(const at::Tensor& value);
  // True in the one process that logs, writes checkpoints and shows progress. Never throws.
  virtual bool is_global_zero() const = 0;
  // This process's rank among world_size() processes (0 and 1 before Setup). Never throw.
  virtual int global_rank() const = 0;
  virtual int world_size() const = 0;
  // Returns once every process has called it. A collective, as ReduceMean.
  virtual void Barrier() = 0;

  // The hooks below have defaults that serve a strategy which keeps the whole model on every rank, so that a
  // strategy written before they existed still builds. A strategy that shards the model (FSDPStrategy) overrides
  // them. Each is called on every rank, in the same order.

  // Called once per fit, right after configure_optimizers and before any checkpoint is restored: a strategy that
  // shards the parameters points the optimizers at its shards. An error (an optimizer it cannot serve) stops the run
  // before training, with the fix. May be a collective.
  virtual absl::Status ConnectOptimizers(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers);
  // Scales the gradients of `parameters` (an optimizer's) so that their total 2-norm is at most `max_norm`
  // (clip_gradients with "norm"). The default: the norm over this rank's gradients (kiln::ClipGradNorm); a strategy
  // that shards gradients takes the norm over every rank's. A collective where it reduces; throws as the step does.
  virtual void ClipGradientsNorm(const std::vector<at::Tensor>& parameters, double max_norm);
  // Called after a run's loops succeeded, before Teardown: a strategy that sharded the model makes it whole again on
  // every rank (a collective). Not called after a failure.
  virtual absl::Status Finish();

  // For a loss scaler (16-mixed): what makes one rank's inf/NaN flag (float32 [1], non-zero when seen) count on
  // every rank that steps the same parameters, or null where every rank sees every gradient (the default). A
  // collective, called by every rank after unscaling.
  virtual std::function<void(at::Tensor&)> GradientOverflowAgreement();

  // The process group of every rank of the run, for layers that synchronise across the processes themselves
  // (kiln::SyncBatchNorm, trainer/core/sync_batch_norm.h; Lightning's LayerSync): between Setup and Teardown, on the
  // accelerator's own collective backend for its device's tensors. Null where the run has one process (the
  // default); a distributed strategy that returns null refuses sync_batchnorm before training. Never throws.
  virtual c10::intrusive_ptr<c10d::ProcessGroup> LayerSyncProcessGroup() const;

  // Lightning's setup_environment: a strategy that must meet the other processes before the model is configured (its
  // device mesh, which LightningModule::configure_model reads) does it here. The trainer calls it on every rank before
  // configure_model and Setup (Setup does it itself when it has not run); Teardown follows it, also after a failure.
  // The default does nothing (ddp and fsdp meet in Setup). Errors as Setup's.
  virtual absl::Status SetupEnvironment(const Plan& plan);
  // The run's device mesh (model_parallel's, after SetupEnvironment); null for every strategy without one (the
  // default). Never throws.
  virtual std::shared_ptr<const DeviceMesh> device_mesh() const { return nullptr; }
  // Lightning's distributed_sampler_kwargs: into how many parts the data is split, and this rank's part (data loaders'
  // set_shard). The default: one part per process (world_size(), global_rank()); under model_parallel, ranks of one
  // tensor-parallel group read the same part. Never throw.
  virtual int data_parallel_size() const { return world_size(); }
  virtual int data_parallel_rank() const { return global_rank(); }

  // Whether a checkpoint is saved sharded: every rank writes its part of it, in torch.distributed.checkpoint's layout
  // (trainer/checkpoint/sharded/sharded_checkpoint.h), rather than rank 0 the whole file. The default: false (fsdp with
  // state_dict_type "sharded": true).
  virtual bool SavesShardedCheckpoints() const { return false; }

  // A parameter this rank holds a slice of: the `index`-th of `count` equal slices along `dim` of the whole
  // parameter, held alike by `replicas` ranks (this one the `replica`-th), as a tensor-parallel layer's weight.
  struct ParameterSlice {
    int64_t dim = 0;
    int index = 0;
    int count = 1;
    int replica = 0;
    int replicas = 1;
  };
  // For a sharded checkpoint written from the state as the ranks hold it, without gathering: the parameters of
  // `model` this rank holds a slice of, by name (every other parameter and buffer is whole on every rank); each rank
  // then writes its slices (and their optimizer state) where they lie in the whole tensors, and the trainer does not
  // call WithFullState for the save. nullopt (the default): a sharded save makes the state whole first
  // (WithFullState), as fsdp's does.
  virtual std::optional<std::unordered_map<std::string, ParameterSlice>> ShardedSaveSlices(
      const torch::nn::Module& model) const {
    (void)model;
    return std::nullopt;
  }

  // Every rank's `mine`, in rank order, exchanged through the run's store rather than the process group: safe on a
  // thread beside the loop's while the loop's collectives run (an asynchronous checkpoint's writer: a second thread
  // calling the process group would interleave its collectives with the loop's differently on each rank). Every rank
  // calls it as often, in the same order; `what` names the exchange in errors. Throws std::runtime_error naming this
  // rank and `what` when the others do not answer within the strategy's timeout. The default (one process): {mine}.
  virtual std::vector<std::string> ExchangeThroughStore(const std::string& what, const std::string& mine);

  // Whether Setup itself gives a model built on the meta device (kiln::MetaDeviceScope, trainer/core/meta_device.h)
  // its values, a part at a time (fsdp: each unit sharded as soon as it is made, so the whole model never exists in one
  // process). The default: false, and the trainer materialises the whole model in host memory before Setup (a
  // tensor-parallel layer keeps only its slice even so). Never throws.
  virtual bool MaterializesMetaTensors() const { return false; }

  // How the trainer reads and writes an optimizer's state as a dictionary in PyTorch's state_dict layout ("state"
  // by parameter index, "param_groups"), so that a strategy that shards the optimizer state can convert it.
  struct OptimizerStateCodec {
    std::function<absl::StatusOr<c10::IValue>(const torch::optim::Optimizer&)> state_dict;
    std::function<absl::Status(torch::optim::Optimizer&, const c10::IValue&)> load_state_dict;
  };
  // Runs `body` with the model whole on this rank and each of `optimizers` stepping the model's own parameters with
  // state of their shapes, as under DDP: what a full checkpoint saves, or restores into. After `body`, with
  // `restoring` (and `body` OK), what it put into the parameters and the optimizers becomes this rank's part;
  // otherwise everything goes back as it was. Returns `body`'s status, or why the state could not be made whole. A
  // collective (every rank, the same `optimizers`). The default runs `body`.
  virtual absl::Status WithFullState(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                                     const OptimizerStateCodec& codec, bool restoring,
                                     absl::FunctionRef<absl::Status()> body);
};

// Everything on one device of the plan's accelerator (which need not be a CPU: for a third-party accelerator, its
// own device, unlike Lightning's fallback to the CPU).
class SingleDeviceStrategy final : public Strategy {
 public:
  std::string name() const override { return "single_device"; }
  bool IsDistributed() const override { return false; }
  absl::Status Setup(const Plan& plan, torch::nn::Module& model) override;
  absl::Status Teardown() override;
  c10::Device root_device() const override { return device_; }
  Batch BatchToDevice(const Batch& batch) const override;
  void Backward(const at::Tensor& loss, bool sync_gradients) override;
  void OptimizerStep(torch::optim::Optimizer& optimizer) override;
  at::Tensor ReduceMean(const at::Tensor& value) override { return value; }
  bool ReduceAny(bool decision) override { return decision; }
  std::vector<at::Tensor> AllGather(const at::Tensor& value) override { return {value.cpu()}; }
  bool is_global_zero() const override { return true; }
  int global_rank() const override { return 0; }
  int world_size() const override { return 1; }
  void Barrier() override {}

 private:
  std::shared_ptr<Accelerator> accelerator_;
  LogicalDevice logical_device_;
  c10::Device device_ = c10::Device(c10::DeviceType::CPU);  // logical_device_.compute, kept for the step's path.
  bool set_up_ = false;
};

// Sets up `device` through `accelerator` and moves `model` there, with errors that name both. `*device_set_up` says
// whether the device needs a teardown, also when moving the model failed.
absl::Status SetupDeviceAndModel(Accelerator& accelerator, const LogicalDevice& device, torch::nn::Module& model,
                                 bool* device_set_up);

// Every process's `text`, in rank order (Strategy::AllGather of its bytes): for what rank 0 decided, such as a
// folder's name. A collective, as AllGather.
std::vector<std::string> AllGatherText(Strategy& strategy, const std::string& text);

}  // namespace kiln

#endif  // KILN_TRAINER_STRATEGIES_STRATEGY_H_
