#include "trainer/strategies/fsdp_strategy.h"

#include <algorithm>
#include <exception>
#include <map>
#include <unordered_set>
#include <utility>

#include "ATen/ATen.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "hal/compat/error_message.h"
#include "hal/precision.h"
#include "hal/shared_memory_collectives.h"
#include "torch/csrc/autograd/function.h"
#include "torch/csrc/autograd/function_hook.h"
#include "torch/csrc/autograd/variable.h"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"
#include "torch/csrc/distributed/c10d/comm.hpp"
#include "torch/optim/optimizer.h"
#include "trainer/core/batch.h"
#include "trainer/core/lightning_module.h"
#include "trainer/core/meta_device.h"
#include "trainer/strategies/gather_on_use.h"

namespace kiln {
namespace {

constexpr size_t kBroadcastBucketBytes = 250 * 1024 * 1024;  // PyTorch DDP's _sync_module_states bucket.

// Autograd's post-hook on a parameter's gradient accumulator: runs once its gradient is accumulated.
class GradientReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  explicit GradientReadyHook(std::function<void()> ready) : ready_(std::move(ready)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& inputs) override {
    // The gradient an AccumulateGrad got: an activation-checkpointed unit's parameters also pass through the outer
    // graph with none (their gradients came from the recomputation's own backward).
    if (!inputs.empty() && inputs[0].defined()) ready_();
    return outputs;
  }

 private:
  std::function<void()> ready_;
};

c10::ScalarType ScalarTypeOf(FsdpDtype dtype) {
  switch (dtype) {
    case FsdpDtype::kBFloat16:
      return c10::ScalarType::BFloat16;
    case FsdpDtype::kFloat16:
      return c10::ScalarType::Half;
    case FsdpDtype::kFloat32:
      break;
  }
  return c10::ScalarType::Float;
}

std::optional<c10::ScalarType> ScalarTypeOf(const std::optional<FsdpDtype>& dtype) {
  if (!dtype.has_value()) return std::nullopt;
  return ScalarTypeOf(*dtype);
}

}  // namespace

// The dispatcher's fallback asks the strategy through this (gather_on_use.h).
class FsdpGatherer final : public GatherOnUse {
 public:
  explicit FsdpGatherer(FSDPStrategy* strategy) : strategy_(strategy) {}
  bool Ready(int unit) const override { return strategy_->UnitReady(unit); }
  void Gather(const std::vector<int>& units) override { strategy_->GatherUnits(units); }

 private:
  FSDPStrategy* strategy_;
};

FSDPStrategy::FSDPStrategy(FSDPOptions options)
    : ParallelStrategy(options.timeout, options.process_group_backend), options_(std::move(options)) {}

FSDPStrategy::~FSDPStrategy() { Unwrap(); }

absl::Status FSDPStrategy::Setup(const Plan& plan, torch::nn::Module& model) {
  // What is not built yet is refused before anything starts, with what to use instead.
  if (options_.cpu_offload && options_.sharding_strategy == ShardingStrategy::kNoShard) {
    return absl::InvalidArgumentError(
        "fsdp: cpu_offload keeps each rank's shard in host memory, but sharding_strategy NO_SHARD shards nothing; use "
        "FULL_SHARD or SHARD_GRAD_OP with it, or leave cpu_offload off");
  }
  // Mixed precision: the options', or what the precision implies (Lightning's FSDPPrecision).
  mixed_precision_ = options_.mixed_precision;
  const bool implied = mixed_precision_.empty();
  if (implied) mixed_precision_ = FsdpMixedPrecisionFor(PrecisionName(plan.precision));
  if (mixed_precision_.param_dtype.has_value() && options_.sharding_strategy == ShardingStrategy::kNoShard) {
    const c10::ScalarType param_dtype = ScalarTypeOf(*mixed_precision_.param_dtype);
    bool casts = false;
    for (const at::Tensor& parameter : model.parameters()) casts = casts || parameter.scalar_type() != param_dtype;
    if (casts && !implied) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fsdp: mixed precision (param_dtype ", FsdpDtypeName(*mixed_precision_.param_dtype),
          ") keeps each rank's shard in the parameters' own type and gathers it in param_dtype, but sharding_strategy "
          "NO_SHARD shards nothing; use FULL_SHARD or SHARD_GRAD_OP with mixed precision, or ddp with precision "
          "bf16-mixed for NO_SHARD's memory"));
    }
    if (casts) {
      LOG(WARNING) << "fsdp: precision " << PrecisionName(plan.precision) << " implies FSDP mixed precision ("
                   << FsdpDtypeName(*mixed_precision_.param_dtype) << " parameters), which NO_SHARD cannot keep "
                   << "(nothing is sharded to keep in float32); NO_SHARD runs with the parameters in their own type";
      mixed_precision_ = {};
    }
  }
  // What the accelerator's collective backend lacks (Accelerator::SupportedCollectives) is refused here, by name.
  const CollectiveSupport support = plan.accelerator->SupportedCollectives();
  const bool device_backend = plan.process_group_backend.value_or(plan.accelerator->ProcessGroupBackend()) ==
                              plan.accelerator->ProcessGroupBackend();
  if (device_backend && !support.allgather) {
    return absl::FailedPreconditionError(absl::StrCat(
        "fsdp gathers each unit's parameters with all-gather, which accelerator '", plan.accelerator->name(),
        "''s collective backend '", plan.accelerator->ProcessGroupBackend(), "' lacks (it declares no ",
        support.Lacking(), "); use ddp, or bring an all-gather"));
  }
  if (device_backend && !support.reduce_scatter &&
      options_.gradient_reduction == GradientReduction::kReduceScatter) {
    return absl::FailedPreconditionError(absl::StrCat(
        "fsdp's gradient_reduction is reduce-scatter, which accelerator '", plan.accelerator->name(),
        "''s collective backend '", plan.accelerator->ProcessGroupBackend(),
        "' lacks (it declares no _reduce_scatter_base); leave gradient_reduction at its default, which all-reduces "
        "then"));
  }
  reduce_scatter_lacking_ = device_backend && !support.reduce_scatter;
  // The parameters go to the device one unit at a time, as shards: the whole model is never there at once.
  if (absl::Status joined = JoinProcessGroup(plan, model, /*move_model=*/false); !joined.ok()) return joined;
  shard_group_ = process_group();
  replicate_group_.reset();
  int shard_rank = global_rank();
  int shard_world = world_size();
  if (options_.sharding_strategy == ShardingStrategy::kHybridShard && world_size() > local_world_size()) {
    // Sharded within each node, replicated across the nodes: a group per node, and a group per local rank.
    const int local = local_world_size();
    if (world_size() % local != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "fsdp: HYBRID_SHARD shards within each node, but the ", world_size(), " ranks are not ", local,
          " per node on every node; give every node the same number of devices"));
    }
    std::vector<int> node_ranks;
    for (int r = 0; r < local; ++r) node_ranks.push_back(node_rank() * local + r);
    std::vector<int> replicas;
    for (int n = 0; n < world_size() / local; ++n) replicas.push_back(n * local + global_rank() % local);
    absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> intra =
        MakeSubgroup(node_ranks, absl::StrCat("fsdp/node", node_rank()));
    if (!intra.ok()) return intra.status();
    absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> inter =
        MakeSubgroup(replicas, absl::StrCat("fsdp/replicas", global_rank() % local));
    if (!inter.ok()) return inter.status();
    shard_group_ = *intra;
    replicate_group_ = *inter;
    shard_rank = global_rank() % local;
    shard_world = local;
  }
  FsdpWrapPolicy policy = options_.auto_wrap_policy;
  policy.checkpoint_types = options_.activation_checkpointing_policy;
  wrapping_ = WrapForFsdp(model, policy, this);
  if (!wrapping_.unwrappable.empty()) {
    LOG(WARNING) << "fsdp: activation_checkpointing_policy picks " << absl::StrJoin(wrapping_.unwrappable, ", ")
                 << ", which the model calls as members rather than as elements of a torch::nn::Sequential, so "
                    "nothing can run their forward again: they are units, and keep their activations";
  }
  std::unordered_map<const c10::TensorImpl*, std::string> names;
  for (const auto& item : model.named_parameters()) names.emplace(item.value().unsafeGetTensorImpl(), item.key());
  std::unordered_set<const c10::TensorImpl*> taken;
  const auto members_of = [&](torch::nn::Module& module) {
    std::vector<FlatParameter::Member> members;
    for (const at::Tensor& parameter : module.parameters()) {
      const c10::TensorImpl* impl = parameter.unsafeGetTensorImpl();
      if (!taken.insert(impl).second) continue;
      members.push_back({names.at(impl), parameter});  // A submodule's parameters are the model's.
    }
    return members;
  };
  const bool shard = options_.sharding_strategy != ShardingStrategy::kNoShard;
  const FlatParameter::Mixed mixed{.param_dtype = ScalarTypeOf(mixed_precision_.param_dtype),
                                   .reduce_dtype = ScalarTypeOf(mixed_precision_.reduce_dtype)};
  // Each unit's members, the root's (what no unit holds) last: decided before any is made.
  std::vector<std::vector<FlatParameter::Member>> members;
  for (const FsdpWrapping::Unit& unit : wrapping_.units) members.push_back(members_of(*unit.module));
  members.push_back(members_of(model));
  flats_.clear();
  flats_.resize(members.size());
  const auto make = [&](size_t unit) {
    if (members[unit].empty()) return;
    const bool root = unit + 1 == members.size();
    flats_[unit] = std::make_unique<FlatParameter>(root ? "(root)" : wrapping_.units[unit].name,
                                                   std::move(members[unit]), shard_rank, shard_world, shard,
                                                   root_device(), options_.cpu_offload, replicate_group_.get(), mixed);
    members[unit].clear();
    // A unit's whole parameters exist only while it computes (the root's always).
    if (!root) flats_[unit]->Reshard();
  };
  try {
    if (HasMetaTensors(model)) {
      // Built on the meta device (configure_model under a kiln::MetaDeviceScope): the model's construction runs again
      // on the host (meta_device.h), and each unit is flattened and sharded as soon as its last parameter is made, so
      // that this process holds the units made so far as shards, the root, and the unit being made: never the whole
      // model. Same seed, same values as the model built normally.
      // Every rank makes the same values from the same seed, but the ranks start from rank 0's, as from a model built
      // normally (ParallelStrategy broadcast what was not on the meta device): each unit's parameters are broadcast
      // as it is made, the buffers once all are made.
      const auto broadcast = [&](std::vector<at::Tensor> tensors) {
        if (world_size() <= 1 || tensors.empty()) return;
        Collective("broadcasting rank 0's parameters made from the meta device", [&] {
          c10d::broadcast_coalesced(process_group(), tensors, kBroadcastBucketBytes, /*rank=*/0);
        });
      };
      std::vector<at::Tensor> meta_buffers;
      for (const at::Tensor& buffer : model.buffers()) {
        if (buffer.is_meta()) meta_buffers.push_back(buffer);
      }
      std::unordered_map<const c10::TensorImpl*, size_t> unit_of;
      std::vector<size_t> left(members.size(), 0);
      for (size_t unit = 0; unit < members.size(); ++unit) {
        for (const FlatParameter::Member& member : members[unit]) {
          if (!member.parameter.is_meta()) continue;
          unit_of.emplace(member.parameter.unsafeGetTensorImpl(), unit);
          ++left[unit];
        }
      }
      absl::Status made = MaterializeMetaTensors(model, [&](const at::Tensor& tensor) {
        const auto found = unit_of.find(tensor.unsafeGetTensorImpl());
        if (found == unit_of.end() || --left[found->second] > 0) return;
        std::vector<at::Tensor> values;
        for (const FlatParameter::Member& member : members[found->second]) values.push_back(member.parameter.detach());
        broadcast(std::move(values));
        make(found->second);
      });
      if (!made.ok()) return absl::Status(made.code(), absl::StrCat("fsdp: ", made.message()));
      std::vector<at::Tensor> values;
      for (const at::Tensor& buffer : meta_buffers) values.push_back(buffer.detach());
      broadcast(std::move(values));
    }
    for (size_t unit = 0; unit < members.size(); ++unit) {
      if (flats_[unit] == nullptr) make(unit);
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(compat::ExceptionMessage(e));
  }
  try {
    at::NoGradGuard no_grad;
    const std::optional<c10::ScalarType> buffer_dtype = ScalarTypeOf(mixed_precision_.buffer_dtype);
    cast_buffers_.clear();
    for (at::Tensor& buffer : model.buffers()) {
      at::Tensor data = buffer.data().to(root_device());
      // Floating buffers only (a step counter stays an integer), as PyTorch's buffer_dtype.
      if (buffer_dtype.has_value() && data.is_floating_point() && data.scalar_type() != *buffer_dtype) {
        cast_buffers_.emplace_back(buffer, data.scalar_type());
        data = data.to(*buffer_dtype);
      }
      buffer.set_data(data);
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("fsdp: moving the model's buffers to ", root_device().str(), " failed: ",
                                            compat::ExceptionMessage(e)));
  }

  input_dtype_.reset();
  for (const auto& flat : flats_) {
    if (flat != nullptr && flat->mixed_precision()) input_dtype_ = flat->compute_dtype();
  }
  for (size_t unit = 0; unit < flats_.size(); ++unit) {
    if (flats_[unit] == nullptr) continue;
    const auto& members = flats_[unit]->members();
    for (size_t m = 0; m < members.size(); ++m) {
      location_[members[m].parameter.unsafeGetTensorImpl()] = {static_cast<int>(unit), static_cast<int>(m)};
    }
  }
  ready_.assign(flats_.size(), 0);
  position_.assign(flats_.size(), -1);
  reduced_.assign(flats_.size(), false);
  prepared_.assign(flats_.size(), false);
  // Unit a is inside unit b when b's module holds a's (names: "blocks.0" holds "blocks.0.mlp").
  inside_.assign(flats_.size(), std::vector<bool>(flats_.size(), false));
  for (size_t a = 0; a < wrapping_.units.size(); ++a) {
    for (size_t b = 0; b < wrapping_.units.size(); ++b) {
      const std::string around = absl::StrCat(wrapping_.units[b].name, ".");
      inside_[a][b] = a != b && absl::StartsWith(wrapping_.units[a].name, around);
    }
  }
  // Every sharded unit but the root (always whole) is gathered when an operator reads it.
  gatherer_ = std::make_unique<FsdpGatherer>(this);
  absl::StatusOr<std::unique_ptr<GatherOnUseScope>> scope = GatherOnUseScope::Install(gatherer_.get());
  if (!scope.ok()) return scope.status();
  gather_scope_ = *std::move(scope);
  for (size_t unit = 0; unit + 1 < flats_.size(); ++unit) {
    if (flats_[unit] != nullptr && flats_[unit]->sharded()) gather_scope_->Track(flats_[unit]->storage(), unit);
  }
  HookGradientArrival();
  HookGradients();
  try {
    ChooseGradientReduction();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("fsdp: ", compat::ExceptionMessage(e)));
  }
  int64_t total = 0;
  int64_t kept = 0;
  for (const auto& flat : flats_) {
    if (flat == nullptr) continue;
    total += flat->numel();
    kept += flat->sharded() ? flat->shard().numel() : flat->numel();
  }
  LOG(INFO) << "fsdp: " << ShardingStrategyName(options_.sharding_strategy) << ", " << wrapping_.units.size()
            << " unit(s) and the root, " << total << " parameters; rank " << global_rank() << " keeps "
            << kept << " of them (with padding), and their gradients and optimizer state";
  if (input_dtype_.has_value()) {
    const FlatParameter* flat = nullptr;
    for (const auto& candidate : flats_) flat = flat != nullptr ? flat : candidate.get();
    LOG(INFO) << "fsdp: mixed precision: parameters gathered and computed in " << *input_dtype_
              << ", gradients reduced in " << flat->reduce_dtype() << ", the shards kept in "
              << flat->shard().scalar_type() << "; buffers "
              << (mixed_precision_.buffer_dtype ? FsdpDtypeName(*mixed_precision_.buffer_dtype) : "as they are");
  }
  return absl::OkStatus();
}

Batch FSDPStrategy::BatchToDevice(const Batch& batch) const {
  Batch moved = ParallelStrategy::BatchToDevice(batch);
  if (!input_dtype_.has_value()) return moved;
  const c10::ScalarType dtype = *input_dtype_;
  const auto cast = [dtype](const at::Tensor& tensor) {
    return tensor.defined() && tensor.is_floating_point() ? tensor.to(dtype) : tensor;
  };
  // The target is the loss's business, not the model's input: as PyTorch's FSDP, which casts only the forward's.
  moved.input = cast(moved.input);
  if (moved.structured()) moved.data = MapTensors(moved.data, cast);
  return moved;
}

void FSDPStrategy::ChooseGradientReduction() {
  bool all_reduce = options_.gradient_reduction == GradientReduction::kAllReduce;
  if (options_.gradient_reduction == GradientReduction::kAuto) {
    // Gloo's reduce-scatter copies the buffer, all-reduces the copy and copies this rank's chunk out (PyTorch's
    // ProcessGroupGloo::reduce_scatter_tensor_coalesced, 2.x): the same sums as an all-reduce of the buffer itself,
    // with two copies more, the first on the calling thread. Measured on this machine (2 processes, 5.3 MB): 7.2 ms
    // against 6.1 ms. Where Gloo's ranks share this host, their CPU tensors go through shared memory
    // (hal/shared_memory_collectives.h), whose reduce-scatter moves a third of an all-reduce's bytes.
    // A backend that declares no reduce-scatter all-reduces.
    const c10::intrusive_ptr<c10d::Backend> backend = shard_group_->getBackend(root_device().type());
    all_reduce = reduce_scatter_lacking_ ||
                 (backend->getBackendName() == "gloo" && !SharedMemoryCollectives::IsSharedMemory(*backend));
  }
  for (const auto& flat : flats_) {
    if (flat != nullptr && flat->sharded()) flat->set_reduce_by_all_reduce(all_reduce);
  }
}

absl::Status FSDPStrategy::ConnectOptimizers(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers) {
  struct Place {
    size_t optimizer;
    size_t group;
    std::string first;  // The first parameter seen there.
    size_t count = 0;
  };
  std::unordered_map<int, Place> places;
  std::vector<std::vector<std::vector<at::Tensor>>> shards(optimizers.size());
  for (size_t o = 0; o < optimizers.size(); ++o) {
    if (!optimizers[o]->state().empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "fsdp: optimizer ", o, " already has state before the first step; fsdp points the optimizers at its "
          "shards, so configure_optimizers must return fresh ones"));
    }
    for (size_t g = 0; g < optimizers[o]->param_groups().size(); ++g) {
      shards[o].emplace_back();
      for (const at::Tensor& parameter : optimizers[o]->param_groups()[g].params()) {
        const auto [unit, index] = Locate(parameter);
        if (unit < 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "fsdp: optimizer ", o, " group ", g, " steps a tensor that is not one of the model's parameters; under "
              "fsdp an optimizer can step only the model's own parameters (build it from parameters())"));
        }
        if (!flats_[unit]->sharded()) {  // Units that are not sharded (NO_SHARD, one rank) keep their members.
          shards[o][g].push_back(parameter);
          continue;
        }
        const FlatParameter::Member* member = &flats_[unit]->members()[index];
        auto [place, added] = places.try_emplace(unit, Place{o, g, member->name});
        if (!added && (place->second.optimizer != o || place->second.group != g)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "fsdp keeps the parameters of unit '", flats_[unit]->name(), "' as one flat shard, so they must be in "
              "one optimizer parameter group, but '", place->second.first, "' is in optimizer ",
              place->second.optimizer, " group ", place->second.group, " and '", member->name, "' in optimizer ", o,
              " group ", g, "; put them in one group, or wrap their modules as separate units (auto_wrap_policy)"));
        }
        if (added) shards[o][g].push_back(flats_[unit]->shard());
        ++place->second.count;
      }
    }
  }
  for (const auto& [unit, place] : places) {
    if (place.count == flats_[unit]->members().size()) continue;
    std::vector<std::string> missing;
    for (const FlatParameter::Member& member : flats_[unit]->members()) missing.push_back(member.name);
    return absl::InvalidArgumentError(absl::StrCat(
        "fsdp keeps the parameters of unit '", flats_[unit]->name(), "' (", absl::StrJoin(missing, ", "),
        ") as one flat shard, so an optimizer steps all of them or none, but optimizer ", place.optimizer,
        " group ", place.group, " has ", place.count, " of the ", flats_[unit]->members().size(),
        "; give it all of them, or freeze the others with requires_grad(false) and leave them out of the unit"));
  }
  for (size_t o = 0; o < optimizers.size(); ++o) {
    Connected& connected = connected_[optimizers[o].get()];
    for (size_t g = 0; g < shards[o].size(); ++g) {
      connected.original.push_back(optimizers[o]->param_groups()[g].params());
      connected.sharded.push_back(shards[o][g]);
      optimizers[o]->param_groups()[g].params() = shards[o][g];
    }
  }
  return absl::OkStatus();
}

// An activation-checkpointed unit's wrapper calls these; its parameters are gathered on use like every unit's.
void FSDPStrategy::BeforeForward(int /*unit*/) {}

at::Tensor FSDPStrategy::AfterForward(int /*unit*/, at::Tensor output) { return output; }

bool FSDPStrategy::UnitReady(int unit) const { return unit == current_ && flats_[unit]->ready(); }

void FSDPStrategy::GatherUnits(const std::vector<int>& units) {
  const bool forward = !in_backward_;
  for (const int unit : units) {
    FlatParameter* flat = flats_[unit].get();
    if (unit == current_ && flat->ready()) continue;
    if (forward && recording_ && at::GradMode::is_enabled() && position_[unit] < 0) {
      position_[unit] = static_cast<int>(order_.size());
      order_.push_back(unit);
    }
    // The forward has left the units that are neither this one nor around it: FULL_SHARD frees them (so does every
    // strategy when no backward follows). What the same operator reads stays.
    if (forward && (ReshardsAfterForward() || !at::GradMode::is_enabled())) {
      for (size_t other = 0; other + 1 < flats_.size(); ++other) {
        FlatParameter* done = flats_[other].get();
        if (done == nullptr || static_cast<int>(other) == unit || !done->ready() || inside_[unit][other]) continue;
        if (std::find(units.begin(), units.end(), static_cast<int>(other)) != units.end()) continue;
        done->Reshard();
      }
    }
    Collective(forward ? "gathering a unit's parameters" : "gathering a unit's parameters for its backward", [&] {
      flat->Unshard(*shard_group_);
      if (forward ? options_.forward_prefetch : options_.backward_prefetch) Prefetch(unit, forward ? +1 : -1);
    });
    current_ = unit;
  }
}

void FSDPStrategy::Prefetch(int unit, int step) {
  if (recording_ || position_[unit] < 0) return;
  const int next = position_[unit] + step;
  if (next < 0 || next >= static_cast<int>(order_.size())) return;
  if (FlatParameter* flat = flats_[order_[next]].get(); flat != nullptr) flat->StartUnshard(*shard_group_);
}

void FSDPStrategy::HookGradientArrival() {
  for (size_t unit = 0; unit + 1 < flats_.size(); ++unit) {
    if (flats_[unit] == nullptr) continue;
    for (const FlatParameter::Member& member : flats_[unit]->members()) {
      if (!member.parameter.requires_grad()) continue;
      // Before a member's gradient is accumulated: the unit's gradients have where to land (its flat buffer).
      at::Tensor parameter = member.parameter;
      const unsigned index = parameter.register_hook([this, unit](const at::Tensor&) {
        if (!in_backward_ || prepared_[unit]) return;
        prepared_[unit] = true;
        flats_[unit]->PrepareGradients();
      });
      arrival_hooks_.push_back({parameter, index});
    }
  }
}

void FSDPStrategy::HookGradients() {
  for (size_t unit = 0; unit < flats_.size(); ++unit) {
    if (flats_[unit] == nullptr) continue;
    for (const FlatParameter::Member& member : flats_[unit]->members()) {
      if (!member.parameter.requires_grad()) continue;
      std::shared_ptr<torch::autograd::Node> accumulator = torch::autograd::impl::grad_accumulator(member.parameter);
      const uintptr_t key = accumulator->add_post_hook(
          std::make_unique<GradientReadyHook>([this, unit] { GradientReady(static_cast<int>(unit)); }));
      hooks_.push_back({std::move(accumulator), key});
    }
  }
}

void FSDPStrategy::UnhookGradients() {
  for (auto& [accumulator, key] : hooks_) accumulator->del_post_hook(key);
  hooks_.clear();
}

void FSDPStrategy::GradientReady(int unit) {
  if (!in_backward_) return;
  if (++ready_[unit] == flats_[unit]->requires_grad_count()) FinishUnitBackward(unit);
}

void FSDPStrategy::FinishUnitBackward(int unit) {
  if (reduced_[unit]) return;
  reduced_[unit] = true;
  FlatParameter& flat = *flats_[unit];
  // The reduction travels while the next unit's backward computes; one at a time, so that at most two units'
  // whole gradients exist (this one's, travelling, and the next one's, being computed).
  if (sync_gradients_) {
    FinishReduction();
    flat.StartReduceGradients(*shard_group_);
    reducing_ = unit;
  }
  if (static_cast<size_t>(unit) + 1 < flats_.size()) flat.Reshard();
}

void FSDPStrategy::FinishReduction() {
  if (reducing_ < 0) return;
  flats_[reducing_]->FinishReduceGradients();
  reducing_ = -1;
}

void FSDPStrategy::Backward(const at::Tensor& loss, bool sync_gradients) {
  sync_gradients_ = sync_gradients;
  recording_ = false;  // The first step's forward order is the prefetching order.
  reducing_ = -1;
  std::fill(ready_.begin(), ready_.end(), 0);
  std::fill(reduced_.begin(), reduced_.end(), false);
  std::fill(prepared_.begin(), prepared_.end(), false);
  if (flats_.back() != nullptr) flats_.back()->PrepareGradients();  // The root's parameters are always whole.
  in_backward_ = true;
  struct Done {
    ~Done() { *flag = false; }
    bool* flag;
  } done{&in_backward_};
  Collective("the backward pass's gradient reduce-scatter", [&] {
    loss.backward();
    // Units some of whose parameters took no part in this step are reduced now, in unit order (the same on every
    // rank as long as every rank leaves out the same parameters).
    for (size_t unit = 0; unit < flats_.size(); ++unit) {
      if (flats_[unit] != nullptr && flats_[unit]->has_gradients()) FinishUnitBackward(static_cast<int>(unit));
    }
    FinishReduction();
    // Units whose parameters the backward read but which have no gradient to reduce (frozen ones) are freed too.
    for (size_t unit = 0; unit + 1 < flats_.size(); ++unit) {
      if (flats_[unit] != nullptr) flats_[unit]->Reshard();
    }
  });
}

void FSDPStrategy::OptimizerStep(torch::optim::Optimizer& optimizer) {
  optimizer.step();
  // The root's whole parameters follow its new shard.
  FlatParameter* root = flats_.back().get();
  if (root == nullptr || !root->sharded()) return;
  for (const auto& group : optimizer.param_groups()) {
    for (const at::Tensor& parameter : group.params()) {
      if (parameter.unsafeGetTensorImpl() != root->shard().unsafeGetTensorImpl()) continue;
      Collective("gathering the root's parameters after the optimizer step", [&] {
        root->Reshard();
        root->Unshard(*shard_group_);
      });
      return;
    }
  }
}

void FSDPStrategy::ClipGradientsNorm(const std::vector<at::Tensor>& parameters, double max_norm) {
  std::vector<at::Tensor> grads;
  for (const at::Tensor& parameter : parameters) {
    if (parameter.grad().defined()) grads.push_back(parameter.grad());
  }
  bool sharded = false;
  for (const auto& flat : flats_) sharded = sharded || (flat != nullptr && flat->sharded());
  if (!sharded) {
    ClipGradNorm(parameters, max_norm);
    return;
  }
  // The norm over every rank's shard: the sum of the squares, summed over the ranks (every rank calls this for the
  // same optimizer, whether its shards have gradients or not).
  at::Tensor squares = at::zeros({1}, at::TensorOptions(at::kFloat).device(root_device()));
  for (const at::Tensor& grad : grads) squares += grad.detach().to(at::kFloat).norm(2).pow(2).to(squares.device());
  Collective("summing the gradients' norm", [&] {
    std::vector<at::Tensor> tensors = {squares};
    shard_group_->allreduce(tensors)->wait();
  });
  const at::Tensor total_norm = squares.sqrt();
  const at::Tensor coefficient = at::clamp(max_norm / (total_norm + 1e-6), c10::nullopt, 1.0);
  for (const at::Tensor& grad : grads) grad.detach().mul_(coefficient.to(grad.device(), grad.scalar_type()));
}

std::function<void(at::Tensor&)> FSDPStrategy::GradientOverflowAgreement() {
  return [this](at::Tensor& found_inf) {
    Collective("agreeing on the gradients' inf/NaN check", [&] {
      std::vector<at::Tensor> tensors = {found_inf};
      shard_group_->allreduce(tensors)->wait();
    });
  };
}

absl::Status FSDPStrategy::Finish() {
  GatherOnUseScope::ScopedBypass bypass;
  try {
    // Whole in host memory first, one unit on the device at a time (on the CPU: gathered where it is), so that a
    // model larger than one device's memory can end whole too.
    Collective("gathering the model after the run", [&] {
      for (auto& flat : flats_) {
        if (flat != nullptr) flat->GatherToHost(*shard_group_);
      }
    });
  } catch (const std::exception& e) {
    return absl::InternalError(compat::ExceptionMessage(e));
  }
  // Then onto the device, parameter by parameter, where the whole model fits (no collective: each rank alone).
  std::vector<std::pair<at::Tensor, at::Tensor>> moved;  // (parameter, its host value)
  try {
    at::NoGradGuard no_grad;
    for (auto& flat : flats_) {
      if (flat == nullptr) continue;
      for (const FlatParameter::Member& member : flat->members()) {
        at::Tensor parameter = member.parameter;
        if (parameter.device() == root_device()) continue;
        const at::Tensor host = parameter.detach();
        parameter.set_data(host.to(root_device(), /*non_blocking=*/false, /*copy=*/true));
        moved.emplace_back(parameter, host);
      }
    }
  } catch (const std::exception& e) {
    for (auto& [parameter, host] : moved) parameter.set_data(host);
    LOG(WARNING) << "fsdp: the trained model does not fit whole on " << root_device().str()
                 << ", so its parameters stay in host memory (" << compat::ExceptionMessage(e) << ")";
  }
  try {
    Unwrap();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("fsdp: ending the run: ", compat::ExceptionMessage(e)));
  }
  return absl::OkStatus();
}

std::pair<int, int> FSDPStrategy::Locate(const at::Tensor& parameter) const {
  const auto found = location_.find(parameter.unsafeGetTensorImpl());
  return found == location_.end() ? std::pair<int, int>{-1, -1} : found->second;
}

namespace {

using c10::IValue;
using c10::impl::GenericDict;
using c10::impl::GenericList;

GenericDict AnyDict() { return GenericDict(c10::AnyType::get(), c10::AnyType::get()); }

// Whether `key`'s value in a parameter's optimizer state holds one value per element of the parameter (Adam's
// moments, SGD's momentum), rather than one for the whole parameter ("step").
bool PerElement(const std::string& key, const IValue& value, at::IntArrayRef sizes) {
  return key != "step" && value.isTensor() && value.toTensor().sizes() == sizes;
}

struct StateDictParts {
  GenericDict state;
  std::vector<GenericDict> groups;
};

StateDictParts Parts(const IValue& dict) {
  TORCH_CHECK_VALUE(dict.isGenericDict() && dict.toGenericDict().contains("state") &&
                        dict.toGenericDict().contains("param_groups"),
                    "fsdp: this optimizer's state is not in PyTorch's state_dict layout (Kiln saves SGD, Adam, AdamW, "
                    "RMSprop and Adagrad that way); fsdp checkpoints need one of those");
  const GenericDict top = dict.toGenericDict();
  StateDictParts parts{top.at("state").toGenericDict(), {}};
  for (const IValue& group : top.at("param_groups").toListRef()) parts.groups.push_back(group.toGenericDict());
  return parts;
}

// A dictionary of `parts`' groups' options with new "params" lists (`counts[g]` indices each, numbered on), and
// `state`.
IValue Assemble(const StateDictParts& parts, const std::vector<size_t>& counts, GenericDict state) {
  GenericList groups(c10::AnyType::get());
  int64_t index = 0;
  for (size_t g = 0; g < parts.groups.size(); ++g) {
    GenericDict group = parts.groups[g].copy();
    GenericList params(c10::AnyType::get());
    for (size_t j = 0; j < counts[g]; ++j) params.push_back(IValue(index++));
    group.insert_or_assign(IValue("params"), IValue(params));
    groups.push_back(IValue(group));
  }
  GenericDict top = AnyDict();
  top.insert(IValue("state"), IValue(std::move(state)));
  top.insert(IValue("param_groups"), IValue(groups));
  return IValue(top);
}

// Where each tensor of `groups` stands in a state dictionary's numbering (PyTorch's: group after group).
std::unordered_map<const c10::TensorImpl*, int64_t> Numbering(const std::vector<std::vector<at::Tensor>>& groups) {
  std::unordered_map<const c10::TensorImpl*, int64_t> numbering;
  int64_t index = 0;
  for (const auto& group : groups) {
    for (const at::Tensor& tensor : group) numbering[tensor.unsafeGetTensorImpl()] = index++;
  }
  return numbering;
}

}  // namespace

IValue FSDPStrategy::FullStateDict(const Connected& connected, const IValue& sharded_dict) {
  const StateDictParts parts = Parts(sharded_dict);
  const std::unordered_map<const c10::TensorImpl*, int64_t> sharded_index = Numbering(connected.sharded);
  // Every rank's chunk of a unit's per-element state, gathered once per unit and key, in the same order on every
  // rank (the groups' order, then the state's keys in the order the optimizer made them).
  std::map<std::pair<int, std::string>, at::Tensor> gathered;
  const auto whole = [&](int unit, const std::string& key, const at::Tensor& chunk) -> const at::Tensor& {
    auto [it, added] = gathered.try_emplace({unit, key});
    if (added) {
      FlatParameter& flat = *flats_[unit];
      at::Tensor input = chunk.to(root_device()).contiguous();
      at::Tensor output = at::empty({flat.padded_numel()}, input.options());
      shard_group_->_allgather_base(output, input)->wait();
      it->second = output.cpu();
    }
    return it->second;
  };
  GenericDict state = AnyDict();
  std::vector<size_t> counts;
  int64_t full_index = 0;
  for (const auto& group : connected.original) {
    counts.push_back(group.size());
    for (const at::Tensor& parameter : group) {
      const auto [unit, member] = Locate(parameter);
      const bool sharded = unit >= 0 && flats_[unit]->sharded();
      const at::Tensor& entry = sharded ? flats_[unit]->shard() : parameter;
      const auto found = parts.state.find(IValue(sharded_index.at(entry.unsafeGetTensorImpl())));
      if (found != parts.state.end()) {
        if (!sharded) {
          state.insert(IValue(full_index), found->value());
        } else {
          const FlatParameter& flat = *flats_[unit];
          const at::Tensor& own = flat.members()[member].parameter;
          GenericDict values = AnyDict();
          for (const auto& item : found->value().toGenericDict()) {
            const std::string key = item.key().toStringRef();
            if (PerElement(key, item.value(), {flat.chunk()})) {
              values.insert(item.key(), IValue(whole(unit, key, item.value().toTensor())
                                                   .narrow(0, flat.offset(member), own.numel())
                                                   .view(own.sizes())
                                                   .clone()));
            } else {
              values.insert(item.key(), item.value());
            }
          }
          state.insert(IValue(full_index), IValue(values));
        }
      }
      ++full_index;
    }
  }
  return Assemble(parts, counts, std::move(state));
}

IValue FSDPStrategy::ShardedStateDict(const Connected& connected, const IValue& full_dict) const {
  const StateDictParts parts = Parts(full_dict);
  const std::unordered_map<const c10::TensorImpl*, int64_t> full_index = Numbering(connected.original);
  GenericDict state = AnyDict();
  std::vector<size_t> counts;
  int64_t sharded_index = 0;
  for (const auto& group : connected.sharded) {
    counts.push_back(group.size());
    for (const at::Tensor& entry : group) {
      const auto [unit, member] = Locate(entry);
      if (unit >= 0) {  // A member of a unit that is not sharded: its own state.
        const auto found = parts.state.find(IValue(full_index.at(entry.unsafeGetTensorImpl())));
        if (found != parts.state.end()) state.insert(IValue(sharded_index), found->value());
        ++sharded_index;
        continue;
      }
      // A unit's shard: its members' per-element state laid out as its parameters are, and this rank's chunk.
      const FlatParameter* flat = nullptr;
      for (const auto& candidate : flats_) {
        if (candidate != nullptr && candidate->sharded() &&
            candidate->shard().unsafeGetTensorImpl() == entry.unsafeGetTensorImpl()) {
          flat = candidate.get();
        }
      }
      TORCH_CHECK(flat != nullptr, "fsdp: an optimizer steps a tensor that is neither a shard nor a parameter");
      const auto& members = flat->members();
      const auto first = parts.state.find(IValue(full_index.at(members[0].parameter.unsafeGetTensorImpl())));
      if (first != parts.state.end()) {
        GenericDict values = AnyDict();
        for (const auto& item : first->value().toGenericDict()) {
          const std::string key = item.key().toStringRef();
          if (!PerElement(key, item.value(), members[0].parameter.sizes())) {
            values.insert(item.key(), item.value());
            continue;
          }
          at::Tensor laid_out = at::zeros({flat->padded_numel()}, item.value().toTensor().options());
          for (size_t m = 0; m < members.size(); ++m) {
            const auto saved = parts.state.find(IValue(full_index.at(members[m].parameter.unsafeGetTensorImpl())));
            TORCH_CHECK_VALUE(saved != parts.state.end() && saved->value().toGenericDict().contains(item.key()),
                              "fsdp: the checkpoint's optimizer state has '", key, "' for '", members[0].name,
                              "' but not for '", members[m].name, "', which fsdp keeps in the same shard");
            const at::Tensor value = saved->value().toGenericDict().at(item.key()).toTensor();
            laid_out.narrow(0, flat->offset(m), members[m].parameter.numel()).copy_(value.reshape(-1));
          }
          values.insert(item.key(), IValue(flat->ChunkOf(laid_out).clone()));
        }
        state.insert(IValue(sharded_index), IValue(values));
      }
      ++sharded_index;
    }
  }
  return Assemble(parts, counts, std::move(state));
}

absl::Status FSDPStrategy::WithFullState(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                                         const OptimizerStateCodec& codec, bool restoring,
                                         absl::FunctionRef<absl::Status()> body) {
  // The units are made whole here, on purpose: what the body reads and writes needs no gather (gather_on_use.h).
  GatherOnUseScope::ScopedBypass bypass;
  std::vector<bool> was_gathered;
  for (const auto& flat : flats_) was_gathered.push_back(flat != nullptr && flat->gathered());
  struct Converted {
    torch::optim::Optimizer* optimizer;
    const Connected* connected;
    ska::flat_hash_map<void*, std::unique_ptr<torch::optim::OptimizerParamState>> sharded_state;
  };
  std::vector<Converted> converted;
  // Whether an optimizer steps the model's own parameters (no unit of theirs is sharded: NO_SHARD, one rank): its
  // state is whole as it is, and converting it would only copy it on the device.
  const auto steps_originals = [](const Connected& connected) {
    for (size_t g = 0; g < connected.original.size(); ++g) {
      if (connected.sharded[g].size() != connected.original[g].size()) return false;
      for (size_t i = 0; i < connected.original[g].size(); ++i) {
        if (!connected.sharded[g][i].is_same(connected.original[g][i])) return false;
      }
    }
    return true;
  };
  const auto put_back = [&](Converted& item) {
    for (size_t g = 0; g < item.connected->sharded.size(); ++g) {
      item.optimizer->param_groups()[g].params() = item.connected->sharded[g];
    }
    item.optimizer->state() = std::move(item.sharded_state);
  };
  bool moved_to_host = false;
  const auto reshard = [&] {
    for (size_t unit = 0; unit < flats_.size(); ++unit) {
      if (flats_[unit] == nullptr) continue;
      flats_[unit]->ReturnFromHost();
      if (!was_gathered[unit]) flats_[unit]->Reshard();
    }
    if (moved_to_host) {  // Their data came back from the host: autograd has new gradient accumulators for them.
      UnhookGradients();
      HookGradients();
    }
  };
  absl::Status status = absl::OkStatus();
  try {
    Collective("gathering the model and its optimizer state for a checkpoint", [&] {
      // The whole state in host memory, one unit on the device at a time, so that a model that fits the devices only
      // sharded can be saved and restored; a restore's values then become each rank's chunk (ReturnFromHost).
      for (auto& flat : flats_) {
        if (flat == nullptr) continue;
        flat->GatherToHost(*shard_group_);
        moved_to_host = moved_to_host || flat->on_host();
      }
      for (const auto& optimizer : optimizers) {
        const auto found = connected_.find(optimizer.get());
        if (found == connected_.end() || steps_originals(found->second)) continue;
        absl::StatusOr<IValue> sharded = codec.state_dict(*optimizer);
        TORCH_CHECK(sharded.ok(), "fsdp: reading an optimizer's state: ", sharded.status().message());
        const IValue full = FullStateDict(found->second, *sharded);
        converted.push_back({optimizer.get(), &found->second, std::move(optimizer->state())});
        optimizer->state().clear();
        for (size_t g = 0; g < found->second.original.size(); ++g) {
          optimizer->param_groups()[g].params() = found->second.original[g];
        }
        const absl::Status loaded = codec.load_state_dict(*optimizer, full);
        TORCH_CHECK(loaded.ok(), "fsdp: making an optimizer's state whole: ", loaded.message());
      }
    });
  } catch (const std::exception& e) {
    status = absl::InternalError(compat::ExceptionMessage(e));
  }
  if (status.ok()) status = body();
  for (Converted& item : converted) {
    if (!restoring || !status.ok()) {
      put_back(item);
      continue;
    }
    // What was restored becomes this rank's part: the shards' state from the whole state (no collective: every
    // rank read the same checkpoint).
    try {
      absl::StatusOr<IValue> full = codec.state_dict(*item.optimizer);
      TORCH_CHECK(full.ok(), "fsdp: reading a restored optimizer's state: ", full.status().message());
      const IValue sharded = ShardedStateDict(*item.connected, *full);
      put_back(item);
      item.optimizer->state().clear();
      const absl::Status loaded = codec.load_state_dict(*item.optimizer, sharded);
      TORCH_CHECK(loaded.ok(), "fsdp: sharding a restored optimizer's state: ", loaded.message());
    } catch (const std::exception& e) {
      status = absl::InternalError(compat::ExceptionMessage(e));
    }
  }
  if (restoring && status.ok()) {
    for (auto& flat : flats_) {
      if (flat == nullptr) continue;
      if (flat->on_host()) {
        flat->ReturnFromHost(/*update_shard=*/true);
      } else {
        flat->UpdateShardFromFull();
      }
    }
  }
  reshard();
  return status;
}

void FSDPStrategy::Unwrap() {
  gather_scope_.reset();  // First: what follows reads the members without a gather.
  gatherer_.reset();
  current_ = -1;
  for (auto& [parameter, index] : arrival_hooks_) parameter.remove_hook(index);
  arrival_hooks_.clear();
  UnhookGradients();
  wrapping_.Restore();
  for (auto& flat : flats_) {
    if (flat != nullptr) flat->Release();
  }
  try {
    at::NoGradGuard no_grad;
    for (auto& [buffer, dtype] : cast_buffers_) buffer.set_data(buffer.data().to(dtype));  // buffer_dtype undone.
  } catch (const std::exception& e) {
    LOG(WARNING) << "fsdp: putting the buffers back in their own type failed: " << compat::ExceptionMessage(e);
  }
  cast_buffers_.clear();
  flats_.clear();
  location_.clear();
  connected_.clear();
}

void FSDPStrategy::ReleaseState() {
  Unwrap();
  shard_group_.reset();
  replicate_group_.reset();
}

}  // namespace kiln
