#include "trainer/strategies/model_parallel_strategy.h"

#include <exception>
#include <functional>
#include <optional>
#include <unordered_set>
#include <utility>

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "hal/compat/error_message.h"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"
#include "torch/csrc/distributed/c10d/comm.hpp"
#include "trainer/core/option_fix.h"
#include "trainer/core/tensor_parallel.h"

namespace kiln {
namespace {

constexpr size_t kBroadcastBucketBytes = 250 * 1024 * 1024;  // PyTorch DDP's _sync_module_states bucket.

}  // namespace

ModelParallelStrategy::ModelParallelStrategy(ModelParallelOptions options)
    : ParallelStrategy(options.timeout, options.process_group_backend), options_(std::move(options)) {}

ModelParallelStrategy::~ModelParallelStrategy() = default;

absl::StatusOr<std::pair<int, int>> ModelParallelStrategy::MeshShape(const ModelParallelOptions& options,
                                                                    int world_size, int num_nodes,
                                                                    int devices_per_node) {
  // Lightning's "auto": data parallel across the nodes, tensor parallel within each.
  const int dp = options.data_parallel_size.value_or(num_nodes);
  const int tp = options.tensor_parallel_size.value_or(devices_per_node);
  if (dp < 1 || tp < 1 || static_cast<int64_t>(dp) * tp != world_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model_parallel: data_parallel_size=", dp, options.data_parallel_size ? "" : " (auto: num_nodes)",
        " times tensor_parallel_size=", tp, options.tensor_parallel_size ? "" : " (auto: devices per node)", " is ",
        static_cast<int64_t>(dp) * tp, ", but the run has ", world_size, " processes (", num_nodes, " node(s) x ",
        devices_per_node, " device(s)); choose sizes whose product is ", world_size, " (",
        OptionFix("ModelParallelOptions{.data_parallel_size, .tensor_parallel_size}, or TrainerOptions' "
                  "data_parallel_size and tensor_parallel_size",
                  "--data_parallel_size and --tensor_parallel_size"),
        "), or change devices/num_nodes"));
  }
  return std::make_pair(dp, tp);
}

absl::Status ModelParallelStrategy::SetupEnvironment(const Plan& plan) {
  if (environment_ready_) return absl::OkStatus();
  // The sizes first: a wrong mesh is refused before any process waits for another.
  absl::StatusOr<std::pair<int, int>> shape =
      MeshShape(options_, plan.world_size, plan.num_nodes, plan.num_devices());
  if (!shape.ok()) return shape.status();
  const auto [dp, tp] = *shape;
  torch::nn::Module nothing;  // The model is configured after the mesh exists; Setup places it.
  if (absl::Status joined = JoinProcessGroup(plan, nothing, /*move_model=*/false); !joined.ok()) return joined;
  // Every rank makes its own two groups, in the same order: its tensor-parallel row, then its data-parallel column.
  c10::intrusive_ptr<c10d::ProcessGroup> tp_group;
  c10::intrusive_ptr<c10d::ProcessGroup> dp_group;
  const int rank = global_rank();
  if (tp > 1) {
    const int row = rank / tp;
    absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> group = MakeSubgroup(
        DeviceMesh::GroupRanks(dp, tp, DeviceMesh::kTensorParallel)[row], absl::StrCat("model_parallel/tp", row));
    if (!group.ok()) return group.status();
    tp_group = *group;
  }
  if (dp > 1) {
    const int column = rank % tp;
    absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> group = MakeSubgroup(
        DeviceMesh::GroupRanks(dp, tp, DeviceMesh::kDataParallel)[column], absl::StrCat("model_parallel/dp", column));
    if (!group.ok()) return group.status();
    dp_group = *group;
  }
  mesh_ = std::make_shared<const DeviceMesh>(dp, tp, rank, dp_group, tp_group);
  environment_ready_ = true;
  LOG(INFO) << "model_parallel: rank " << rank << " at (" << mesh_->data_parallel_rank() << ", "
            << mesh_->tensor_parallel_rank() << ") of a " << dp << " x " << tp
            << " (data_parallel x tensor_parallel) mesh";
  return absl::OkStatus();
}

absl::Status ModelParallelStrategy::Setup(const Plan& plan, torch::nn::Module& model) {
  if (absl::Status ready = SetupEnvironment(plan); !ready.ok()) return ready;
  std::vector<TensorParallelShard> shards;
  try {
    shards = TensorParallelShards(model);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("model_parallel: finding the model's tensor-parallel layers failed: ",
                                            compat::ExceptionMessage(e)));
  }
  if (shards.empty() && mesh_->tensor_parallel_size() > 1) {
    LOG(WARNING) << "model_parallel: the model has no tensor-parallel layers (kiln::ColumnParallelLinear, "
                    "RowParallelLinear, ParallelSelfAttention with the mesh's tensor_parallel group): every rank of a "
                    "tensor-parallel group computes the whole model; build them in configure_model from "
                    "device_mesh()";
  }
  std::unordered_set<const void*> sliced;
  for (const TensorParallelShard& shard : shards) sliced.insert(shard.parameter.unsafeGetTensorImpl());
  try {
    model.to(root_device());
    std::vector<at::Tensor> whole;
    std::vector<at::Tensor> slices;
    sharded_.clear();
    replicated_.clear();
    shards_ = shards;
    for (const at::Tensor& parameter : model.parameters()) {
      const bool is_slice = sliced.count(parameter.unsafeGetTensorImpl()) > 0;
      (is_slice ? slices : whole).push_back(parameter.detach());
      if (parameter.requires_grad()) (is_slice ? sharded_ : replicated_).push_back(parameter);
    }
    for (const at::Tensor& buffer : model.buffers()) whole.push_back(buffer.detach());
    // Every rank starts from the same state: whole tensors from rank 0, slices from their data-parallel peer 0.
    if (!whole.empty()) c10d::broadcast_coalesced(process_group(), whole, kBroadcastBucketBytes, 0);
    if (!slices.empty() && mesh_->data_parallel_group() != nullptr) {
      c10d::broadcast_coalesced(mesh_->data_parallel_group(), slices, kBroadcastBucketBytes, 0);
    }
  } catch (const std::exception& e) {
    return NotMet(absl::StrCat("placing the model and broadcasting its first state failed: ",
                               compat::ExceptionMessage(e)));
  }
  return absl::OkStatus();
}

void ModelParallelStrategy::ReleaseState() {
  shards_.clear();
  sharded_.clear();
  replicated_.clear();
  mesh_.reset();
  environment_ready_ = false;
}

std::optional<std::unordered_map<std::string, Strategy::ParameterSlice>> ModelParallelStrategy::ShardedSaveSlices(
    const torch::nn::Module& model) const {
  std::unordered_map<const void*, const TensorParallelShard*> shard_of;
  for (const TensorParallelShard& shard : shards_) shard_of[shard.parameter.unsafeGetTensorImpl()] = &shard;
  std::unordered_map<std::string, ParameterSlice> slices;
  for (const auto& parameter : model.named_parameters()) {
    const auto found = shard_of.find(parameter.value().unsafeGetTensorImpl());
    if (found == shard_of.end() || found->second->group == nullptr) continue;
    const TensorParallelShard& shard = *found->second;
    slices[parameter.key()] = ParameterSlice{.dim = shard.dim,
                                             .index = shard.group->getRank(),
                                             .count = shard.group->getSize(),
                                             .replica = data_parallel_rank(),
                                             .replicas = data_parallel_size()};
  }
  return slices;
}

int ModelParallelStrategy::data_parallel_size() const {
  return mesh_ != nullptr ? mesh_->data_parallel_size() : world_size();
}

int ModelParallelStrategy::data_parallel_rank() const {
  return mesh_ != nullptr ? mesh_->data_parallel_rank() : global_rank();
}

void ModelParallelStrategy::AverageGradients(const std::vector<at::Tensor>& parameters,
                                             const c10::intrusive_ptr<c10d::ProcessGroup>& group, int size) {
  if (group == nullptr || size <= 1 || parameters.empty()) return;
  // Every rank reduces the same parameters in the same order: one that got no gradient this step counts as zeros.
  std::vector<at::Tensor> grads;
  for (const at::Tensor& parameter : parameters) {
    at::Tensor& grad = const_cast<at::Tensor&>(parameter).mutable_grad();
    if (!grad.defined()) grad = at::zeros_like(parameter);
    grads.push_back(grad);
  }
  std::vector<at::Tensor> flat = {at::cat([&] {
    std::vector<at::Tensor> views;
    for (const at::Tensor& grad : grads) views.push_back(grad.reshape(-1));
    return views;
  }())};
  group->allreduce(flat)->wait();
  flat[0].div_(size);
  int64_t offset = 0;
  for (at::Tensor& grad : grads) {
    grad.copy_(flat[0].narrow(0, offset, grad.numel()).view_as(grad));
    offset += grad.numel();
  }
}

void ModelParallelStrategy::Backward(const at::Tensor& loss, bool sync_gradients) {
  Collective("the backward pass and its gradient all-reduce", [&] {
    loss.backward();  // The tensor-parallel layers' collectives run inside it.
    if (!sync_gradients) return;
    AverageGradients(sharded_, mesh_->data_parallel_group(), mesh_->data_parallel_size());
    AverageGradients(replicated_, process_group(), world_size());
  });
}

void ModelParallelStrategy::OptimizerStep(torch::optim::Optimizer& optimizer) { optimizer.step(); }

void ModelParallelStrategy::ClipGradientsNorm(const std::vector<at::Tensor>& parameters, double max_norm) {
  // The whole model's norm: slices' squares summed over the tensor-parallel group, whole parameters' counted once.
  std::unordered_set<const void*> sliced;
  for (const at::Tensor& parameter : sharded_) sliced.insert(parameter.unsafeGetTensorImpl());
  std::vector<at::Tensor> grads;
  at::Tensor slices_squared;
  at::Tensor whole_squared;
  for (const at::Tensor& parameter : parameters) {
    if (!parameter.grad().defined()) continue;
    const at::Tensor grad = parameter.grad();
    grads.push_back(grad);
    const at::Tensor squared = grad.detach().to(at::kFloat).pow(2).sum();
    at::Tensor& total = sliced.count(parameter.unsafeGetTensorImpl()) > 0 ? slices_squared : whole_squared;
    total = total.defined() ? total + squared : squared;
  }
  if (grads.empty()) return;
  Collective("summing the gradients' norm over the tensor-parallel group", [&] {
    at::Tensor sum = slices_squared.defined() ? slices_squared.reshape({1}).clone()
                                              : at::zeros({1}, at::TensorOptions(at::kFloat).device(root_device()));
    if (mesh_ != nullptr && mesh_->tensor_parallel_group() != nullptr) {
      std::vector<at::Tensor> tensors = {sum};
      mesh_->tensor_parallel_group()->allreduce(tensors)->wait();
    }
    if (whole_squared.defined()) sum = sum + whole_squared;
    const at::Tensor total_norm = sum.sqrt();
    const at::Tensor coefficient = at::clamp(max_norm / (total_norm + 1e-6), c10::nullopt, 1.0);
    for (const at::Tensor& grad : grads) grad.data().mul_(coefficient.to(grad.scalar_type()));
  });
}

std::function<void(at::Tensor&)> ModelParallelStrategy::GradientOverflowAgreement() {
  // Ranks hold different slices: an inf/NaN in one rank's slice skips the step on every rank.
  return [this](at::Tensor& found_inf) {
    Collective("agreeing on the gradients' inf/NaN check", [&] {
      std::vector<at::Tensor> tensors = {found_inf};
      process_group()->allreduce(tensors)->wait();
    });
  };
}

namespace {

using c10::IValue;
using GenericDict = c10::impl::GenericDict;

GenericDict AnyDict() { return GenericDict(c10::AnyType::get(), c10::AnyType::get()); }

// `dict` (an optimizer's state in PyTorch's state_dict layout: "state" by parameter index, "param_groups") with the
// per-element state of each parameter `convert` takes (one value per element of the parameter as it is now: SGD's
// momentum, Adam's moments; not "step") replaced by what it returns. `parameters` in the optimizer's order.
IValue MapState(const IValue& dict, const std::vector<at::Tensor>& parameters,
                const std::function<std::optional<at::Tensor>(size_t index, const at::Tensor&)>& convert) {
  TORCH_CHECK_VALUE(dict.isGenericDict() && dict.toGenericDict().contains("state") &&
                        dict.toGenericDict().contains("param_groups"),
                    "model_parallel: this optimizer's state is not in PyTorch's state_dict layout (Kiln saves SGD, "
                    "Adam, AdamW, RMSprop and Adagrad that way); checkpoints under model_parallel need one of those");
  const GenericDict top = dict.toGenericDict();
  GenericDict state = AnyDict();
  for (const auto& entry : top.at("state").toGenericDict()) {
    const int64_t index = entry.key().toInt();
    GenericDict values = AnyDict();
    for (const auto& item : entry.value().toGenericDict()) {
      std::optional<at::Tensor> converted;
      if (index >= 0 && index < static_cast<int64_t>(parameters.size()) && item.key().toStringRef() != "step" &&
          item.value().isTensor() && item.value().toTensor().sizes() == parameters[index].sizes()) {
        converted = convert(index, item.value().toTensor());
      }
      values.insert(item.key(), converted.has_value() ? IValue(*converted) : item.value());
    }
    state.insert(entry.key(), IValue(values));
  }
  GenericDict result = AnyDict();
  result.insert(IValue("state"), IValue(state));
  result.insert(IValue("param_groups"), top.at("param_groups"));
  return IValue(result);
}

}  // namespace

at::Tensor ModelParallelStrategy::Whole(const TensorParallelShard& shard, const at::Tensor& slice) {
  std::vector<at::Tensor> input = {slice.detach().to(root_device()).contiguous()};
  std::vector<std::vector<at::Tensor>> output(1);
  for (int r = 0; r < shard.group->getSize(); ++r) output[0].push_back(at::empty_like(input[0]));
  shard.group->allgather(output, input)->wait();
  return at::cat(output[0], shard.dim);
}

at::Tensor ModelParallelStrategy::Slice(const TensorParallelShard& shard, const at::Tensor& whole) {
  const int64_t part = whole.size(shard.dim) / shard.group->getSize();
  return whole.detach().narrow(shard.dim, shard.group->getRank() * part, part).clone();
}

absl::Status ModelParallelStrategy::WithFullState(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                                                  const OptimizerStateCodec& codec, bool restoring,
                                                  absl::FunctionRef<absl::Status()> body) {
  if (shards_.empty()) return body();  // Every parameter is whole on every rank: the state is whole as it is.
  std::unordered_map<const void*, size_t> shard_of;
  for (size_t i = 0; i < shards_.size(); ++i) shard_of[shards_[i].parameter.unsafeGetTensorImpl()] = i;
  const auto parameters_of = [](const torch::optim::Optimizer& optimizer) {
    std::vector<at::Tensor> parameters;
    for (const auto& group : optimizer.param_groups()) {
      for (const at::Tensor& parameter : group.params()) parameters.push_back(parameter);
    }
    return parameters;
  };
  struct Converted {
    torch::optim::Optimizer* optimizer;
    ska::flat_hash_map<void*, std::unique_ptr<torch::optim::OptimizerParamState>> sliced_state;
  };
  std::vector<Converted> converted;
  std::vector<at::Tensor> slices;  // Each slice's own data, to put back.
  const auto put_back = [&] {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < slices.size(); ++i) shards_[i].parameter.set_data(slices[i]);
    for (Converted& item : converted) item.optimizer->state() = std::move(item.sliced_state);
  };
  absl::Status status = absl::OkStatus();
  try {
    Collective("gathering the model's slices and their optimizer state for a checkpoint", [&] {
      // The optimizers' state first (while the parameters are still slices, whose shapes find it), in the same order
      // on every rank: optimizer, parameter, key.
      std::vector<IValue> whole_states;
      for (const auto& optimizer : optimizers) {
        const std::vector<at::Tensor> parameters = parameters_of(*optimizer);
        absl::StatusOr<IValue> sliced = codec.state_dict(*optimizer);
        TORCH_CHECK(sliced.ok(), "model_parallel: reading an optimizer's state: ", sliced.status().message());
        whole_states.push_back(
            MapState(*sliced, parameters, [&](size_t index, const at::Tensor& value) -> std::optional<at::Tensor> {
              const auto found = shard_of.find(parameters[index].unsafeGetTensorImpl());
              if (found == shard_of.end()) return std::nullopt;
              return Whole(shards_[found->second], value);
            }));
      }
      at::NoGradGuard no_grad;
      for (const TensorParallelShard& shard : shards_) {
        slices.push_back(shard.parameter.data());
        at::Tensor whole = Whole(shard, shard.parameter);
        shard.parameter.set_data(whole);
      }
      for (size_t o = 0; o < optimizers.size(); ++o) {
        converted.push_back({optimizers[o].get(), std::move(optimizers[o]->state())});
        optimizers[o]->state().clear();
        const absl::Status loaded = codec.load_state_dict(*optimizers[o], whole_states[o]);
        TORCH_CHECK(loaded.ok(), "model_parallel: making an optimizer's state whole: ", loaded.message());
      }
    });
  } catch (const std::exception& e) {
    status = absl::InternalError(compat::ExceptionMessage(e));
  }
  if (status.ok()) status = body();
  if (!restoring || !status.ok()) {
    put_back();
    return status;
  }
  // What was restored (the same whole state on every rank) becomes this rank's slices; no collective.
  try {
    at::NoGradGuard no_grad;
    std::vector<IValue> sliced_states;
    for (const Converted& item : converted) {
      const std::vector<at::Tensor> parameters = parameters_of(*item.optimizer);
      absl::StatusOr<IValue> whole = codec.state_dict(*item.optimizer);
      TORCH_CHECK(whole.ok(), "model_parallel: reading a restored optimizer's state: ", whole.status().message());
      sliced_states.push_back(
          MapState(*whole, parameters, [&](size_t index, const at::Tensor& value) -> std::optional<at::Tensor> {
            const auto found = shard_of.find(parameters[index].unsafeGetTensorImpl());
            if (found == shard_of.end()) return std::nullopt;
            return Slice(shards_[found->second], value);
          }));
    }
    for (const TensorParallelShard& shard : shards_) shard.parameter.set_data(Slice(shard, shard.parameter));
    for (size_t o = 0; o < converted.size(); ++o) {
      converted[o].optimizer->state().clear();
      const absl::Status loaded = codec.load_state_dict(*converted[o].optimizer, sliced_states[o]);
      TORCH_CHECK(loaded.ok(), "model_parallel: slicing a restored optimizer's state: ", loaded.message());
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("model_parallel: keeping this rank's slices of a restored checkpoint: ",
                                            compat::ExceptionMessage(e)));
  }
  return absl::OkStatus();
}

}  // namespace kiln
