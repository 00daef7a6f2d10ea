#include "trainer/callbacks/weight_averaging.h"

#include <stdexcept>
#include <utility>

#include "ATen/ATen.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "c10/core/Device.h"
#include "torch/csrc/autograd/grad_mode.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

// PyTorch's get_swa_avg_fn, with n_averaged a tensor as AveragedModel passes it.
at::Tensor EqualAverage(const at::Tensor& averaged, const at::Tensor& current, const at::Tensor& n_averaged) {
  return averaged + (current - averaged) / (n_averaged + 1);
}

absl::StatusOr<int64_t> IntField(const CallbackState& state, const std::string& key) {
  auto found = state.find(key);
  int64_t value = 0;
  if (found == state.end() || !absl::SimpleAtoi(found->second, &value)) {
    return absl::InvalidArgumentError(absl::StrCat("'", key, "' is missing or not an integer"));
  }
  return value;
}

void RefuseSharded(const Trainer& trainer, const std::string& callback) {
  if (trainer.plan().has_value() && absl::StrContains(trainer.plan()->strategy, "fsdp")) {
    throw std::invalid_argument(absl::StrCat(
        callback, " does not support sharded models (strategy '", trainer.plan()->strategy,
        "'): it keeps a whole copy of the weights; use strategy 'ddp' or one device, or remove the callback"));
  }
}

}  // namespace

AveragingFunction EmaAveragingFunction(double decay) {
  return [decay](const at::Tensor& averaged, const at::Tensor& current, const at::Tensor&) {
    return decay * averaged + (1 - decay) * current;
  };
}

WeightAveraging::WeightAveraging(WeightAveragingOptions options) : options_(std::move(options)) {}

bool WeightAveraging::should_update(std::optional<int64_t> step_idx, std::optional<int64_t> epoch_idx) const {
  (void)epoch_idx;
  return step_idx.has_value();
}

absl::Status WeightAveraging::validate_config(const Trainer& trainer) const {
  (void)trainer;
  if (options_.device.has_value()) {
    try {
      c10::Device device(*options_.device);
      (void)device;
    } catch (const c10::Error&) {
      return absl::InvalidArgumentError(absl::StrCat(state_key(), "(device='", *options_.device,
                                                     "'): not a device; give one such as 'cpu' or 'cuda:0', or "
                                                     "leave it unset for the module's device"));
    }
  }
  return absl::OkStatus();
}

void WeightAveraging::setup(Trainer& trainer, LightningModule& module, Stage stage) {
  (void)module;
  if (stage != Stage::kFit) return;
  RefuseSharded(trainer, state_key());
  // A fresh fit starts a fresh average; a resumed one gets the checkpoint's (load_*_state_dict, after setup).
  averaged_.clear();
  names_.clear();
  n_averaged_ = at::Tensor();
  latest_update_step_ = 0;
  latest_update_epoch_ = -1;
  restored_.reset();
}

void WeightAveraging::on_fit_start(Trainer& trainer, LightningModule& module) {
  (void)trainer;
  torch::NoGradGuard no_grad;
  names_.clear();
  averaged_.clear();
  for (const auto& item : module.named_parameters()) {
    names_.push_back(item.key());
    averaged_.push_back(item.value());
  }
  num_parameters_ = averaged_.size();
  for (const auto& item : module.named_buffers()) {
    names_.push_back(item.key());
    averaged_.push_back(item.value());
  }
  const c10::Device device =
      options_.device.has_value() ? c10::Device(*options_.device)
                                  : (averaged_.empty() ? c10::Device(c10::kCPU) : averaged_[0].device());
  for (at::Tensor& tensor : averaged_) tensor = tensor.detach().to(device, /*non_blocking=*/false, /*copy=*/true);
  n_averaged_ = at::zeros({}, at::TensorOptions().dtype(at::kLong).device(device));
  if (!restored_.has_value()) return;
  const CallbackValues values = *std::move(restored_);
  restored_.reset();
  const at::IValue& n = values.at("n_averaged");
  n_averaged_.fill_(n.isTensor() ? n.toTensor().item<int64_t>() : n.toInt());
  const c10::impl::GenericDict saved = values.at("average_model_state").toGenericDict();
  for (size_t i = 0; i < averaged_.size(); ++i) {
    auto found = saved.find(c10::IValue(names_[i]));
    if (found == saved.end() || !found->value().isTensor() ||
        found->value().toTensor().sizes() != averaged_[i].sizes()) {
      throw std::invalid_argument(absl::StrCat(state_key(), ": the checkpoint's average_model_state has no tensor '",
                                               names_[i], "' of shape ", c10::str(averaged_[i].sizes()),
                                               "; resume with the model the checkpoint was written for"));
    }
    averaged_[i].copy_(found->value().toTensor());
  }
}

void WeightAveraging::Update(LightningModule& module) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> current;
  for (const auto& parameter : module.parameters()) current.push_back(parameter.detach());
  for (const auto& buffer : module.buffers()) current.push_back(buffer.detach());
  TORCH_CHECK(current.size() == averaged_.size(), state_key(), ": the module has ", current.size(),
              " parameters and buffers, its averaged copy ", averaged_.size());
  const bool copy = n_averaged_.item<int64_t>() == 0;
  const size_t averaged_count = options_.use_buffers ? averaged_.size() : num_parameters_;
  for (size_t i = 0; i < averaged_.size(); ++i) {
    const at::Tensor model = current[i].to(averaged_[i].device());
    if (copy || i >= averaged_count) {
      averaged_[i].copy_(model);
    } else {
      const AveragingFunction& average = options_.avg_fn ? options_.avg_fn : EqualAverage;
      averaged_[i].copy_(average(averaged_[i], model, n_averaged_));
    }
  }
  n_averaged_ += 1;
}

void WeightAveraging::Swap(LightningModule& module) {
  if (averaged_.empty()) return;
  torch::NoGradGuard no_grad;
  size_t i = 0;
  const auto swap = [&](const at::Tensor& current) {
    at::Tensor held = averaged_[i].clone();
    averaged_[i].copy_(current);
    current.detach().copy_(held);
    ++i;
  };
  for (const auto& parameter : module.parameters()) swap(parameter);
  for (const auto& buffer : module.buffers()) swap(buffer);
}

void WeightAveraging::on_train_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs,
                                         const Batch& batch, int64_t batch_idx) {
  (void)outputs;
  (void)batch;
  (void)batch_idx;
  const int64_t step = trainer.global_step();
  if (step > latest_update_step_ && should_update(step - 1, std::nullopt)) {
    Update(module);
    latest_update_step_ = step;
  }
}

void WeightAveraging::on_train_epoch_end(Trainer& trainer, LightningModule& module) {
  const int64_t epoch = trainer.current_epoch();
  if (epoch > latest_update_epoch_ && should_update(std::nullopt, epoch)) {
    Update(module);
    latest_update_epoch_ = epoch;
  }
}

void WeightAveraging::on_train_end(Trainer& trainer, LightningModule& module) {
  (void)trainer;
  if (averaged_.empty()) return;
  torch::NoGradGuard no_grad;
  size_t i = 0;
  for (const auto& parameter : module.parameters()) parameter.detach().copy_(averaged_[i++]);
  for (const auto& buffer : module.buffers()) buffer.detach().copy_(averaged_[i++]);
}

void WeightAveraging::on_validation_epoch_start(Trainer& trainer, LightningModule& module) {
  (void)trainer;
  Swap(module);
}

void WeightAveraging::on_validation_epoch_end(Trainer& trainer, LightningModule& module) {
  (void)trainer;
  Swap(module);
}

int64_t WeightAveraging::n_averaged() const { return n_averaged_.defined() ? n_averaged_.item<int64_t>() : 0; }

// The counters are integers in the file, as Lightning's are (value_state_dict); the checkpoint gives them here as
// text too.
absl::Status WeightAveraging::load_state_dict(const CallbackState& state) {
  absl::StatusOr<int64_t> step = IntField(state, "latest_update_step");
  if (!step.ok()) return step.status();
  latest_update_step_ = *step;
  // Lightning's own checkpoints have no latest_update_epoch: as Lightning, start from -1 then.
  absl::StatusOr<int64_t> epoch = IntField(state, "latest_update_epoch");
  latest_update_epoch_ = epoch.ok() ? *epoch : -1;
  return absl::OkStatus();
}

CallbackValues WeightAveraging::value_state_dict() const {
  CallbackValues values = {{"latest_update_step", latest_update_step_}, {"latest_update_epoch", latest_update_epoch_}};
  if (averaged_.empty()) return values;
  c10::impl::GenericDict average(c10::StringType::get(), c10::TensorType::get());
  for (size_t i = 0; i < averaged_.size(); ++i) average.insert(names_[i], averaged_[i]);
  values.emplace("n_averaged", n_averaged());
  values.emplace("average_model_state", average);
  return values;
}

absl::Status WeightAveraging::load_value_state_dict(const CallbackValues& state) {
  auto n = state.find("n_averaged");
  auto average = state.find("average_model_state");
  if (n == state.end() && average == state.end()) return absl::OkStatus();  // Saved before fit started.
  if (n == state.end() || !(n->second.isInt() || n->second.isTensor()) || average == state.end() ||
      !average->second.isGenericDict()) {
    return absl::InvalidArgumentError(
        "expected 'n_averaged' (an integer) and 'average_model_state' (a dictionary of tensors)");
  }
  restored_ = state;
  return absl::OkStatus();
}

EMAWeightAveraging::EMAWeightAveraging(EMAWeightAveragingOptions options)
    : WeightAveraging(WeightAveragingOptions{.device = options.device,
                                             .use_buffers = options.use_buffers,
                                             .avg_fn = EmaAveragingFunction(options.decay)}),
      ema_options_(std::move(options)) {}

bool EMAWeightAveraging::should_update(std::optional<int64_t> step_idx, std::optional<int64_t> epoch_idx) const {
  if (step_idx.has_value()) {
    const bool started =
        !ema_options_.update_starting_at_step.has_value() || *step_idx >= *ema_options_.update_starting_at_step;
    const bool on_frequency =
        ema_options_.update_every_n_steps > 0 && *step_idx % ema_options_.update_every_n_steps == 0;
    if (started && on_frequency) return true;
  }
  return epoch_idx.has_value() && ema_options_.update_starting_at_epoch.has_value() &&
         *epoch_idx >= *ema_options_.update_starting_at_epoch;
}

absl::Status EMAWeightAveraging::validate_config(const Trainer& trainer) const {
  if (!(ema_options_.decay >= 0 && ema_options_.decay <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("EMAWeightAveraging(decay=", ema_options_.decay,
                                                   "): decay must be in [0, 1]; Lightning's default is 0.999"));
  }
  return WeightAveraging::validate_config(trainer);
}

}  // namespace kiln
