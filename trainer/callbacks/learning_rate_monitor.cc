#include "trainer/callbacks/learning_rate_monitor.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "torch/optim/adagrad.h"
#include "torch/optim/adam.h"
#include "torch/optim/adamw.h"
#include "torch/optim/lbfgs.h"
#include "torch/optim/rmsprop.h"
#include "torch/optim/sgd.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

std::string OptimizerName(const torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer) != nullptr) return "AdamW";
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer) != nullptr) return "Adam";
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer) != nullptr) return "SGD";
  if (dynamic_cast<const torch::optim::Adagrad*>(&optimizer) != nullptr) return "Adagrad";
  if (dynamic_cast<const torch::optim::RMSprop*>(&optimizer) != nullptr) return "RMSprop";
  if (dynamic_cast<const torch::optim::LBFGS*>(&optimizer) != nullptr) return "LBFGS";
  return "Optimizer";
}

}  // namespace

LearningRateMonitor::LearningRateMonitor(std::optional<std::string> logging_interval)
    : logging_interval_(std::move(logging_interval)) {}

absl::Status LearningRateMonitor::validate_config(const Trainer& trainer) const {
  if (logging_interval_.has_value() && *logging_interval_ != "step" && *logging_interval_ != "epoch") {
    return absl::InvalidArgumentError(
        absl::StrCat("logging_interval should be `step` or `epoch` or `None`, got '", *logging_interval_, "'"));
  }
  if (trainer.loggers().empty()) {
    return absl::InvalidArgumentError(
        "Cannot use `LearningRateMonitor` callback with `Trainer` that has no logger; add a logger to the Trainer");
  }
  return absl::OkStatus();
}

MetricMap LearningRateMonitor::LearningRates(const Trainer& trainer) {
  MetricMap rates;
  std::map<std::string, int> seen;
  for (const auto& optimizer : trainer.optimizers()) {
    const std::string type = OptimizerName(*optimizer);
    const int count = seen[type]++;
    const std::string name = count == 0 ? absl::StrCat("lr-", type) : absl::StrCat("lr-", type, "-", count);
    const auto& groups = optimizer->param_groups();
    for (size_t group = 0; group < groups.size(); ++group) {
      rates[group == 0 ? name : absl::StrCat(name, "/pg", group)] = groups[group].options().get_lr();
    }
  }
  return rates;
}

void LearningRateMonitor::on_train_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch,
                                               int64_t batch_idx) {
  if (logging_interval_ == "epoch") return;
  const int64_t every = trainer.options().log_every_n_steps;
  if (every > 0 && trainer.global_step() % every == 0)
    trainer.log_metrics(LearningRates(trainer), trainer.logged_step());
}

void LearningRateMonitor::on_train_epoch_start(Trainer& trainer, LightningModule& module) {
  if (logging_interval_ == "epoch") trainer.log_metrics(LearningRates(trainer), trainer.logged_step());
}

}  // namespace kiln
