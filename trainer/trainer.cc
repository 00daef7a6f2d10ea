#include "trainer/trainer.h"

#include <cmath>
#include <exception>
#include <utility>

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"
#include "connector/connector.h"
#include "glog/logging.h"
#include "torch/utils.h"
#include "trainer/progress.h"
#include "trainer/strategy.h"

namespace kiln {
namespace {

constexpr int64_t kDefaultMaxEpochs = 1000;  // Lightning's, when neither max_epochs nor max_steps is set.

// Runs user code, turning an exception into a Status that names the hook.
template <typename Fn>
absl::Status CallUser(absl::string_view hook, Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(hook, " raised: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(hook, " raised: ", e.what()));
  }
}

void Merge(MetricMap& into, const MetricMap& from) {
  for (const auto& [name, value] : from) into[name] = value;
}

// Makes sure Teardown runs however the loop ends.
class TeardownGuard {
 public:
  explicit TeardownGuard(Strategy& strategy) : strategy_(strategy) {}
  ~TeardownGuard() {
    if (absl::Status status = strategy_.Teardown(); !status.ok()) {
      LOG(WARNING) << "tearing down the device failed: " << status;
    }
  }

 private:
  Strategy& strategy_;
};

}  // namespace

absl::StatusOr<int64_t> BatchLimit::Resolve(int64_t available, absl::string_view flag) const {
  if (const auto* count = std::get_if<int64_t>(&value_)) {
    if (*count < 0) {
      return absl::InvalidArgumentError(absl::StrCat(flag, "=", *count, " must be >= 0 (a number of batches) or a "
                                                     "fraction in [0.0, 1.0]"));
    }
    return std::min(*count, available);
  }
  const double fraction = std::get<double>(value_);
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, "=", fraction, " must be a fraction in [0.0, 1.0] or an "
                                                   "int number of batches"));
  }
  return static_cast<int64_t>(std::floor(fraction * static_cast<double>(available)));
}

Trainer::Trainer(TrainerOptions options) : options_(std::move(options)) {}

Trainer::~Trainer() = default;

absl::Status Trainer::Prepare() {
  if (options_.max_steps < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_steps=", options_.max_steps, " must be -1 (no limit) or a number of steps >= 0"));
  }
  if (options_.max_epochs.has_value() && *options_.max_epochs < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_epochs=", *options_.max_epochs, " must be -1 (no limit) or a number of epochs >= 0"));
  }
  if (options_.check_val_every_n_epoch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("check_val_every_n_epoch=", options_.check_val_every_n_epoch,
                                                   " must be an int >= 1"));
  }
  ConnectorOptions connector;
  connector.accelerator = options_.accelerator;
  connector.devices = options_.devices;
  connector.strategy = options_.strategy;
  connector.precision = options_.precision;
  connector.num_nodes = options_.num_nodes;
  absl::StatusOr<Plan> plan =
      ResolvePlan(connector, options_.registry != nullptr ? *options_.registry : AcceleratorRegistry::Default());
  if (!plan.ok()) return plan.status();
  for (const std::string& warning : plan->warnings) LOG(WARNING) << warning;
  if (plan->strategy != "single_device") {
    return absl::UnimplementedError(absl::StrCat(
        "strategy '", plan->strategy, "' (", plan->world_size, " processes) is not available in this build of Kiln "
        "yet; run with devices=1 and num_nodes=1"));
  }
  if (plan->precision != Precision::k32True) {
    return absl::UnimplementedError(absl::StrCat("precision '", PrecisionName(plan->precision),
                                                 "' is not available in this build of Kiln yet; use 32-true"));
  }
  plan_ = std::move(plan).value();
  strategy_ = std::make_unique<SingleDeviceStrategy>(*plan_);
  progress_ = std::make_unique<ProgressReporter>(options_.enable_progress_bar, options_.log_every_n_steps);
  if (options_.seed.has_value()) torch::manual_seed(*options_.seed);
  return absl::OkStatus();
}

absl::Status Trainer::fit(LightningModule& model, DataModule& data) {
  if (absl::Status status = Prepare(); !status.ok()) return status;
  if (absl::Status status = strategy_->Setup(model); !status.ok()) return status;
  TeardownGuard teardown(*strategy_);
  return RunFit(model, data);
}

absl::Status Trainer::RunFit(LightningModule& model, DataModule& data) {
  std::shared_ptr<DataLoader> train_loader;
  std::shared_ptr<DataLoader> val_loader;
  OptimizerConfig optimizers;
  absl::Status status = CallUser("setup/configure_optimizers", [&] {
    data.setup(Stage::kFit);
    train_loader = data.train_dataloader();
    val_loader = data.val_dataloader();
    optimizers = model.configure_optimizers();
  });
  if (!status.ok()) return status;
  if (train_loader == nullptr) {
    return absl::InvalidArgumentError("the data module returned no train_dataloader; fit needs training data");
  }
  if (optimizers.optimizers.empty()) {
    return absl::InvalidArgumentError("configure_optimizers returned no optimizer; return at least one");
  }
  absl::StatusOr<int64_t> train_batches =
      options_.limit_train_batches.Resolve(train_loader->num_batches(), "limit_train_batches");
  if (!train_batches.ok()) return train_batches.status();
  int64_t val_batches = 0;
  if (val_loader != nullptr) {
    absl::StatusOr<int64_t> limit = options_.limit_val_batches.Resolve(val_loader->num_batches(), "limit_val_batches");
    if (!limit.ok()) return limit.status();
    val_batches = *limit;
  }

  int64_t max_epochs = options_.max_epochs.value_or(-1);
  if (!options_.max_epochs.has_value() && options_.max_steps == -1) {
    LOG(WARNING) << "`max_epochs` was not set. Setting it to " << kDefaultMaxEpochs
                 << " epochs. To train without an epoch limit, set `max_epochs=-1`.";
    max_epochs = kDefaultMaxEpochs;
  }

  MetricCollector train_metrics(/*training=*/true);
  current_epoch_ = 0;
  global_step_ = 0;
  callback_metrics_.clear();
  status = CallUser("on_fit_start", [&] { model.on_fit_start(); });
  if (!status.ok()) return status;

  const auto done = [&] {
    return (options_.max_steps >= 0 && global_step_ >= options_.max_steps) ||
           (max_epochs >= 0 && current_epoch_ >= max_epochs);
  };
  while (!done()) {
    model.train();
    train_metrics.ResetEpoch();
    progress_->StartEpoch(current_epoch_, max_epochs, *train_batches);
    status = CallUser("training epoch", [&] {
      model.on_train_epoch_start();
      train_loader->set_epoch(current_epoch_);
      for (int64_t batch_idx = 0; batch_idx < *train_batches; ++batch_idx) {
        Batch batch = strategy_->BatchToDevice(train_loader->get_batch(batch_idx));
        model.set_metric_sink(&train_metrics, batch.size());
        for (const auto& optimizer : optimizers.optimizers) optimizer->zero_grad();
        at::Tensor loss = model.training_step(batch, batch_idx);
        TORCH_CHECK(loss.defined() && loss.numel() == 1, "training_step must return a scalar loss tensor");
        strategy_->Backward(loss);
        for (const auto& optimizer : optimizers.optimizers) strategy_->OptimizerStep(*optimizer);
        ++global_step_;
        const bool log_now = options_.log_every_n_steps > 0 && global_step_ % options_.log_every_n_steps == 0;
        if (log_now || batch_idx + 1 == *train_batches) Merge(callback_metrics_, train_metrics.TakeStepMetrics());
        progress_->Step(batch_idx, global_step_, train_metrics.ProgressBarMetrics());
        if (options_.max_steps >= 0 && global_step_ >= options_.max_steps) break;
      }
      model.set_metric_sink(nullptr, 0);
    });
    if (!status.ok()) return status;
    Merge(callback_metrics_, train_metrics.EpochMetrics());

    const bool validate_now = val_loader != nullptr && val_batches > 0 &&
                              (current_epoch_ + 1) % options_.check_val_every_n_epoch == 0;
    if (validate_now) {
      absl::StatusOr<MetricMap> val_metrics = RunValidation(model, *val_loader, val_batches);
      if (!val_metrics.ok()) return val_metrics.status();
      Merge(callback_metrics_, *val_metrics);
    }
    status = CallUser("on_train_epoch_end", [&] {
      model.set_metric_sink(&train_metrics, 1);
      model.on_train_epoch_end();
      model.set_metric_sink(nullptr, 0);
    });
    if (!status.ok()) return status;
    progress_->EndEpoch(current_epoch_, callback_metrics_);
    ++current_epoch_;
  }
  return CallUser("on_fit_end", [&] { model.on_fit_end(); });
}

absl::StatusOr<MetricMap> Trainer::RunValidation(LightningModule& model, DataLoader& loader, int64_t limit) {
  MetricCollector metrics(/*training=*/false);
  model.eval();
  absl::Status status = CallUser("validation loop", [&] {
    torch::NoGradGuard no_grad;
    loader.set_epoch(0);
    for (int64_t batch_idx = 0; batch_idx < limit; ++batch_idx) {
      Batch batch = strategy_->BatchToDevice(loader.get_batch(batch_idx));
      model.set_metric_sink(&metrics, batch.size());
      model.validation_step(batch, batch_idx);
    }
    model.set_metric_sink(&metrics, 1);
    model.on_validation_epoch_end();
    model.set_metric_sink(nullptr, 0);
  });
  model.train();
  if (!status.ok()) return status;
  MetricMap result = metrics.EpochMetrics();
  Merge(result, metrics.TakeStepMetrics());
  return result;
}

absl::StatusOr<MetricMap> Trainer::validate(LightningModule& model, DataModule& data) {
  if (absl::Status status = Prepare(); !status.ok()) return status;
  if (absl::Status status = strategy_->Setup(model); !status.ok()) return status;
  TeardownGuard teardown(*strategy_);
  std::shared_ptr<DataLoader> loader;
  absl::Status status = CallUser("setup", [&] {
    data.setup(Stage::kValidate);
    loader = data.val_dataloader();
  });
  if (!status.ok()) return status;
  if (loader == nullptr) return absl::InvalidArgumentError("validate needs a val_dataloader; the data module has none");
  absl::StatusOr<int64_t> limit = options_.limit_val_batches.Resolve(loader->num_batches(), "limit_val_batches");
  if (!limit.ok()) return limit.status();
  absl::StatusOr<MetricMap> metrics = RunValidation(model, *loader, *limit);
  if (metrics.ok()) Merge(callback_metrics_, *metrics);
  return metrics;
}

}  // namespace kiln
