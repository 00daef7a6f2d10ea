// What the loops of trainer/loops/ need of the Trainer beyond its public API, handed to them explicitly: the Trainer
// fills one LoopContext from its own members when it is made and passes it to every loop it makes. The loops own
// their progress (progress.h); the Trainer owns what is here. Hooks still receive the public `Trainer&`.
// Internal to //trainer: programs use kiln::Trainer. Not thread-safe, like the Trainer.
#ifndef KILN_TRAINER_LOOPS_LOOP_CONTEXT_H_
#define KILN_TRAINER_LOOPS_LOOP_CONTEXT_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/core/callback.h"
#include "trainer/core/data_loader.h"
#include "trainer/core/lightning_module.h"
#include "trainer/core/metrics.h"

namespace kiln {

class ProgressReporter;
class Trainer;

// Every member refers to the Trainer's own, which outlive the loops (the Trainer owns both).
struct LoopContext {
  Trainer& trainer;  // Handed to every hook; its public API (options, strategy, precision plugin, logging).
  // The running entry point's callbacks: the user's and those the Trainer added.
  const std::vector<std::shared_ptr<Callback>>& callbacks;
  OptimizerConfig& optimizers;  // configure_optimizers' result, for the running fit.
  // The module's parameters of each optimizer, as configured (before a strategy shards them).
  std::vector<std::vector<at::Tensor>>& optimizer_parameters;
  MetricMap& callback_metrics;
  // The running training epoch's metrics, which Trainer::callback_metrics() brings in when read (null outside one).
  MetricCollector*& live_step_metrics;
  std::unique_ptr<ProgressReporter>& progress;  // The running entry point's progress bar.
  std::string& resumed_from;                    // Trainer::resumed_from().
  // The Trainer's steps the loops take: Logger::setup (rank zero, unless fast_dev_run) and finalize; the restore of
  // a checkpoint ("last", "best" or a path; `data` gets its state back with `restore_training`); a "last" or "best"
  // checkpoint's path.
  std::function<absl::Status()> setup_loggers;
  std::function<absl::Status(bool succeeded)> finalize_loggers;
  std::function<absl::Status(LightningModule& model, const std::string& ckpt_path, bool restore_training,
                             DataModule* data)>
      restore_checkpoint;
  std::function<absl::StatusOr<std::string>(const std::string& ckpt_path)> resolve_checkpoint_path;

  // Calls `hook` on every callback (with `monitoring`, only those whose is_monitoring() says so), in order.
  template <typename Hook>
  void CallCallbacks(Hook&& hook, std::optional<bool> monitoring = std::nullopt) const {
    for (const auto& callback : callbacks) {
      if (monitoring.has_value() && callback->is_monitoring() != *monitoring) continue;
      hook(*callback);
    }
  }
  // The setup hooks of an entry point's stage, in Lightning's order: the data module's, the callbacks', the
  // module's; and the teardown hooks: the callbacks', the module's. Throw what the hooks throw.
  void CallSetupHooks(DataModule& data, LightningModule& model, Stage stage) const {
    data.setup(stage);
    CallCallbacks([&](Callback& c) { c.setup(trainer, model, stage); });
    model.setup(stage);
  }
  void CallTeardownHooks(LightningModule& model, Stage stage) const {
    CallCallbacks([&](Callback& c) { c.teardown(trainer, model, stage); });
    model.teardown(stage);
  }
};

}  // namespace kiln

#endif  // KILN_TRAINER_LOOPS_LOOP_CONTEXT_H_
