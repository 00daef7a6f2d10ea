#include "trainer/optim/fused_optimizers.h"

#include <tuple>
#include <utility>

#include "ATen/Functions.h"
#include "glog/logging.h"
#include "hal/compat/fused_optimizer.h"
#include "hal/compat/optimizer_state.h"

namespace kiln {
namespace {

// The parameters of one group that share a device and a dtype: what one kernel call takes.
struct Bucket {
  c10::Device device = c10::kCPU;
  c10::ScalarType dtype = c10::kFloat;
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, momentum_buffers;
};

// The bucket of `param`'s device and dtype, made when missing with room for `group_size` parameters (the group's
// size: every parameter lands in one bucket when they share a device and dtype, so the lists never grow) in the
// lists every step fills (`adam`: Adam's too).
Bucket& BucketFor(std::vector<Bucket>& buckets, const at::Tensor& param, size_t group_size, bool adam) {
  for (Bucket& bucket : buckets) {
    if (bucket.device == param.device() && bucket.dtype == param.scalar_type()) return bucket;
  }
  Bucket& bucket = buckets.emplace_back(Bucket{param.device(), param.scalar_type()});
  bucket.params.reserve(group_size);
  bucket.grads.reserve(group_size);
  if (adam) {
    for (std::vector<at::Tensor>* list : {&bucket.exp_avgs, &bucket.exp_avg_sqs, &bucket.steps}) {
      list->reserve(group_size);
    }
  }
  return bucket;
}

// Whether the kernels run on the device of every parameter of `optimizer`; with `log`, says so when they do not (the
// first step asks with it, once).
bool KernelsRunOn(const torch::optim::Optimizer& optimizer, const char* name, bool log = true) {
  for (const auto& group : optimizer.param_groups()) {
    for (const at::Tensor& param : group.params()) {
      if (!compat::FusedOptimizerRunsOn(param.device())) {
        LOG_IF(WARNING, log) << name << ": LibTorch's fused kernels do not run on " << param.device()
                             << "; stepping with torch::optim instead";
        return false;
      }
    }
  }
  return true;
}

// found_inf on `device`, or undefined.
at::Tensor FlagOn(const at::Tensor& found_inf, const c10::Device& device) {
  if (!found_inf.defined() || found_inf.device() == device) return found_inf;
  return found_inf.to(device, /*non_blocking=*/true);
}

// One Adam or AdamW step over every group; State and Options are LibTorch's Adam or AdamW types, which hold the same
// fields.
template <typename State, typename Options>
void FusedAdamSteps(torch::optim::Optimizer& optimizer, DeviceStepCounts& counts, const at::Tensor& found_inf,
                    bool decoupled_weight_decay) {
  for (auto& group : optimizer.param_groups()) {
    const auto& options = static_cast<const Options&>(group.options());
    std::vector<Bucket> buckets;
    for (const at::Tensor& param : group.params()) {
      if (!param.grad().defined()) continue;
      TORCH_CHECK(!param.grad().is_sparse(), "Adam does not support sparse gradients");
      auto* state = const_cast<State*>(static_cast<const State*>(compat::StateOf(optimizer, param)));
      if (state == nullptr) {
        auto fresh = std::make_unique<State>();
        fresh->step(0);
        fresh->exp_avg(at::zeros_like(param, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(at::zeros_like(param, at::MemoryFormat::Preserve));
        if (options.amsgrad()) fresh->max_exp_avg_sq(at::zeros_like(param, at::MemoryFormat::Preserve));
        state = fresh.get();
        compat::SetStateOf(optimizer, param, std::move(fresh));
      }
      at::Tensor& count = counts.For(param, state->exp_avg(), state->step());
      state->step(state->step() + 1);
      Bucket& bucket = BucketFor(buckets, param, group.params().size(), /*adam=*/true);
      bucket.params.push_back(param);
      bucket.grads.push_back(param.grad());
      bucket.exp_avgs.push_back(state->exp_avg());
      bucket.exp_avg_sqs.push_back(state->exp_avg_sq());
      if (options.amsgrad()) bucket.max_exp_avg_sqs.push_back(state->max_exp_avg_sq());
      bucket.steps.push_back(count);
    }
    compat::FusedAdamArgs args{.lr = options.lr(),
                               .beta1 = std::get<0>(options.betas()),
                               .beta2 = std::get<1>(options.betas()),
                               .weight_decay = options.weight_decay(),
                               .eps = options.eps(),
                               .amsgrad = options.amsgrad(),
                               .decoupled_weight_decay = decoupled_weight_decay};
    for (Bucket& bucket : buckets) {
      const at::Tensor flag = FlagOn(found_inf, bucket.device);
      torch::NoGradGuard no_grad;
      compat::FusedAdamStep(bucket.params, bucket.grads, bucket.exp_avgs, bucket.exp_avg_sqs, bucket.max_exp_avg_sqs,
                            bucket.steps, args, flag);
    }
  }
}

template <typename State>
void SyncAdamSteps(torch::optim::Optimizer& optimizer, DeviceStepCounts& counts) {
  counts.SyncToHost([&](const at::Tensor& param, int64_t step) {
    auto* state = const_cast<State*>(static_cast<const State*>(compat::StateOf(optimizer, param)));
    if (state != nullptr) state->step(step);
  });
}

}  // namespace

at::Tensor& DeviceStepCounts::For(const at::Tensor& param, const at::Tensor& state, int64_t host_step) {
  Entry& entry = entries_[param.unsafeGetTensorImpl()];
  if (!entry.count.defined() || entry.host_step != host_step || !entry.param.is_same(param) ||
      !entry.state.is_same(state) || entry.count.device() != param.device()) {
    entry.param = param;
    entry.state = state;
    entry.count = at::full({}, static_cast<double>(host_step), param.options().dtype(at::kFloat));
  }
  entry.host_step = host_step + 1;
  return entry.count;
}

template <typename SetStep>
void DeviceStepCounts::SyncToHost(SetStep set) {
  for (auto& [key, entry] : entries_) {
    const auto step = static_cast<int64_t>(entry.count.template item<double>());
    set(entry.param, step);
    entry.host_step = step;
  }
}

bool FusedOptimizersAvailable() { return true; }

// ---- Adam and AdamW

template <typename Base, typename Options, typename State, bool kDecoupledWeightDecay>
at::Tensor FusedAdamOptimizer<Base, Options, State, kDecoupledWeightDecay>::step(
    torch::optim::Optimizer::LossClosure closure) {
  if (!fused_.has_value()) fused_ = KernelsRunOn(*this, kName);
  if (!*fused_) return Base::step(std::move(closure));
  at::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  FusedAdamSteps<State, Options>(*this, counts_, found_inf_, kDecoupledWeightDecay);
  return loss;
}

template <typename Base, typename Options, typename State, bool kDecoupledWeightDecay>
bool FusedAdamOptimizer<Base, Options, State, kDecoupledWeightDecay>::can_skip_on_device() const {
  return fused_.has_value() ? *fused_ : KernelsRunOn(*this, kName, /*log=*/false);
}

template <typename Base, typename Options, typename State, bool kDecoupledWeightDecay>
void FusedAdamOptimizer<Base, Options, State, kDecoupledWeightDecay>::set_found_inf(at::Tensor found_inf) {
  flag_seen_ = flag_seen_ || found_inf.defined();
  found_inf_ = std::move(found_inf);
}

template <typename Base, typename Options, typename State, bool kDecoupledWeightDecay>
void FusedAdamOptimizer<Base, Options, State, kDecoupledWeightDecay>::SyncStateToHost() {
  if (flag_seen_) SyncAdamSteps<State>(*this, counts_);
}

template class FusedAdamOptimizer<torch::optim::Adam, torch::optim::AdamOptions, torch::optim::AdamParamState, false>;
template class FusedAdamOptimizer<torch::optim::AdamW, torch::optim::AdamWOptions, torch::optim::AdamWParamState, true>;

// ---- SGD

FusedSGD::FusedSGD(std::vector<at::Tensor> params, torch::optim::SGDOptions defaults)
    : torch::optim::SGD(std::move(params), std::move(defaults)) {}

at::Tensor FusedSGD::step(LossClosure closure) {
  if (!fused_.has_value()) fused_ = KernelsRunOn(*this, "SGD");
  if (!*fused_) return torch::optim::SGD::step(std::move(closure));
  at::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups()) {
    const auto& options = static_cast<const torch::optim::SGDOptions&>(group.options());
    const bool momentum = options.momentum() != 0;
    // Buffers made now start at zero and take the gradient as it is (exactly torch::optim's clone when dampening
    // is 0); with dampening, the first step's buffers take the gradient undamped, as torch::optim's do.
    const bool zero_start = options.dampening() == 0;
    std::vector<Bucket> buckets, first_buckets;
    for (const at::Tensor& param : group.params()) {
      if (!param.grad().defined()) continue;
      at::Tensor buffer;
      bool first = false;
      if (momentum) {
        auto* state = const_cast<torch::optim::SGDParamState*>(
            static_cast<const torch::optim::SGDParamState*>(compat::StateOf(*this, param)));
        if (state == nullptr) {
          auto fresh = std::make_unique<torch::optim::SGDParamState>();
          fresh->momentum_buffer(zero_start ? at::zeros_like(param, at::MemoryFormat::Preserve)
                                            : at::empty_like(param, at::MemoryFormat::Preserve));
          first = !zero_start;
          state = fresh.get();
          compat::SetStateOf(*this, param, std::move(fresh));
        }
        buffer = state->momentum_buffer();
      }
      Bucket& bucket = BucketFor(first ? first_buckets : buckets, param, group.params().size(), /*adam=*/false);
      bucket.params.push_back(param);
      bucket.grads.push_back(param.grad());
      if (momentum) bucket.momentum_buffers.push_back(buffer);
    }
    compat::FusedSgdArgs args{.lr = options.lr(),
                              .momentum = options.momentum(),
                              .dampening = options.dampening(),
                              .weight_decay = options.weight_decay(),
                              .nesterov = options.nesterov()};
    torch::NoGradGuard no_grad;
    for (Bucket& bucket : buckets) {
      compat::FusedSgdStep(bucket.params, bucket.grads, bucket.momentum_buffers, args,
                           FlagOn(found_inf_, bucket.device));
    }
    args.is_first_step = true;
    for (Bucket& bucket : first_buckets) {
      compat::FusedSgdStep(bucket.params, bucket.grads, bucket.momentum_buffers, args,
                           FlagOn(found_inf_, bucket.device));
    }
  }
  return loss;
}

bool FusedSGD::can_skip_on_device() const {
  for (const auto& group : param_groups()) {
    const auto& options = static_cast<const torch::optim::SGDOptions&>(group.options());
    if (options.momentum() != 0 && options.dampening() != 0) return false;
  }
  return fused_.has_value() ? *fused_ : KernelsRunOn(*this, "SGD", /*log=*/false);
}

void FusedSGD::set_found_inf(at::Tensor found_inf) { found_inf_ = std::move(found_inf); }

// ---- By name

std::shared_ptr<torch::optim::Optimizer> MakeOptimizer(const OptimizerSettings& settings,
                                                       std::vector<at::Tensor> params, bool fused) {
  const std::string& name = settings.name;
  if (name == "sgd") {
    torch::optim::SGDOptions options(settings.learning_rate);
    options.momentum(settings.momentum.value_or(0.9));
    if (settings.weight_decay.has_value()) options.weight_decay(*settings.weight_decay);
    if (fused) return std::make_shared<FusedSGD>(std::move(params), options);
    return std::make_shared<torch::optim::SGD>(std::move(params), options);
  }
  if (name == "adamw") {
    torch::optim::AdamWOptions options(settings.learning_rate);
    if (settings.weight_decay.has_value()) options.weight_decay(*settings.weight_decay);
    if (fused) return std::make_shared<FusedAdamW>(std::move(params), options);
    return std::make_shared<torch::optim::AdamW>(std::move(params), options);
  }
  TORCH_CHECK(name == "adam", "unknown optimizer '", name, "': pass adam, adamw or sgd");
  torch::optim::AdamOptions options(settings.learning_rate);
  if (settings.weight_decay.has_value()) options.weight_decay(*settings.weight_decay);
  if (fused) return std::make_shared<FusedAdam>(std::move(params), options);
  return std::make_shared<torch::optim::Adam>(std::move(params), options);
}

std::shared_ptr<torch::optim::Optimizer> MakeOptimizer(const std::string& name, std::vector<at::Tensor> params,
                                                       double learning_rate, bool fused) {
  return MakeOptimizer(OptimizerSettings{.name = name, .learning_rate = learning_rate}, std::move(params), fused);
}

}  // namespace kiln
