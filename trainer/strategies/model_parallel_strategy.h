// ModelParallelStrategy: tensor parallelism within a 2-D device mesh, data parallel x tensor parallel, as Lightning's
// ModelParallelStrategy(data_parallel_size, tensor_parallel_size) (registered name "model_parallel").
//
// Set-up: the processes meet (ParallelStrategy) in SetupEnvironment, which makes the mesh (trainer/core/
// device_mesh.h): rank r at (r / tp, r % tp), the tensor-parallel groups of consecutive ranks and the data-parallel
// groups a stride tp apart, every rank making its two groups in the same order (tensor parallel, then data
// parallel). LightningModule::configure_model then builds the model's tensor-parallel layers
// (trainer/core/tensor_parallel.h) with the mesh's tensor-parallel group, each rank holding its slices. Setup moves the
// model to the device and makes every rank start from the same state: parameters that are slices from the first rank
// of their data-parallel group, every other parameter and buffer from rank 0.
//
// The data-parallel dimension: each data-parallel group's ranks read the same part of the data (data_parallel_rank,
// data_parallel_size); after the backward pass the gradients are averaged as DDP averages them (Lightning applies
// FSDP2 there; Kiln does not shard along it yet): a slice's over its data-parallel group, a whole parameter's over
// every rank (whose gradients are the same within a tensor-parallel group, so this is also its data-parallel mean,
// and it keeps the copies equal). Gradient clipping by norm counts every slice once.
//
// Checkpoints: sharded by default (Lightning's save_distributed_checkpoint=True): each rank writes its slices and
// their optimizer state where they lie in the whole tensors (ShardedSaveSlices), the ranks of a data-parallel group
// splitting what they hold alike, with nothing gathered; the folder is read whole, so any mesh, and one device,
// resume from it. With save_distributed_checkpoint false, a full checkpoint: every slice and its optimizer state are
// gathered into the whole tensor (an all-gather over its tensor-parallel group) and rank 0 writes the single-device
// model's file. A restore (of either) loads the whole state on every rank, and each keeps its slices
// (WithFullState).
#ifndef KILN_TRAINER_STRATEGIES_MODEL_PARALLEL_STRATEGY_H_
#define KILN_TRAINER_STRATEGIES_MODEL_PARALLEL_STRATEGY_H_

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "trainer/core/device_mesh.h"
#include "trainer/core/tensor_parallel.h"
#include "trainer/strategies/model_parallel_options.h"
#include "trainer/strategies/parallel_strategy.h"

namespace kiln {

class ModelParallelStrategy final : public ParallelStrategy {
 public:
  explicit ModelParallelStrategy(ModelParallelOptions options = {});
  ~ModelParallelStrategy() override;

  std::string name() const override { return "model_parallel"; }

  // Meets the other processes and makes the mesh. FailedPrecondition when data_parallel_size x tensor_parallel_size
  // is not the world size (naming both, the world size and the fix); errors as ParallelStrategy's joining otherwise.
  absl::Status SetupEnvironment(const Plan& plan) override;
  absl::Status Setup(const Plan& plan, torch::nn::Module& model) override;
  void Backward(const at::Tensor& loss, bool sync_gradients) override;
  void OptimizerStep(torch::optim::Optimizer& optimizer) override;
  void ClipGradientsNorm(const std::vector<at::Tensor>& parameters, double max_norm) override;
  std::function<void(at::Tensor&)> GradientOverflowAgreement() override;
  absl::Status WithFullState(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                             const OptimizerStateCodec& codec, bool restoring,
                             absl::FunctionRef<absl::Status()> body) override;
  bool SavesShardedCheckpoints() const override { return options_.save_distributed_checkpoint; }
  // The tensor-parallel layers' slices: the tensor-parallel rank's of the group's size along the layer's dimension,
  // held alike by the data-parallel group's ranks.
  std::optional<std::unordered_map<std::string, ParameterSlice>> ShardedSaveSlices(
      const torch::nn::Module& model) const override;
  std::shared_ptr<const DeviceMesh> device_mesh() const override { return mesh_; }
  int data_parallel_size() const override;
  int data_parallel_rank() const override;

  const ModelParallelOptions& options() const { return options_; }

  // The mesh's sizes for `world_size` processes, `devices_per_node` on each of `num_nodes` nodes, as `options` ask
  // ("auto": num_nodes x devices_per_node, Lightning's); FailedPrecondition when their product is not world_size.
  static absl::StatusOr<std::pair<int, int>> MeshShape(const ModelParallelOptions& options, int world_size,
                                                      int num_nodes, int devices_per_node);

 private:
  void ReleaseState() override;
  // The gradients of `parameters` averaged over `group` (null: this rank alone), in one all-reduce.
  void AverageGradients(const std::vector<at::Tensor>& parameters, const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                        int size);

  // The whole tensor of `shard`'s slices (every rank of its group's `slice`, joined along its dimension), and this
  // rank's slice of a whole one. Whole is a collective of the shard's group.
  at::Tensor Whole(const TensorParallelShard& shard, const at::Tensor& slice);
  static at::Tensor Slice(const TensorParallelShard& shard, const at::Tensor& whole);

  ModelParallelOptions options_;
  std::vector<TensorParallelShard> shards_;  // The model's slices, with their dimension and group.
  bool environment_ready_ = false;
  std::shared_ptr<const DeviceMesh> mesh_;
  std::vector<at::Tensor> sharded_;     // Parameters that are slices (of the model's tensor-parallel layers).
  std::vector<at::Tensor> replicated_;  // Every other parameter that takes gradients.
};

}  // namespace kiln

#endif  // KILN_TRAINER_STRATEGIES_MODEL_PARALLEL_STRATEGY_H_
