#include "trainer/callbacks/stochastic_weight_averaging.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "ATen/ATen.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "c10/core/Device.h"
#include "glog/logging.h"
#include "torch/csrc/autograd/grad_mode.h"
#include "torch/nn/modules/batchnorm.h"
#include "torch/optim/optimizer.h"
#include "torch/optim/schedulers/lr_scheduler.h"
#include "trainer/core/metrics.h"
#include "trainer/loops/evaluation_loop.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

at::Tensor EqualAverage(const at::Tensor& averaged, const at::Tensor& current, const at::Tensor& n_averaged) {
  return averaged + (current - averaged) / (n_averaged + 1);
}

// The module's scheduler while SWALR runs (Lightning removes it; Kiln keeps its slot so that checkpoints count its
// steps as before): it leaves the rates alone.
class IdleScheduler final : public torch::optim::LRScheduler {
 public:
  explicit IdleScheduler(torch::optim::Optimizer& optimizer) : LRScheduler(optimizer) {}

 private:
  std::vector<double> get_lrs() override { return get_current_lrs(); }
};

// The BatchNorm layers of `module`: their momentum (options().momentum(), restored after the pass) and themselves.
template <typename Fn>
void ForEachBatchNorm(LightningModule& module, Fn&& fn) {
  for (const auto& child : module.modules(/*include_self=*/false)) {
    if (auto* bn = dynamic_cast<torch::nn::BatchNorm1dImpl*>(child.get())) fn(bn->options, *bn);
    if (auto* bn = dynamic_cast<torch::nn::BatchNorm2dImpl*>(child.get())) fn(bn->options, *bn);
    if (auto* bn = dynamic_cast<torch::nn::BatchNorm3dImpl*>(child.get())) fn(bn->options, *bn);
  }
}

int64_t AsInt(const c10::IValue& value) {
  if (value.isTensor()) return value.toTensor().item<int64_t>();
  TORCH_CHECK(value.isInt(), "expected an integer, found ", value.tagKind());
  return value.toInt();
}

}  // namespace

StochasticWeightAveraging::StochasticWeightAveraging(StochasticWeightAveragingOptions options)
    : options_(std::move(options)) {}

absl::Status StochasticWeightAveraging::validate_config(const Trainer& trainer) const {
  (void)trainer;
  if (const auto* start = std::get_if<int64_t>(&options_.swa_epoch_start); start != nullptr && *start < 1) {
    return absl::InvalidArgumentError(absl::StrCat("swa_epoch_start should be a >0 integer or a float between 0 and "
                                                   "1; got ", *start));
  }
  if (const auto* start = std::get_if<double>(&options_.swa_epoch_start);
      start != nullptr && !(*start >= 0 && *start <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("swa_epoch_start should be a >0 integer or a float between 0 and "
                                                   "1; got ", *start));
  }
  bool lrs_ok = !options_.swa_lrs.empty();
  for (double lr : options_.swa_lrs) lrs_ok = lrs_ok && lr > 0;
  if (!lrs_ok) {
    return absl::InvalidArgumentError("The `swa_lrs` should a positive float, or a list of positive floats (got " +
                                      (options_.swa_lrs.empty() ? std::string("none")
                                                                : absl::StrCat(options_.swa_lrs.front(), "...")) +
                                      "); set swa_lrs, e.g. 0.01");
  }
  if (options_.annealing_strategy != "cos" && options_.annealing_strategy != "linear") {
    return absl::InvalidArgumentError(absl::StrCat("anneal_strategy must by one of 'cos' or 'linear', instead got ",
                                                   options_.annealing_strategy));
  }
  if (options_.annealing_epochs < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("anneal_epochs must be equal or greater than 0, got ", options_.annealing_epochs));
  }
  if (options_.device.has_value()) {
    try {
      c10::Device device(*options_.device);
      (void)device;
    } catch (const c10::Error&) {
      return absl::InvalidArgumentError(absl::StrCat("device is expected to be a torch.device or a str. Found ",
                                                     *options_.device, "; give one such as 'cpu' or 'cuda:0'"));
    }
  }
  return absl::OkStatus();
}

void StochasticWeightAveraging::setup(Trainer& trainer, LightningModule& module, Stage stage) {
  (void)module;
  if (stage != Stage::kFit) return;
  if (trainer.plan().has_value() && absl::StrContains(trainer.plan()->strategy, "fsdp")) {
    throw std::invalid_argument("SWA does not currently support sharded models (strategy '" +
                                trainer.plan()->strategy + "'); use strategy 'ddp' or one device");
  }
  initialized_ = false;
  average_.clear();
  names_.clear();
  n_averaged_ = at::Tensor();
  init_n_averaged_ = 0;
  latest_update_epoch_ = -1;
  step_count_ = 0;
  restored_step_count_.reset();
  restored_average_.reset();
}

int64_t StochasticWeightAveraging::swa_start() const { return std::max<int64_t>(swa_epoch_start_ - 1, 0); }

void StochasticWeightAveraging::on_fit_start(Trainer& trainer, LightningModule& module) {
  if (trainer.optimizers().size() != 1) throw std::invalid_argument("SWA currently works with 1 `optimizer`.");
  if (trainer.lr_scheduler_configs().size() > 1) {
    throw std::invalid_argument("SWA currently not supported for more than 1 `lr_scheduler`.");
  }
  max_epochs_ = trainer.max_epochs();
  if (const auto* fraction = std::get_if<double>(&options_.swa_epoch_start)) {
    if (max_epochs_ < 0) {
      throw std::invalid_argument(
          "SWA with `swa_epoch_start` as a float is not supported when `max_epochs=-1`. Please provide "
          "`swa_epoch_start` as an integer.");
    }
    swa_epoch_start_ = static_cast<int64_t>(static_cast<double>(max_epochs_) * *fraction);
  } else {
    swa_epoch_start_ = std::get<int64_t>(options_.swa_epoch_start);
  }
  has_batch_norm_ = false;
  ForEachBatchNorm(module, [&](auto&, auto&) { has_batch_norm_ = true; });

  // The copy Lightning makes of the module: parameters (to be averaged) and buffers (kept as they are now).
  torch::NoGradGuard no_grad;
  names_.clear();
  average_.clear();
  for (const auto& item : module.named_parameters()) {
    names_.push_back(item.key());
    average_.push_back(item.value());
  }
  num_parameters_ = average_.size();
  for (const auto& item : module.named_buffers()) {
    names_.push_back(item.key());
    average_.push_back(item.value());
  }
  const c10::Device module_device = average_.empty() ? c10::Device(c10::kCPU) : average_[0].device();
  const c10::Device device = options_.device.has_value() ? c10::Device(*options_.device) : module_device;
  for (at::Tensor& tensor : average_) tensor = tensor.detach().to(device, /*non_blocking=*/false, /*copy=*/true);
  if (restored_average_.has_value()) {
    for (size_t i = 0; i < average_.size(); ++i) {
      auto found = restored_average_->find(c10::IValue(names_[i]));
      if (found == restored_average_->end() || !found->value().isTensor() ||
          found->value().toTensor().sizes() != average_[i].sizes()) {
        throw std::invalid_argument(absl::StrCat(
            "StochasticWeightAveraging: the checkpoint's average_model_state has no tensor '", names_[i],
            "' of shape ", c10::str(average_[i].sizes()), "; resume with the model the checkpoint was written for"));
      }
      average_[i].copy_(found->value().toTensor());
    }
    restored_average_.reset();
  }
}

void StochasticWeightAveraging::on_train_epoch_start(Trainer& trainer, LightningModule& module) {
  const int64_t epoch = trainer.current_epoch();
  const bool in_swa = swa_start() <= epoch && (max_epochs_ < 0 || epoch <= swa_end());
  if (!initialized_ && in_swa) {
    initialized_ = true;
    torch::optim::Optimizer& optimizer = *trainer.optimizers()[0];
    const size_t groups = optimizer.param_groups().size();
    if (options_.swa_lrs.size() != 1 && options_.swa_lrs.size() != groups) {
      throw std::invalid_argument(absl::StrCat("swa_lrs has ", options_.swa_lrs.size(),
                                               " values for an optimizer with ", groups,
                                               " parameter groups; give one value, or one per group"));
    }
    // SWALR's first step (made with it) leaves the rates as they are; a restored one goes on from its count.
    step_count_ = restored_step_count_.value_or(1);
    restored_step_count_.reset();
    std::vector<SchedulerConfig>& schedulers = trainer.lr_scheduler_configs();
    if (!schedulers.empty()) {
      LOG(INFO) << "Swapping the module's scheduler for SWALR from epoch " << epoch;
      schedulers[0].scheduler = std::make_shared<IdleScheduler>(optimizer);
    }
    if (!n_averaged_.defined()) {
      const c10::Device device = module.parameters().empty() ? c10::Device(c10::kCPU) : module.parameters()[0].device();
      n_averaged_ = at::full({}, init_n_averaged_, at::TensorOptions().dtype(at::kLong).device(device));
    }
  }
  if (in_swa && epoch > latest_update_epoch_) {
    UpdateAverage(module);
    latest_update_epoch_ = epoch;
  }
}

void StochasticWeightAveraging::StepSchedule(Trainer& trainer) {
  // PyTorch's SWALR.get_lr after step() raised _step_count: the rate anneals from the one before annealing (found
  // from the current rate and the previous step's alpha) towards swa_lr.
  ++step_count_;
  int64_t step = step_count_ - 1;
  if (options_.annealing_epochs == 0) step = std::max<int64_t>(1, step);
  const double span = static_cast<double>(std::max<int64_t>(1, options_.annealing_epochs));
  const auto anneal = [&](double t) {
    return options_.annealing_strategy == "cos" ? (1 - std::cos(M_PI * t)) / 2 : t;
  };
  const double prev_alpha = anneal(std::max(0.0, std::min(1.0, static_cast<double>(step - 1) / span)));
  const double alpha = anneal(std::max(0.0, std::min(1.0, static_cast<double>(step) / span)));
  auto& groups = trainer.optimizers()[0]->param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    const double swa_lr = options_.swa_lrs.size() == 1 ? options_.swa_lrs[0] : options_.swa_lrs[i];
    const double lr = groups[i].options().get_lr();
    const double prev_lr = prev_alpha == 1 ? swa_lr : (lr - prev_alpha * swa_lr) / (1 - prev_alpha);
    groups[i].options().set_lr(swa_lr * alpha + prev_lr * (1 - alpha));
  }
}

void StochasticWeightAveraging::on_train_epoch_end(Trainer& trainer, LightningModule& module) {
  (void)module;
  // Lightning steps SWALR, the epoch's scheduler from swa_start on, as each epoch ends.
  if (initialized_) StepSchedule(trainer);
}

void StochasticWeightAveraging::UpdateAverage(LightningModule& module) {
  torch::NoGradGuard no_grad;
  const std::vector<at::Tensor> parameters = module.parameters();
  TORCH_CHECK(parameters.size() == num_parameters_, "StochasticWeightAveraging: the module has ", parameters.size(),
              " parameters, its averaged copy ", num_parameters_);
  const bool copy = n_averaged_.item<int64_t>() == 0;
  const AveragingFunction& average = options_.avg_fn ? options_.avg_fn : EqualAverage;
  for (size_t i = 0; i < num_parameters_; ++i) {
    const at::Tensor model = parameters[i].detach().to(average_[i].device());
    average_[i].copy_(copy ? model : average(average_[i], model, n_averaged_.to(average_[i].device())));
  }
  n_averaged_ += 1;
}

void StochasticWeightAveraging::TransferWeights(LightningModule& module) {
  torch::NoGradGuard no_grad;
  const std::vector<at::Tensor> parameters = module.parameters();
  for (size_t i = 0; i < num_parameters_ && i < parameters.size(); ++i) {
    parameters[i].detach().copy_(average_[i].to(parameters[i].device()));
  }
}

void StochasticWeightAveraging::RecomputeBatchNorm(Trainer& trainer, LightningModule& module) {
  DataLoader* loader = trainer.train_dataloader();
  if (loader == nullptr) return;
  std::vector<std::pair<std::optional<double>*, std::optional<double>>> momenta;
  {
    torch::NoGradGuard no_grad;
    ForEachBatchNorm(module, [&](auto& options, auto& bn) {
      if (bn.running_mean.defined()) bn.running_mean.zero_();
      if (bn.running_var.defined()) bn.running_var.fill_(1);
      if (bn.num_batches_tracked.defined()) bn.num_batches_tracked.zero_();
      momenta.emplace_back(&options.momentum(), options.momentum());
      options.momentum(std::nullopt);
    });
  }
  // Lightning's extra epoch: training_step on each training batch, in train mode, with nothing stepped; what the
  // step logs is dropped.
  const bool was_training = module.is_training();
  module.train();
  MetricCollector dropped(/*training=*/true);
  const int64_t batches = trainer.num_training_batches();
  loader->set_epoch(trainer.current_epoch());
  std::exception_ptr failure;
  try {
    for (int64_t i = 0; i < batches; ++i) {
      Batch batch = EvaluationLoop::TransferBatch(trainer, module, loader->get_batch(i), 0);
      module.set_metric_sink(&dropped, batch.input.defined() && batch.input.dim() > 0 ? batch.input.size(0) : 1);
      module.training_step(batch, i);
    }
  } catch (...) {
    failure = std::current_exception();
  }
  module.set_metric_sink(nullptr, 0);
  module.train(was_training);
  for (auto& [momentum, value] : momenta) *momentum = value;
  if (failure) std::rethrow_exception(failure);
}

void StochasticWeightAveraging::on_train_end(Trainer& trainer, LightningModule& module) {
  // The trainer's current_epoch is one past the last epoch run here, as Lightning's.
  const bool finished_swa = max_epochs_ >= 0 && trainer.current_epoch() - 1 == swa_end();
  if ((finished_swa || max_epochs_ < 0) && n_averaged_.defined()) {
    TransferWeights(module);
    if (finished_swa && has_batch_norm_) RecomputeBatchNorm(trainer, module);
  }
}

int64_t StochasticWeightAveraging::n_averaged() const {
  return n_averaged_.defined() ? n_averaged_.item<int64_t>() : init_n_averaged_;
}

std::vector<at::Tensor> StochasticWeightAveraging::averaged_parameters() const {
  return std::vector<at::Tensor>(average_.begin(), average_.begin() + std::min(num_parameters_, average_.size()));
}

CallbackValues StochasticWeightAveraging::value_state_dict() const {
  CallbackValues state{{"n_averaged", n_averaged()}, {"latest_update_epoch", latest_update_epoch_}};
  if (step_count_ > 0) {
    c10::impl::GenericDict scheduler(c10::StringType::get(), c10::AnyType::get());
    scheduler.insert("_step_count", step_count_);
    scheduler.insert("last_epoch", max_epochs_ + step_count_);  // Lightning makes SWALR with last_epoch=max_epochs.
    state.emplace("scheduler_state", scheduler);
  } else {
    state.emplace("scheduler_state", c10::IValue());
  }
  if (average_.empty()) {
    state.emplace("average_model_state", c10::IValue());
  } else {
    c10::impl::GenericDict average(c10::StringType::get(), c10::TensorType::get());
    for (size_t i = 0; i < average_.size(); ++i) average.insert(names_[i], average_[i]);
    state.emplace("average_model_state", average);
  }
  return state;
}

absl::Status StochasticWeightAveraging::load_value_state_dict(const CallbackValues& state) {
  try {
    init_n_averaged_ = AsInt(state.at("n_averaged"));
    latest_update_epoch_ = AsInt(state.at("latest_update_epoch"));
    const c10::IValue& scheduler = state.at("scheduler_state");
    if (scheduler.isGenericDict()) {
      restored_step_count_ = AsInt(scheduler.toGenericDict().at(c10::IValue("_step_count")));
    }
    const c10::IValue& average = state.at("average_model_state");
    if (average.isGenericDict()) restored_average_ = average.toGenericDict();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected n_averaged, latest_update_epoch, scheduler_state and average_model_state as Lightning's "
        "StochasticWeightAveraging writes them: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace kiln
