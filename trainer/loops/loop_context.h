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
#include "trainer/profilers/profiler.h"

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
  // The running entry point's profiler (TrainerOptions::profiler), null when none: the Trainer sets it when an entry
  // point starts and clears it when it ends. A value, not a reference to the Trainer's member, so that the test
  // below reads one pointer.
  Profiler* profiler = nullptr;

  // The one place the loops call hooks, so that the profiler times each, named as Lightning's profilers name them.
  // Without a profiler, each costs one test of a null pointer and nothing else: no name is built and nothing is
  // allocated (docs/performance.md, "The profiler's cost when off").
  //
  // Calls `hook` on every callback (with `monitoring`, only those whose is_monitoring() says so), in order:
  // "[Callback]<state_key>.<hook_name>".
  template <typename Hook>
  void CallCallbacks(const char* hook_name, Hook&& hook, std::optional<bool> monitoring = std::nullopt) const {
    for (const auto& callback : callbacks) {
      if (monitoring.has_value() && callback->is_monitoring() != *monitoring) continue;
      if (profiler == nullptr) {
        hook(*callback);
        continue;
      }
      const std::string action = CallbackAction(*callback, hook_name);
      ProfileAction timed(profiler, action);
      hook(*callback);
    }
  }
  // Calls the module's hook `hook_name` (`call` calls it and returns what it returns):
  // "[LightningModule]<class>.<hook>".
  template <typename Call>
  decltype(auto) CallModuleHook(const char* hook_name, const LightningModule& model, Call&& call) const {
    if (profiler == nullptr) return call();
    const std::string action = ModuleAction(model, hook_name);
    ProfileAction timed(profiler, action);
    return call();
  }
  // The strategy's part of a step (training_step, validation_step, backward, batch_to_device):
  // "[Strategy]<class>.<hook>".
  template <typename Call>
  decltype(auto) CallStrategyHook(const char* hook_name, Call&& call) const {
    if (profiler == nullptr) return call();
    const std::string action = StrategyAction(hook_name);
    ProfileAction timed(profiler, action);
    return call();
  }
  // A loop's own action ("run_training_epoch", "[_TrainingEpochLoop].train_dataloader_next").
  template <typename Call>
  decltype(auto) ProfileLoopAction(const char* action, Call&& call) const {
    if (profiler == nullptr) return call();
    ProfileAction timed(profiler, action);
    return call();
  }
  // The data module's hook: "[LightningDataModule]<class>.<hook>".
  template <typename Call>
  decltype(auto) CallDataModuleHook(const char* hook_name, const DataModule& data, Call&& call) const {
    if (profiler == nullptr) return call();
    const std::string action = DataModuleAction(data, hook_name);
    ProfileAction timed(profiler, action);
    return call();
  }
  std::string CallbackAction(const Callback& callback, const char* hook_name) const;
  std::string DataModuleAction(const DataModule& data, const char* hook_name) const;
  std::string ModuleAction(const LightningModule& model, const char* hook_name) const;
  std::string StrategyAction(const char* hook_name) const;

  // The setup hooks of an entry point's stage, in Lightning's order: the data module's, the callbacks', the
  // module's; and the teardown hooks: the callbacks', the module's. Throw what the hooks throw.
  void CallSetupHooks(DataModule& data, LightningModule& model, Stage stage) const {
    CallDataModuleHook("setup", data, [&] { data.setup(stage); });
    CallCallbacks("setup", [&](Callback& c) { c.setup(trainer, model, stage); });
    CallModuleHook("setup", model, [&] { model.setup(stage); });
  }
  void CallTeardownHooks(LightningModule& model, Stage stage) const {
    CallCallbacks("teardown", [&](Callback& c) { c.teardown(trainer, model, stage); });
    CallModuleHook("teardown", model, [&] { model.teardown(stage); });
  }
};

}  // namespace kiln

#endif  // KILN_TRAINER_LOOPS_LOOP_CONTEXT_H_
