#include "trainer/core/lightning_module.h"

#include <string>
#include <unordered_set>
#include <utility>

#include "ATen/ATen.h"
#include "c10/util/Exception.h"
#include "torch/nn/utils/clip_grad.h"

namespace kiln {

namespace {

[[noreturn]] void BadBatchSize(std::string_view name, int64_t batch_size) {
  TORCH_CHECK_VALUE(false, "log('", name, "', batch_size=", batch_size,
                    "): batch_size is the examples the value stands for, at least 1; leave it unset for the batch's");
  __builtin_unreachable();
}

[[noreturn]] void NoSink(std::string_view name) {
  TORCH_CHECK(false, "You are trying to `log('", name,
              "')` outside a step or epoch hook; log from training_step, validation_step or test_step.");
  __builtin_unreachable();
}

// The examples a logged value stands for: the batch's, unless the call says (checked; the check out of line, so
// that this inlines into every log call).
inline int64_t BatchSize(std::string_view name, const LogOptions& options, int64_t batch_size) {
  if (C10_LIKELY(!options.batch_size.has_value())) return batch_size;
  if (*options.batch_size < 1) BadBatchSize(name, *options.batch_size);
  return *options.batch_size;
}

}  // namespace

void LightningModule::log(std::string_view name, const at::Tensor& value, LogOptions options) {
  if (C10_LIKELY(sink_ != nullptr) && sink_->TryLogStep(name, value, options)) return;
  if (C10_UNLIKELY(sink_ == nullptr)) NoSink(name);
  sink_->Log(name, value, options, BatchSize(name, options, batch_size_));
}

void LightningModule::log(std::string_view name, double value, LogOptions options) {
  if (C10_UNLIKELY(sink_ == nullptr)) NoSink(name);
  sink_->Log(name, value, options, BatchSize(name, options, batch_size_));
}

void LightningModule::log_dict(const std::map<std::string, at::Tensor>& metrics, const LogOptions& options) {
  for (const auto& [name, value] : metrics) log(name, value, options);
}

void LightningModule::log_dict(const std::map<std::string, double>& metrics, const LogOptions& options) {
  for (const auto& [name, value] : metrics) log(name, value, options);
}

void ClipGradNorm(const std::vector<at::Tensor>& parameters, double max_norm) {
  std::vector<at::Tensor> grads;
  std::vector<at::Tensor> norms;
  for (const at::Tensor& parameter : parameters) {
    if (!parameter.grad().defined()) continue;
    grads.push_back(parameter.grad());
    norms.push_back(parameter.grad().data().norm(2));
  }
  if (grads.empty()) return;
  const at::Tensor total_norm = norms.size() == 1 ? norms[0] : at::stack(norms).norm(2);
  const at::Tensor clip_coef = max_norm / (total_norm + 1e-6);
  const at::Tensor clip_coef_clamped = at::clamp(clip_coef, c10::nullopt, 1.0);
  for (const at::Tensor& grad : grads) grad.data().mul_(clip_coef_clamped);
}

void RunView::ClipGradientsNorm(const std::vector<at::Tensor>& parameters, double max_norm) const {
  ClipGradNorm(parameters, max_norm);
}

void LightningOptimizer::step() {
  TORCH_CHECK(driver_ != nullptr, "LightningOptimizer::step() outside training_step: step the optimizers that "
              "optimizers() returns from training_step, under manual optimization");
  driver_->Step(index_);
}

void ZeroGradToNone(torch::optim::Optimizer& optimizer) {
  for (auto& group : optimizer.param_groups()) {
    for (at::Tensor& param : group.params()) param.mutable_grad().reset();
  }
}

void LightningOptimizer::step(const std::function<void()>& closure) {
  closure();
  step();
}

void LightningOptimizer::zero_grad() { ZeroGradToNone(*optimizer_); }

std::vector<at::Tensor> LightningOptimizer::parameters() const {
  if (driver_ != nullptr) return driver_->optimizer_parameters(index_);
  std::vector<at::Tensor> parameters;
  for (const auto& group : optimizer_->param_groups()) {
    for (const at::Tensor& param : group.params()) parameters.push_back(param);
  }
  return parameters;
}

ToggledModel LightningOptimizer::toggle_model(bool sync_grad) const {
  TORCH_CHECK(driver_ != nullptr, "LightningOptimizer::toggle_model() outside training_step: toggle the optimizers "
              "that optimizers() returns, from training_step, under manual optimization");
  return ToggledModel(driver_->module(), *this, driver_, sync_grad);
}

ToggledModel::ToggledModel(LightningModule& module, const LightningOptimizer& optimizer,
                           ManualOptimizationDriver* driver, std::optional<bool> sync_grad)
    : module_(&module), optimizer_(&optimizer), driver_(sync_grad.has_value() ? driver : nullptr) {
  module.toggle_optimizer(optimizer);
  if (driver_ != nullptr) previous_sync_ = driver_->SetGradientSync(*sync_grad);
}

ToggledModel::ToggledModel(ToggledModel&& other) noexcept
    : module_(std::exchange(other.module_, nullptr)),
      optimizer_(other.optimizer_),
      driver_(std::exchange(other.driver_, nullptr)),
      previous_sync_(other.previous_sync_) {}

ToggledModel::~ToggledModel() {
  if (module_ == nullptr) return;  // Moved from.
  module_->untoggle_optimizer(*optimizer_);
  if (driver_ != nullptr) driver_->SetGradientSync(previous_sync_);
}

void LightningScheduler::step() {
  TORCH_CHECK(driver_ != nullptr, "lr_schedulers()[", index_, "].step() outside training_step");
  driver_->StepScheduler(index_, std::nullopt);
}

void LightningScheduler::step(double metric) {
  TORCH_CHECK(driver_ != nullptr, "lr_schedulers()[", index_, "].step(metric) outside training_step");
  driver_->StepScheduler(index_, metric);
}

void LightningModule::on_train_batch_end(const at::Tensor& outputs, const Batch& batch, int64_t batch_idx) {
  (void)outputs;
  (void)batch;
  (void)batch_idx;
  train_batch_end_is_default_ = true;
}

Batch LightningModule::transfer_batch_to_device(const Batch& batch, c10::Device device, int64_t dataloader_idx) {
  (void)dataloader_idx;
  if (view_ != nullptr) return view_->MoveBatch(batch, device);
  return kiln::MoveBatch(batch, device);
}

void LightningModule::configure_gradient_clipping(torch::optim::Optimizer& optimizer,
                                                  std::optional<double> gradient_clip_val,
                                                  std::optional<std::string> gradient_clip_algorithm) {
  clip_gradients(optimizer, gradient_clip_val, std::move(gradient_clip_algorithm));
}

void LightningModule::clip_gradients(torch::optim::Optimizer& optimizer, std::optional<double> gradient_clip_val,
                                     std::optional<std::string> gradient_clip_algorithm) {
  const std::string algorithm = gradient_clip_algorithm.value_or("norm");
  TORCH_CHECK_VALUE(algorithm == "norm" || algorithm == "value", "clip_gradients: gradient_clip_algorithm '",
                    algorithm, "' is not one of 'norm', 'value'");
  if (!gradient_clip_val.has_value() || *gradient_clip_val <= 0) return;
  std::vector<at::Tensor> parameters;
  for (const auto& group : optimizer.param_groups()) {
    for (const at::Tensor& param : group.params()) parameters.push_back(param);
  }
  if (driver_ != nullptr) {
    const std::vector<std::shared_ptr<torch::optim::Optimizer>> all = driver_->optimizers();
    for (size_t i = 0; i < all.size(); ++i) {
      if (all[i].get() == &optimizer) driver_->UnscaleGradients(i);
    }
  }
  if (algorithm == "norm") {
    if (view_ != nullptr) {
      view_->ClipGradientsNorm(parameters, *gradient_clip_val);
    } else {
      ClipGradNorm(parameters, *gradient_clip_val);
    }
  } else {
    torch::nn::utils::clip_grad_value_(parameters, *gradient_clip_val);
  }
}

ManualOptimizationDriver& LightningModule::Driver(const char* what) const {
  TORCH_CHECK(driver_ != nullptr, what, " is for manual optimization: call it from training_step, with "
              "set_automatic_optimization(false) in the module's constructor");
  return *driver_;
}

std::vector<LightningOptimizer> LightningModule::optimizers() const {
  ManualOptimizationDriver& driver = Driver("optimizers()");
  std::vector<LightningOptimizer> wrapped;
  const std::vector<std::shared_ptr<torch::optim::Optimizer>> all = driver.optimizers();
  for (size_t i = 0; i < all.size(); ++i) wrapped.emplace_back(all[i], i, driver_);
  return wrapped;
}

std::vector<LightningScheduler> LightningModule::lr_schedulers() const {
  ManualOptimizationDriver& driver = Driver("lr_schedulers()");
  std::vector<LightningScheduler> wrapped;
  for (size_t i = 0; i < driver.num_schedulers(); ++i) wrapped.emplace_back(i, driver_);
  return wrapped;
}

void LightningModule::manual_backward(const at::Tensor& loss) { Driver("manual_backward()").Backward(loss); }

void LightningModule::toggle_optimizer(const LightningOptimizer& optimizer) {
  // The module's parameters the optimizer was built with: under fsdp the optimizer itself steps shards.
  std::unordered_set<const c10::TensorImpl*> own;
  for (const at::Tensor& param : optimizer.parameters()) own.insert(param.unsafeGetTensorImpl());
  for (at::Tensor& param : parameters()) {
    if (own.count(param.unsafeGetTensorImpl()) != 0 || !param.requires_grad()) continue;
    toggled_.emplace_back(param, true);
    param.set_requires_grad(false);
  }
}

void LightningModule::untoggle_optimizer(const LightningOptimizer& optimizer) {
  (void)optimizer;
  for (auto& [param, required] : toggled_) param.set_requires_grad(required);
  toggled_.clear();
}

ToggledModel LightningModule::toggled_optimizer(const LightningOptimizer& optimizer) {
  return ToggledModel(*this, optimizer, nullptr, std::nullopt);
}

at::Tensor LightningModule::predict_forward(const at::Tensor& input) {
  TORCH_CHECK(false, "predict_step is not implemented: override predict_step (or predict_forward) in your module");
}

}  // namespace kiln
