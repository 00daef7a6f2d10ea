#include "trainer/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <utility>

#include "ATen/ATen.h"
#include "ATen/CPUGeneratorImpl.h"
#include "ATen/Context.h"
#include "ATen/Parallel.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "connector/connector.h"
#include "glog/logging.h"
#include "torch/nn/utils/clip_grad.h"
#include "torch/utils.h"
#include "trainer/callbacks/model_checkpoint.h"
#include "trainer/callbacks/model_summary_callback.h"
#include "trainer/callbacks/monitor.h"
#include "trainer/callbacks/timer.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/core/device_skip_optimizer.h"
#include "trainer/core/metric_scheduler.h"
#include "trainer/loggers/csv_logger.h"
#include "trainer/loggers/log_dir.h"
#include "trainer/loggers/tensorboard_logger.h"
#include "trainer/plugins/precision/precision_plugin.h"
#include "trainer/progress.h"
#include "trainer/strategies/ddp_strategy.h"
#include "trainer/strategies/strategy_factories.h"
#include "trainer/strategies/launcher.h"
#include "trainer/strategies/strategy.h"

namespace kiln {
namespace {

bool IsMetricScheduler(const SchedulerConfig& config) {
  return dynamic_cast<const MetricScheduler*>(config.scheduler.get()) != nullptr;
}

constexpr int64_t kDefaultMaxEpochs = 1000;  // Lightning's, when neither max_epochs nor max_steps is set.

// Runs user code (hooks, steps, callbacks), turning an exception into a Status that names where it happened.
template <typename Fn>
absl::Status CallUser(absl::string_view where, Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const c10::ValueError& e) {
    // A setting the user's code found wrong (TORCH_CHECK_VALUE, Python's ValueError): a bad input, not a failure.
    return absl::InvalidArgumentError(absl::StrCat(where, " raised: ", e.what_without_backtrace()));
  } catch (const std::invalid_argument& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, " raised: ", e.what()));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(where, " raised: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(where, " raised: ", e.what()));
  }
}

void Merge(MetricMap& into, const MetricMap& from) {
  for (const auto& [name, value] : from) into[name] = value;
}

// Makes sure teardown runs however a loop ends.
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

// Clears the module's metric sink when a loop leaves, also by an exception.
class SinkGuard {
 public:
  explicit SinkGuard(LightningModule& model) : model_(model) {}
  ~SinkGuard() { model_.set_metric_sink(nullptr, 0); }

 private:
  LightningModule& model_;
};

absl::Status Positive(absl::string_view flag, int64_t value, int64_t minimum) {
  if (value >= minimum) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(flag, "=", value, " is not valid; pass an int >= ", minimum));
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// BatchLimit

absl::StatusOr<int64_t> BatchLimit::Resolve(int64_t available, absl::string_view flag) const {
  if (const auto* count = std::get_if<int64_t>(&value_)) {
    if (*count < 0) {
      return absl::InvalidArgumentError(absl::StrCat(flag, "=", *count,
                                                     " must be >= 0 (a number of batches) or a "
                                                     "fraction in [0.0, 1.0]"));
    }
    return std::min(*count, available);
  }
  const double fraction = std::get<double>(value_);
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, "=", fraction,
                                                   " must be a fraction in [0.0, 1.0] or an "
                                                   "int number of batches"));
  }
  return static_cast<int64_t>(std::floor(fraction * static_cast<double>(available)));
}

bool BatchLimit::is_zero() const {
  if (const auto* count = std::get_if<int64_t>(&value_)) return *count == 0;
  return std::get<double>(value_) == 0.0;
}

std::string BatchLimit::ToString() const {
  if (const auto* count = std::get_if<int64_t>(&value_)) return absl::StrCat(*count);
  return absl::StrCat(std::get<double>(value_));
}

// ---------------------------------------------------------------------------------------------------------------
// Set-up

struct Trainer::LoopLimits {
  int64_t train_batches = 0;
  int64_t val_batches = 0;
  int64_t val_check_batch = 0;  // Validate after every this many training batches (0: only at the epoch's end).
  bool val_at_epoch_end = true;
};

Trainer::Trainer(TrainerOptions options) : options_(std::move(options)) {
  if (options_.fast_dev_run > 0) {
    // Lightning's fast_dev_run: N batches of everything, one epoch, no sanity check, no checkpoints or logs.
    const int64_t n = options_.fast_dev_run;
    options_.limit_train_batches = n;
    options_.limit_val_batches = n;
    options_.limit_test_batches = n;
    options_.limit_predict_batches = n;
    options_.max_steps = n;
    options_.max_epochs = 1;
    options_.num_sanity_val_steps = 0;
    options_.val_check_interval = 1.0;
    options_.check_val_every_n_epoch = 1;
  }
  if (!options_.overfit_batches.is_zero()) {
    options_.limit_train_batches = options_.overfit_batches;
    options_.limit_val_batches = options_.overfit_batches;
  }
  // Lightning's logger=True. They claim their folder only when a run sets them up.
  if (options_.logger && options_.loggers.empty() && options_.fast_dev_run == 0) {
    auto folder = std::make_shared<RunFolder>(LogDirOptions{.save_dir = options_.default_root_dir});
    options_.loggers = {std::make_shared<CsvLogger>(folder), std::make_shared<TensorBoardLogger>(folder)};
  }
}

Trainer::~Trainer() = default;

const MetricMap& Trainer::callback_metrics() const {
  if (live_step_metrics_ != nullptr) Merge(callback_metrics_, live_step_metrics_->StepMetrics());
  return callback_metrics_;
}

bool Trainer::is_global_zero() const { return strategy_ == nullptr || strategy_->is_global_zero(); }

std::string Trainer::checkpoint_dir() const {
  for (const auto& logger : options_.loggers) {
    if (!logger->log_dir().empty()) return logger->log_dir() + "/checkpoints";
  }
  return options_.default_root_dir + "/checkpoints";
}

ModelCheckpoint* Trainer::checkpoint_callback() const {
  for (const auto& callback : callbacks_) {
    if (auto* checkpoint = dynamic_cast<ModelCheckpoint*>(callback.get())) return checkpoint;
  }
  return nullptr;
}

void Trainer::log_metrics(MetricMap metrics, int64_t step) {
  if (!is_global_zero() || metrics.empty() || options_.fast_dev_run > 0 || sanity_checking_) return;
  // Every row says its epoch, as Lightning's loggers do, so that a table of them groups by epoch.
  metrics.emplace("epoch", static_cast<double>(current_epoch_));
  for (const auto& logger : options_.loggers) {
    if (absl::Status status = logger->log_metrics(metrics, step); !status.ok()) {
      LOG(WARNING) << "logger '" << logger->name() << "' failed: " << status;
    }
  }
}

template <typename Hook>
void Trainer::CallCallbacks(Hook&& hook, std::optional<bool> monitoring) {
  for (const auto& callback : callbacks_) {
    if (monitoring.has_value() && callback->is_monitoring() != *monitoring) continue;
    hook(*callback);
  }
}

void Trainer::CallOnException(LightningModule& model, const absl::Status& error) {
  const absl::Status called =
      CallUser("on_exception", [&] { CallCallbacks([&](Callback& c) { c.on_exception(*this, model, error); }); });
  if (!called.ok()) LOG(WARNING) << "on_exception failed (the run's error stands): " << called;
}

absl::Status Trainer::Prepare(Stage stage) {
  if (options_.max_steps < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_steps=", options_.max_steps, " must be -1 (no limit) or a number of steps >= 0"));
  }
  if (options_.max_epochs.has_value() && *options_.max_epochs < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_epochs=", *options_.max_epochs, " must be -1 (no limit) or a number of epochs >= 0"));
  }
  if (options_.min_epochs.has_value()) {
    if (absl::Status s = Positive("min_epochs", *options_.min_epochs, 0); !s.ok()) return s;
  }
  if (absl::Status s = Positive("check_val_every_n_epoch", options_.check_val_every_n_epoch, 1); !s.ok()) return s;
  if (absl::Status s = Positive("accumulate_grad_batches", options_.accumulate_grad_batches, 1); !s.ok()) return s;
  if (absl::Status s = Positive("log_every_n_steps", options_.log_every_n_steps, 0); !s.ok()) return s;
  if (absl::Status s = Positive("num_sanity_val_steps", options_.num_sanity_val_steps, -1); !s.ok()) return s;
  if (absl::Status s = Positive("fast_dev_run", options_.fast_dev_run, 0); !s.ok()) return s;
  if (options_.gradient_clip_algorithm != "norm" && options_.gradient_clip_algorithm != "value") {
    return absl::InvalidArgumentError(absl::StrCat("gradient_clip_algorithm='", options_.gradient_clip_algorithm,
                                                   "' is not valid; pass 'norm' or 'value'"));
  }
  if (options_.gradient_clip_val.has_value() && !(*options_.gradient_clip_val >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient_clip_val=", *options_.gradient_clip_val, " is not valid; pass a value >= 0"));
  }
  if (options_.on_nonfinite_loss != "stop" && options_.on_nonfinite_loss != "skip") {
    return absl::InvalidArgumentError(
        absl::StrCat("on_nonfinite_loss='", options_.on_nonfinite_loss, "' is not valid; pass 'stop' or 'skip'"));
  }
  if (options_.max_time.has_value() && *options_.max_time <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_time=", absl::FormatDuration(*options_.max_time), " is not valid; pass a positive time"));
  }

  ConnectorOptions connector;
  connector.accelerator = options_.accelerator;
  connector.devices = options_.devices;
  connector.strategy = options_.strategy;
  connector.process_group_backend = options_.process_group_backend;
  absl::StatusOr<std::string> precision_flag = PrecisionFlag(options_.precision, options_.precision_plugin.get());
  if (!precision_flag.ok()) return precision_flag.status();
  connector.precision = *precision_flag;
  connector.num_nodes = options_.num_nodes;
  absl::StatusOr<Plan> plan =
      ResolvePlan(connector, options_.registry != nullptr ? *options_.registry : AcceleratorRegistry::Default());
  if (!plan.ok()) return plan.status();
  std::shared_ptr<Strategy> strategy = std::dynamic_pointer_cast<Strategy>(plan->strategy_instance);
  if (plan->strategy_instance != nullptr && strategy == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("strategy instance '", plan->strategy,
                     "' describes itself to the connector but is not a kiln::Strategy; "
                     "derive it from kiln::Strategy (trainer/strategies/strategy.h) so that the trainer can run it"));
  }
  if (strategy == nullptr) {
    // Every strategy named by the plan, built-in or registered by a user, comes from its registry entry's factory.
    SetBuiltinStrategyFactories();
    absl::StatusOr<StrategySpec> spec = StrategyRegistry::Default().Find(plan->strategy);
    if (!spec.ok() || !spec->factory) {
      return absl::InvalidArgumentError(absl::StrCat(
          "strategy '", plan->strategy, "' is registered without a factory, so the trainer cannot make it; register "
          "it with StrategySpec::factory (connector/strategy_registry.h) or pass a kiln::Strategy instance as "
          "`strategy`"));
    }
    std::shared_ptr<StrategyDescriptor> made = spec->factory({.process_group_timeout = options_.process_group_timeout});
    strategy = std::dynamic_pointer_cast<Strategy>(made);
    if (strategy == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "strategy '", plan->strategy, "''s factory made ", made == nullptr ? "nothing" : "a strategy that is not a "
          "kiln::Strategy", "; it must return a kiln::Strategy (trainer/strategies/strategy.h)"));
    }
  }
  absl::StatusOr<std::shared_ptr<PrecisionPlugin>> precision =
      SelectPrecisionPlugin(plan->precision, plan->root_device(), options_.precision_plugin);
  if (!precision.ok()) return precision.status();

  callbacks_ = options_.callbacks;
  if (stage == Stage::kFit) {
    const bool has_checkpoint = std::any_of(callbacks_.begin(), callbacks_.end(), [](const auto& callback) {
      return dynamic_cast<ModelCheckpoint*>(callback.get()) != nullptr;
    });
    if (options_.enable_checkpointing && !has_checkpoint) {
      default_checkpoint_ = std::make_shared<ModelCheckpoint>();
      callbacks_.push_back(default_checkpoint_);
    }
    if (!options_.enable_checkpointing && has_checkpoint) {
      return absl::InvalidArgumentError(
          "Trainer was configured with `enable_checkpointing=False` but found `ModelCheckpoint` in callbacks list; "
          "remove the callback or enable checkpointing");
    }
    if (options_.max_time.has_value()) {
      callbacks_.push_back(std::make_shared<Timer>(TimerOptions{.duration = *options_.max_time}));
    }
    const bool has_summary = std::any_of(callbacks_.begin(), callbacks_.end(), [](const auto& callback) {
      return dynamic_cast<ModelSummaryCallback*>(callback.get()) != nullptr;
    });
    if (options_.enable_model_summary && !has_summary) callbacks_.push_back(std::make_shared<ModelSummaryCallback>());
  }
  // validate, test and predict after fit find the files of the ModelCheckpoint that fit added (ckpt_path="best").
  if (stage != Stage::kFit && default_checkpoint_ != nullptr) callbacks_.push_back(default_checkpoint_);
  for (const auto& callback : callbacks_) {
    if (absl::Status status = callback->validate_config(*this); !status.ok()) return status;
  }

  for (const std::string& warning : plan->warnings) LOG(WARNING) << warning;
  plan_ = std::move(plan).value();
  strategy_ = std::move(strategy);
  precision_ = std::move(precision).value();
  progress_ = std::make_unique<ProgressReporter>(
      options_.enable_progress_bar && stage == Stage::kFit && plan_->global_rank == 0, options_.log_every_n_steps);
  if (options_.seed.has_value()) torch::manual_seed(*options_.seed);
  at::globalContext().setDeterministicAlgorithms(options_.deterministic, /*warn_only=*/false);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------------------------
// fit

absl::Status Trainer::SetupStrategy(LightningModule& model) {
  if (strategy_->IsDistributed() && plan_->num_devices() > 1 && std::getenv("OMP_NUM_THREADS") == nullptr) {
    // The local processes share this machine's cores, as under torchrun (which sets OMP_NUM_THREADS=1): each
    // starting one intra-op thread per core oversubscribes the cores, and the threads' spin-waits then cost several
    // times the training itself (a 2-process CPU run on 2 busy cores: 35 s against 3.5 s). Processes this one
    // launches inherit the variable; an OMP_NUM_THREADS the user (or the launcher) set is kept.
    const int cores = at::get_num_threads();
    const int threads = std::max(1, cores / plan_->num_devices());
    at::set_num_threads(threads);
    ::setenv("OMP_NUM_THREADS", absl::StrCat(threads).c_str(), /*overwrite=*/0);
    LOG(INFO) << "ddp: " << plan_->num_devices() << " local processes share " << cores << " intra-op thread(s): "
              << threads << " each (set OMP_NUM_THREADS to choose)";
  }
  if (strategy_->IsDistributed() && !plan_->creates_processes_externally) {
    if (!plan_->main_port.has_value()) {
      if (plan_->num_nodes > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("num_nodes=", plan_->num_nodes,
                         " needs MASTER_ADDR and MASTER_PORT set (the same on every node) so that "
                         "the nodes can meet; set them, and NODE_RANK on each node"));
      }
      absl::StatusOr<int> port = FindFreePort();
      if (!port.ok()) return port.status();
      plan_->main_port = *port;
    }
    if (plan_->num_devices() > 1) {
      absl::StatusOr<std::unique_ptr<SubprocessLauncher>> launcher =
          SubprocessLauncher::Launch(*plan_, *plan_->main_port);
      if (!launcher.ok()) return launcher.status();
      launcher_ = std::move(launcher).value();
    }
  }
  if (absl::Status status = precision_->ConvertModule(model); !status.ok()) return status;
  return strategy_->Setup(*plan_, model);
}

absl::Status Trainer::FinishStrategy(absl::Status status) {
  if (launcher_ == nullptr) return status;
  if (status.ok()) {
    status = launcher_->Join(options_.process_group_timeout);
  } else if (const std::string failed = launcher_->KillAll(); !failed.empty()) {
    // The likely cause of this process's error: say which rank ended first, and how.
    status = absl::Status(status.code(), absl::StrCat(failed, "; ", status.message()));
  }
  launcher_.reset();
  return status;
}

MetricMap Trainer::GlobalMetrics(const MetricCollector& metrics, MetricMap local, bool steps) {
  if (strategy_->world_size() <= 1) return local;
  const std::map<std::string, MetricCollector::EpochTotal> totals = metrics.SyncedEpochTotals();
  const MetricMap step_values = steps ? metrics.SyncedStepValues() : MetricMap();
  if (totals.empty() && step_values.empty()) return local;
  std::vector<double> packed;
  for (const auto& [name, total] : totals) {
    packed.push_back(total.weighted_sum);
    packed.push_back(total.weight);
  }
  for (const auto& [name, value] : step_values) packed.push_back(value);
  // The mean of the sums over the mean of the weights is the global weighted mean.
  const at::Tensor mean = strategy_->ReduceMean(at::tensor(packed, at::TensorOptions().dtype(at::kDouble))).cpu();
  const double* reduced = mean.data_ptr<double>();
  size_t i = 0;
  for (const auto& [name, total] : totals) {
    if (local.count(name) > 0) local[name] = reduced[i] / reduced[i + 1];
    i += 2;
  }
  for (const auto& [name, value] : step_values) {
    if (local.count(name) > 0) local[name] = reduced[i];
    ++i;
  }
  return local;
}

absl::Status Trainer::CheckNoEmptyShard(int64_t batches, absl::string_view what) {
  if (strategy_->world_size() <= 1) return absl::OkStatus();
  bool some_empty = false;
  bool some_full = false;
  absl::Status agreed = CallUser("agreeing on the batches of every rank", [&] {
    some_empty = strategy_->ReduceAny(batches == 0);
    some_full = strategy_->ReduceAny(batches > 0);
  });
  if (!agreed.ok()) return agreed;
  if (some_empty && some_full) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " data has fewer batches than the ", strategy_->world_size(),
        " processes (some ranks have none); give it at least one example per process, or run on fewer devices"));
  }
  return absl::OkStatus();
}

absl::Status Trainer::SetupLoggers() {
  if (!is_global_zero() || options_.fast_dev_run > 0) return absl::OkStatus();  // Nothing is logged then.
  for (const auto& logger : options_.loggers) {
    if (absl::Status status = logger->setup(); !status.ok()) {
      return absl::Status(status.code(), absl::StrCat("logger '", logger->name(), "': ", status.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::ShardLoaders(std::initializer_list<DataLoader*> loaders) {
  for (DataLoader* loader : loaders) {
    if (loader == nullptr) continue;
    if (absl::Status status = loader->set_shard(strategy_->global_rank(), strategy_->world_size()); !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::fit(LightningModule& model, DataModule& data, const std::string& ckpt_path) {
  if (absl::Status status = Prepare(Stage::kFit); !status.ok()) return status;
  absl::Status status = SetupStrategy(model);
  if (!status.ok()) {
    if (absl::Status teardown = strategy_->Teardown(); !teardown.ok()) LOG(WARNING) << teardown;
    return FinishStrategy(status);
  }
  {
    TeardownGuard teardown(*strategy_);
    model_ = &model;
    data_ = &data;
    status = RunFit(model, data, ckpt_path);
    if (!status.ok()) CallOnException(model, status);
    model_ = nullptr;
    data_ = nullptr;
    // Every checkpoint this fit saved is on disk before fit returns.
    if (checkpoint_writer_ != nullptr) {
      if (absl::Status written = checkpoint_writer_->Flush(); !written.ok() && status.ok()) status = written;
      checkpoint_writer_.reset();
    }
  }
  status = FinishStrategy(status);
  for (const auto& logger : options_.loggers) {
    if (!is_global_zero()) break;  // Only rank zero logs.
    if (absl::Status finalized = logger->finalize(); !finalized.ok() && status.ok()) status = finalized;
  }
  return status;
}

absl::Status Trainer::RunFit(LightningModule& model, DataModule& data, const std::string& ckpt_path) {
  std::shared_ptr<DataLoader> train_loader;
  std::shared_ptr<DataLoader> val_loader;
  absl::Status status = CallUser("setup", [&] {
    data.setup(Stage::kFit);
    train_loader = data.train_dataloader();
    val_loader = data.val_dataloader();
  });
  if (!status.ok()) return status;
  if (train_loader == nullptr) {
    return absl::InvalidArgumentError("the data module returned no train_dataloader; fit needs training data");
  }
  if (absl::Status sharded = ShardLoaders({train_loader.get(), val_loader.get()}); !sharded.ok()) return sharded;

  LoopLimits limits;
  absl::StatusOr<int64_t> train_batches =
      options_.limit_train_batches.Resolve(train_loader->num_batches(), "limit_train_batches");
  if (!train_batches.ok()) return train_batches.status();
  limits.train_batches = *train_batches;
  num_training_batches_ = limits.train_batches;
  if (val_loader != nullptr) {
    absl::StatusOr<int64_t> val = options_.limit_val_batches.Resolve(val_loader->num_batches(), "limit_val_batches");
    if (!val.ok()) return val.status();
    limits.val_batches = *val;
  }
  if (options_.val_check_interval.is_fraction()) {
    absl::StatusOr<int64_t> every = options_.val_check_interval.Resolve(limits.train_batches, "val_check_interval");
    if (!every.ok()) return every.status();
    limits.val_check_batch = std::max<int64_t>(1, *every);
    limits.val_at_epoch_end = true;
  } else {
    absl::StatusOr<int64_t> every = options_.val_check_interval.Resolve(INT64_MAX, "val_check_interval");
    if (!every.ok()) return every.status();
    if (limits.val_batches > 0 && *every > limits.train_batches) {
      return absl::InvalidArgumentError(absl::StrCat(
          "`val_check_interval` (", *every, ") must be less than or equal to the number of the training batches (",
          limits.train_batches, "). If you want to disable validation set `limit_val_batches` to 0.0 instead."));
    }
    if (*every == 0) return absl::InvalidArgumentError("val_check_interval=0 is not valid; pass an int >= 1");
    limits.val_check_batch = *every;
    limits.val_at_epoch_end = false;
  }

  max_epochs_ = options_.max_epochs.value_or(-1);
  if (!options_.max_epochs.has_value() && options_.max_steps == -1) {
    LOG(WARNING) << "`max_epochs` was not set. Setting it to " << kDefaultMaxEpochs
                 << " epochs. To train without an epoch limit, set `max_epochs=-1`.";
    max_epochs_ = kDefaultMaxEpochs;
  }

  // configure_optimizers comes after the limits, so that a schedule can span the run (estimated_stepping_batches).
  {
    const int64_t per_epoch = (limits.train_batches + options_.accumulate_grad_batches - 1) /
                              std::max<int64_t>(1, options_.accumulate_grad_batches);
    int64_t steps = max_epochs_ >= 0 ? per_epoch * std::max<int64_t>(1, max_epochs_) : -1;
    if (options_.max_steps >= 0) steps = steps < 0 ? options_.max_steps : std::min(steps, options_.max_steps);
    model.set_estimated_stepping_batches(steps);
  }
  status = CallUser("configure_optimizers", [&] { optimizers_ = model.configure_optimizers(); });
  if (!status.ok()) return status;
  if (optimizers_.optimizers.empty()) {
    return absl::InvalidArgumentError("configure_optimizers returned no optimizer; return at least one");
  }
  for (const SchedulerConfig& scheduler : optimizers_.schedulers) {
    if (scheduler.scheduler == nullptr || scheduler.frequency < 1) {
      return absl::InvalidArgumentError(
          "configure_optimizers returned a scheduler config without a scheduler or with frequency < 1");
    }
    if (IsMetricScheduler(scheduler) && scheduler.monitor.empty()) {
      return absl::InvalidArgumentError(
          "configure_optimizers returned a ReduceLROnPlateau-style scheduler (a MetricScheduler) without a monitor; "
          "set its SchedulerConfig's monitor to a logged metric, e.g. monitor = \"val_loss\"");
    }
  }
  scheduler_steps_.assign(optimizers_.schedulers.size(), 0);

  current_epoch_ = 0;
  global_step_ = 0;
  next_epoch_ = 0;
  next_batch_in_epoch_ = 0;
  batches_done_in_epoch_ = 0;
  batches_that_stepped_ = 0;
  should_stop_ = false;
  skipped_batches_ = 0;
  skip_window_ = false;
  callback_metrics_.clear();
  resumed_from_.clear();
  if (!ckpt_path.empty()) {
    if (absl::Status restored = RestoreCheckpoint(model, ckpt_path, /*restore_training=*/true, &data); !restored.ok()) {
      return restored;
    }
  }
  for (const auto& optimizer : optimizers_.optimizers) optimizer->zero_grad();
  // After every input check, so that a run refused for its input leaves no folder behind.
  if (absl::Status claimed = SetupLoggers(); !claimed.ok()) return claimed;

  status = CallUser("setup/on_fit_start", [&] {
    CallCallbacks([&](Callback& c) { c.setup(*this, model, Stage::kFit); });
    CallCallbacks([&](Callback& c) { c.on_fit_start(*this, model); });
    model.on_fit_start();
  });
  if (!status.ok()) return status;
  if (is_global_zero() && options_.fast_dev_run == 0) {
    for (const auto& logger : options_.loggers) {
      if (absl::Status logged = logger->log_hyperparams(model.hparams()); !logged.ok()) {
        LOG(WARNING) << "logger '" << logger->name() << "' failed: " << logged;
      }
    }
  }

  // The sanity check must not change what training draws from the generator, so that resuming stays exact.
  const int64_t sanity_steps = options_.num_sanity_val_steps < 0
                                   ? limits.val_batches
                                   : std::min(options_.num_sanity_val_steps, limits.val_batches);
  if (val_loader != nullptr && sanity_steps > 0) {
    const at::Tensor rng = at::detail::getDefaultCPUGenerator().get_state();
    sanity_checking_ = true;
    status = CallUser("on_sanity_check_start",
                      [&] { CallCallbacks([&](Callback& c) { c.on_sanity_check_start(*this, model); }); });
    absl::StatusOr<MetricMap> sanity =
        status.ok() ? RunEvaluation(model, *val_loader, sanity_steps, Stage::kValidate) : status;
    if (sanity.ok()) {
      status = CallUser("on_sanity_check_end",
                        [&] { CallCallbacks([&](Callback& c) { c.on_sanity_check_end(*this, model); }); });
      if (!status.ok()) sanity = status;
    }
    sanity_checking_ = false;
    {
      at::Generator generator = at::detail::getDefaultCPUGenerator();
      generator.set_state(rng);
    }
    if (!sanity.ok()) return sanity.status();
  }

  current_epoch_ = next_epoch_;
  const auto done = [&] {
    const bool min_epochs_met = !options_.min_epochs.has_value() || current_epoch_ >= *options_.min_epochs;
    if (should_stop_ && !min_epochs_met) {
      LOG(INFO) << "Trainer was signaled to stop but the required `min_epochs=" << *options_.min_epochs
                << "` has not been met. Training will continue...";
      should_stop_ = false;
    }
    return (options_.max_steps >= 0 && global_step_ >= options_.max_steps) ||
           (max_epochs_ >= 0 && current_epoch_ >= max_epochs_) || (should_stop_ && min_epochs_met);
  };
  status = CallUser("on_train_start", [&] { CallCallbacks([&](Callback& c) { c.on_train_start(*this, model); }); });
  if (!status.ok()) return status;
  while (!done()) {
    status = RunTrainEpoch(model, *train_loader, val_loader.get(), limits);
    if (!status.ok()) return status;
    ++current_epoch_;
  }
  status = CallUser("on_train_end", [&] { CallCallbacks([&](Callback& c) { c.on_train_end(*this, model); }); });
  if (!status.ok()) return status;
  return CallUser("on_fit_end", [&] {
    CallCallbacks([&](Callback& c) { c.on_fit_end(*this, model); });
    model.on_fit_end();
    CallCallbacks([&](Callback& c) { c.teardown(*this, model, Stage::kFit); });
  });
}

namespace {

absl::Status NonFiniteLossError(const std::string& loss, int64_t epoch, int64_t batch, int64_t global_step) {
  return absl::AbortedError(absl::StrCat(  // A training failure (fit exits 1), not bad input.
      "the training loss is ", loss, " at epoch ", epoch, ", batch ", batch, " (global step ", global_step,
      "); training stopped before applying it. Lower the learning rate, clip gradients "
      "(gradient_clip_val), or pass on_nonfinite_loss=\"skip\" to skip such batches"));
}

// LibTorch's clip_grad_norm_ with the 2-norm, operator for operator (so the gradients come out bit for bit the
// same), without its last step: it returns the total norm as a double, a host read that would make every clipped
// step wait for the device.
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

// Losses kept for naming a non-finite one, at most: reaching it reads the flag (one host read per this many steps).
constexpr size_t kMaxPendingLosses = 4096;

}  // namespace

bool Trainer::ChecksLossOnDevice() const {
  if (options_.on_nonfinite_loss != "stop" || strategy_->world_size() > 1 || optimizers_.optimizers.empty() ||
      precision_->precision() == Precision::k16Mixed) {
    return false;
  }
  for (const auto& optimizer : optimizers_.optimizers) {
    const auto* skipping = dynamic_cast<const DeviceSkipOptimizer*>(optimizer.get());
    if (skipping == nullptr || !skipping->can_skip_on_device()) return false;
  }
  return true;
}

absl::Status Trainer::CheckPendingLosses() {
  if (pending_losses_.empty()) return nonfinite_failure_;
  std::vector<PendingLoss> pending;
  pending.swap(pending_losses_);
  if (found_inf_.item<float>() == 0) return absl::OkStatus();
  for (const PendingLoss& entry : pending) {
    const double value = entry.loss.item<double>();
    if (std::isfinite(value)) continue;
    // The device skipped this batch's update and every one after it: the run stands where it stood before it.
    current_epoch_ = entry.epoch;
    global_step_ = entry.global_step;
    batches_that_stepped_ = entry.global_step;
    next_batch_in_epoch_ = entry.batch;
    batches_done_in_epoch_ = entry.batch;
    nonfinite_failure_ = NonFiniteLossError(absl::StrCat(value), entry.epoch, entry.batch, entry.global_step);
    return nonfinite_failure_;
  }
  nonfinite_failure_ = absl::InternalError(
      "the device flagged a non-finite training loss that none of the losses "
      "since the last check has; training stopped");
  return nonfinite_failure_;
}

absl::Status Trainer::RunTrainEpoch(LightningModule& model, DataLoader& train, DataLoader* val,
                                    const LoopLimits& limits) {
  MetricCollector metrics(/*training=*/true);
  SinkGuard sink_guard(model);
  live_step_metrics_ = &metrics;
  struct LiveGuard {
    Trainer* trainer;
    MetricCollector* metrics;
    ~LiveGuard() {
      Merge(trainer->callback_metrics_, metrics->StepMetrics());
      trainer->live_step_metrics_ = nullptr;
    }
  } live_guard{this, &metrics};
  const int64_t first_batch = next_epoch_ == current_epoch_ ? next_batch_in_epoch_ : 0;
  next_epoch_ = current_epoch_;
  next_batch_in_epoch_ = first_batch;
  batches_done_in_epoch_ = first_batch;
  const bool validate_this_epoch =
      val != nullptr && limits.val_batches > 0 && (current_epoch_ + 1) % options_.check_val_every_n_epoch == 0;
  model.train();
  progress_->StartEpoch(current_epoch_, max_epochs_, limits.train_batches);
  // Where it can, the loop never reads the loss on the host: the device flags a non-finite loss (found_inf_), the
  // fused optimizers skip their update on the device when it is set, and the flag is read only where the host reads
  // something anyway (a log row, validation, a checkpoint, the epoch's end) or every kMaxPendingLosses steps.
  loss_check_on_device_ = ChecksLossOnDevice();
  std::vector<DeviceSkipOptimizer*> skipping_optimizers;
  for (const auto& optimizer : optimizers_.optimizers) {
    auto* skipping = dynamic_cast<DeviceSkipOptimizer*>(optimizer.get());
    if (skipping != nullptr) skipping->set_found_inf(at::Tensor());
    if (skipping != nullptr && loss_check_on_device_) skipping_optimizers.push_back(skipping);
  }
  nonfinite_failure_ = absl::OkStatus();
  pending_losses_.clear();
  found_inf_ = at::Tensor();  // Made on the loss's device at the epoch's first step, then updated in place.

  absl::Status status = CallUser("on_train_epoch_start", [&] {
    CallCallbacks([&](Callback& c) { c.on_train_epoch_start(*this, model); });
    model.on_train_epoch_start();
    // overfit_batches trains on the same batches, in the same order, every epoch.
    train.set_epoch(options_.overfit_batches.is_zero() ? current_epoch_ : 0);
  });
  if (!status.ok()) return status;

  for (int64_t batch_idx = first_batch; batch_idx < limits.train_batches; ++batch_idx) {
    const bool last_batch = batch_idx + 1 == limits.train_batches;
    const bool step_now = (batch_idx + 1) % options_.accumulate_grad_batches == 0 || last_batch;
    Batch batch;
    bool nonfinite = false;
    double loss_value = 0;
    at::Tensor loss;
    status = CallUser("training_step", [&] {
      batch = precision_->ConvertInput(strategy_->BatchToDevice(train.get_batch(batch_idx)));
      CallCallbacks([&](Callback& c) { c.on_train_batch_start(*this, model, batch, batch_idx); });
      model.set_metric_sink(&metrics, batch.size());
      {
        PrecisionPlugin::ForwardContext forward_context(*precision_);
        loss = model.training_step(batch, batch_idx);
      }
      model.set_metric_sink(nullptr, 0);
      TORCH_CHECK(loss.defined() && loss.numel() == 1, "training_step must return a scalar loss tensor");
      // Never train on a non-finite loss. Every rank decides together, so that all skip or stop at the same batch.
      if (loss_check_on_device_) {
        const at::Tensor value = loss.detach();
        if (!found_inf_.defined() || found_inf_.device() != value.device()) {
          // Made at the epoch's first step; should the loss move to another device, the flag follows it, as it is.
          found_inf_ =
              found_inf_.defined() ? found_inf_.to(value.device()) : at::zeros({}, value.options().dtype(at::kFloat));
          for (DeviceSkipOptimizer* optimizer : skipping_optimizers) optimizer->set_found_inf(found_inf_);
        }
        // x - x is 0 when x is finite, else NaN, which is true: one subtraction and one in-place or.
        found_inf_.logical_or_(value - value);
        pending_losses_.push_back({current_epoch_, batch_idx, global_step_, value});
      } else {
        loss_value = loss.item<double>();
        nonfinite = !std::isfinite(loss_value);
        if (strategy_->world_size() > 1) nonfinite = strategy_->ReduceAny(nonfinite);
        if (nonfinite) return;
      }
      const at::Tensor to_backward = precision_->PreBackward(
          options_.accumulate_grad_batches > 1 ? loss / options_.accumulate_grad_batches : loss);
      CallCallbacks([&](Callback& c) { c.on_before_backward(*this, model, to_backward); });
      strategy_->Backward(to_backward, /*sync_gradients=*/step_now);
      CallCallbacks([&](Callback& c) { c.on_after_backward(*this, model); });
    });
    if (!status.ok()) return status;
    if (nonfinite && options_.on_nonfinite_loss == "stop") {
      return NonFiniteLossError(std::isfinite(loss_value) ? "not finite on another rank" : absl::StrCat(loss_value),
                                current_epoch_, batch_idx, global_step_);
    }
    if (pending_losses_.size() >= kMaxPendingLosses) {
      if (absl::Status checked = CheckPendingLosses(); !checked.ok()) return checked;
    }
    // A non-finite loss drops the whole accumulation window it belongs to: its gradients go, nothing is stepped.
    bool skip = false;
    if (nonfinite) {
      LOG(WARNING) << "skipping epoch " << current_epoch_ << " batch " << batch_idx << ": the training loss is "
                   << loss_value << " (on_nonfinite_loss=\"skip\")";
      ++skipped_batches_;
      skip = true;
      skip_window_ = !step_now;
    } else if (skip_window_) {
      skip = true;
      skip_window_ = !step_now;
    }
    if (skip && step_now) {
      for (const auto& optimizer : optimizers_.optimizers) optimizer->zero_grad();
    }

    const bool stepped_optimizer = step_now && !skip;
    if (stepped_optimizer) {
      if (absl::Status stepped = OptimizerStep(model); !stepped.ok()) return stepped;
      // Step metrics stay tensors until something reads them: the loggers, now, or callback_metrics().
      // Values logged with sync_dist are reduced at the same steps on every rank, for rank zero to log.
      const bool log_now =
          options_.log_every_n_steps > 0 && global_step_ % options_.log_every_n_steps == 0 && !options_.loggers.empty();
      const bool reduce_now = log_now && strategy_->world_size() > 1 && metrics.HasSyncedStepValues();
      if (log_now && (is_global_zero() || reduce_now)) {
        // A row never holds values of a batch whose loss was not finite.
        if (absl::Status checked = CheckPendingLosses(); !checked.ok()) return checked;
        MetricMap step_metrics = metrics.StepMetrics();
        if (reduce_now) {
          status = CallUser("reducing sync_dist metrics",
                            [&] { step_metrics = GlobalMetrics(metrics, std::move(step_metrics), /*steps=*/true); });
          if (!status.ok()) return status;
        }
        log_metrics(std::move(step_metrics), logged_step());
      }
    }
    next_batch_in_epoch_ = batch_idx + 1;
    batches_done_in_epoch_ = batch_idx + 1;
    progress_->Step(batch_idx, global_step_, [&] { return metrics.ProgressBarMetrics(); });
    status = CallUser("on_train_batch_end", [&] {
      const at::Tensor outputs = loss.detach();
      CallCallbacks([&](Callback& c) { c.on_train_batch_end(*this, model, outputs, batch, batch_idx); });
    });
    // A checkpoint the callbacks asked for found a non-finite loss (save_checkpoint): that is the run's error.
    if (!status.ok()) return nonfinite_failure_.ok() ? status : nonfinite_failure_;

    const bool val_now = validate_this_epoch &&
                         ((batch_idx + 1) % limits.val_check_batch == 0 || (last_batch && limits.val_at_epoch_end));
    const bool max_steps_reached = options_.max_steps >= 0 && global_step_ >= options_.max_steps;
    if (val_now || (max_steps_reached && validate_this_epoch && limits.val_at_epoch_end)) {
      if (absl::Status checked = CheckPendingLosses(); !checked.ok()) return checked;
      absl::StatusOr<MetricMap> val_metrics = RunEvaluation(model, *val, limits.val_batches, Stage::kValidate);
      if (!val_metrics.ok()) return val_metrics.status();
      model.train();
    }
    // Step-interval metric schedulers step after the batch's validation, as Lightning's plateau schedulers do.
    for (size_t i = 0; stepped_optimizer && i < optimizers_.schedulers.size(); ++i) {
      const SchedulerConfig& scheduler = optimizers_.schedulers[i];
      if (scheduler.interval == SchedulerConfig::Interval::kStep && IsMetricScheduler(scheduler) &&
          global_step_ % scheduler.frequency == 0) {
        if (absl::Status stepped = StepScheduler(i); !stepped.ok()) return stepped;
      }
    }
    batches_that_stepped_ = global_step_;
    // Every rank must stop at the same batch: a stop that one rank decided (its timer, say) is shared.
    if (strategy_->world_size() > 1) {
      status = CallUser("agreeing on should_stop", [&] { should_stop_ = strategy_->ReduceAny(should_stop_); });
      if (!status.ok()) return status;
    }
    const bool min_epochs_met = !options_.min_epochs.has_value() || current_epoch_ + 1 >= *options_.min_epochs;
    if (max_steps_reached || (should_stop_ && min_epochs_met)) break;
  }

  if (absl::Status checked = CheckPendingLosses(); !checked.ok()) return checked;
  loss_check_on_device_ = false;
  const bool ran_batches = first_batch < limits.train_batches;
  Merge(callback_metrics_, metrics.StepMetrics());
  MetricMap epoch_metrics;
  status = CallUser("reducing sync_dist metrics",
                    [&] { epoch_metrics = GlobalMetrics(metrics, metrics.EpochMetrics(), /*steps=*/false); });
  if (!status.ok()) return status;
  Merge(callback_metrics_, epoch_metrics);
  // Epoch schedulers step after the epoch's last validation, before on_train_epoch_end: a checkpoint written from
  // there on holds the stepped schedule with the next epoch, so resuming never steps it twice or misses a step.
  for (size_t i = 0; i < optimizers_.schedulers.size(); ++i) {
    const SchedulerConfig& scheduler = optimizers_.schedulers[i];
    if (scheduler.interval == SchedulerConfig::Interval::kEpoch && (current_epoch_ + 1) % scheduler.frequency == 0) {
      if (IsMetricScheduler(scheduler) && !ran_batches) {
        // Resumed from a checkpoint written after this epoch's last batch but before its validation: the value the
        // step needs was never computed in this run (Lightning skips plateau schedulers when restarting too).
        LOG(WARNING) << "not stepping the scheduler that monitors '" << scheduler.monitor << "' at the end of epoch "
                     << current_epoch_ << ": the run resumed after the epoch's last batch, before its validation";
        continue;
      }
      if (absl::Status stepped = StepScheduler(i); !stepped.ok()) return stepped;
    }
  }
  // A checkpoint written from here on resumes at the start of the next epoch.
  next_epoch_ = current_epoch_ + 1;
  next_batch_in_epoch_ = 0;
  status = CallUser("on_train_epoch_end", [&] {
    model.set_metric_sink(&metrics, 1);
    CallCallbacks([&](Callback& c) { c.on_train_epoch_end(*this, model); }, /*monitoring=*/false);
    model.on_train_epoch_end();
    model.set_metric_sink(nullptr, 0);
    epoch_metrics = GlobalMetrics(metrics, metrics.EpochMetrics(), /*steps=*/false);
    Merge(callback_metrics_, epoch_metrics);
    CallCallbacks([&](Callback& c) { c.on_train_epoch_end(*this, model); }, /*monitoring=*/true);
  });
  if (!status.ok()) return status;
  if (!epoch_metrics.empty()) {
    // Lightning logs the epoch's metrics at the step of its last batch.
    log_metrics(epoch_metrics, std::max<int64_t>(0, logged_step() - 1));
  }
  for (const auto& logger : options_.loggers) {
    if (!is_global_zero()) break;  // Only rank zero logs.
    if (absl::Status saved = logger->save(); !saved.ok())
      LOG(WARNING) << "logger '" << logger->name() << "': " << saved;
  }
  progress_->EndEpoch(current_epoch_, callback_metrics_);
  return absl::OkStatus();
}

absl::Status Trainer::StepScheduler(size_t index) {
  const SchedulerConfig& config = optimizers_.schedulers[index];
  auto* metric_scheduler = dynamic_cast<MetricScheduler*>(config.scheduler.get());
  if (metric_scheduler == nullptr) {
    return CallUser("lr scheduler step", [&] {
      config.scheduler->step();
      ++scheduler_steps_[index];
    });
  }
  const MetricMap& metrics = callback_metrics();
  auto found = metrics.find(config.monitor);
  if (found == metrics.end()) {
    const std::string message =
        absl::StrCat("ReduceLROnPlateau conditioned on metric '", config.monitor, "', which is not available at epoch ",
                     current_epoch_, ", global step ", global_step_, ". Available metrics are: ", MetricNames(metrics),
                     ". Set the SchedulerConfig's monitor to one of them, or validate before the scheduler steps");
    if (config.strict) return absl::InvalidArgumentError(message);
    LOG(WARNING) << message << " (strict=false: skipping this learning-rate update)";
    return absl::OkStatus();
  }
  return CallUser("lr scheduler step", [&] {
    metric_scheduler->step(found->second);
    ++scheduler_steps_[index];
  });
}

absl::Status Trainer::OptimizerStep(LightningModule& model) {
  return CallUser("optimizer step", [&] {
    // Clipping and on_before_optimizer_step see true gradients: 16-mixed unscales them first (precision_plugin.h).
    for (const auto& optimizer : optimizers_.optimizers) precision_->UnscaleGradients(*optimizer);
    if (options_.gradient_clip_val.has_value() && *options_.gradient_clip_val > 0) {
      const std::vector<at::Tensor> parameters = model.parameters();
      if (options_.gradient_clip_algorithm == "norm") {
        ClipGradNorm(parameters, *options_.gradient_clip_val);
      } else {
        torch::nn::utils::clip_grad_value_(parameters, *options_.gradient_clip_val);
      }
    }
    for (const auto& optimizer : optimizers_.optimizers) {
      CallCallbacks([&](Callback& c) { c.on_before_optimizer_step(*this, model, *optimizer); });
      precision_->OptimizerStep(*optimizer, [&] { strategy_->OptimizerStep(*optimizer); });
      CallCallbacks([&](Callback& c) { c.on_before_zero_grad(*this, model, *optimizer); });
      optimizer->zero_grad();
    }
    precision_->Update();
    ++global_step_;
    // Metric schedulers step after validation instead (RunTrainEpoch), once the value they monitor is there.
    for (size_t i = 0; i < optimizers_.schedulers.size(); ++i) {
      const SchedulerConfig& scheduler = optimizers_.schedulers[i];
      if (scheduler.interval == SchedulerConfig::Interval::kStep && !IsMetricScheduler(scheduler) &&
          global_step_ % scheduler.frequency == 0) {
        scheduler.scheduler->step();
        ++scheduler_steps_[i];
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Evaluation loops

absl::StatusOr<MetricMap> Trainer::RunEvaluation(LightningModule& model, DataLoader& loader, int64_t limit,
                                                 Stage stage) {
  const bool validating = stage == Stage::kValidate;
  if (absl::Status agreed = CheckNoEmptyShard(limit, validating ? "validation" : "test"); !agreed.ok()) return agreed;
  MetricCollector metrics(/*training=*/false);
  SinkGuard sink_guard(model);
  model.eval();
  absl::Status status = CallUser(validating ? "validation loop" : "test loop", [&] {
    CallCallbacks([&](Callback& c) {
      if (validating) {
        c.on_validation_start(*this, model);
        c.on_validation_epoch_start(*this, model);
      } else {
        c.on_test_start(*this, model);
        c.on_test_epoch_start(*this, model);
      }
    });
    torch::NoGradGuard no_grad;
    loader.set_epoch(0);
    progress_->StartEvaluation(sanity_checking_ ? "Sanity Checking" : validating ? "Validation" : "Testing", limit);
    for (int64_t batch_idx = 0; batch_idx < limit; ++batch_idx) {
      Batch batch = precision_->ConvertInput(strategy_->BatchToDevice(loader.get_batch(batch_idx)));
      CallCallbacks([&](Callback& c) {
        validating ? c.on_validation_batch_start(*this, model, batch, batch_idx)
                   : c.on_test_batch_start(*this, model, batch, batch_idx);
      });
      model.set_metric_sink(&metrics, batch.size());
      {
        PrecisionPlugin::ForwardContext forward_context(*precision_);
        validating ? model.validation_step(batch, batch_idx) : model.test_step(batch, batch_idx);
      }
      model.set_metric_sink(nullptr, 0);
      CallCallbacks([&](Callback& c) {
        validating ? c.on_validation_batch_end(*this, model, batch, batch_idx)
                   : c.on_test_batch_end(*this, model, batch, batch_idx);
      });
      progress_->EvaluationStep(batch_idx);
    }
    model.set_metric_sink(&metrics, 1);
    validating ? model.on_validation_epoch_end() : model.on_test_epoch_end();
    model.set_metric_sink(nullptr, 0);
  });
  progress_->EndEvaluation();
  if (!status.ok()) return status;
  MetricMap result = metrics.EpochMetrics();
  Merge(result, metrics.StepMetrics());
  status = CallUser("reducing sync_dist metrics",
                    [&] { result = GlobalMetrics(metrics, std::move(result), /*steps=*/true); });
  if (!status.ok()) return status;
  if (!sanity_checking_) {
    Merge(callback_metrics_, result);
    log_metrics(result, logged_step());
  }
  status = CallUser(validating ? "on_validation_end" : "on_test_end", [&] {
    if (validating) {
      CallCallbacks([&](Callback& c) { c.on_validation_epoch_end(*this, model); });
      CallCallbacks([&](Callback& c) { c.on_validation_end(*this, model); });
    } else {
      CallCallbacks([&](Callback& c) { c.on_test_epoch_end(*this, model); });
      CallCallbacks([&](Callback& c) { c.on_test_end(*this, model); });
    }
  });
  if (!status.ok()) return status;
  return result;
}

absl::StatusOr<MetricMap> Trainer::RunStage(LightningModule& model, DataModule& data, const std::string& ckpt_path,
                                            Stage stage) {
  if (absl::Status status = Prepare(stage); !status.ok()) return status;
  absl::StatusOr<MetricMap> metrics = absl::UnknownError("not run");
  absl::Status status = SetupStrategy(model);
  if (status.ok()) {
    TeardownGuard teardown(*strategy_);
    metrics = Evaluate(model, data, ckpt_path, stage);
    if (!metrics.ok()) CallOnException(model, metrics.status());
  } else if (absl::Status teardown = strategy_->Teardown(); !teardown.ok()) {
    LOG(WARNING) << teardown;
  }
  status = FinishStrategy(status.ok() ? metrics.status() : status);
  if (!status.ok()) return status;
  return metrics;
}

absl::StatusOr<MetricMap> Trainer::Evaluate(LightningModule& model, DataModule& data, const std::string& ckpt_path,
                                            Stage stage) {
  if (!ckpt_path.empty()) {
    if (absl::Status status = RestoreCheckpoint(model, ckpt_path, /*restore_training=*/false); !status.ok()) {
      return status;
    }
  }
  const bool validating = stage == Stage::kValidate;
  if (absl::Status claimed = SetupLoggers(); !claimed.ok()) return claimed;
  std::shared_ptr<DataLoader> loader;
  absl::Status status = CallUser("setup", [&] {
    data.setup(stage);
    loader = validating ? data.val_dataloader() : data.test_dataloader();
    CallCallbacks([&](Callback& c) { c.setup(*this, model, stage); });
  });
  if (!status.ok()) return status;
  if (loader == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(validating ? "validate needs a val_dataloader" : "test needs a test_dataloader",
                     "; the data module returned none"));
  }
  if (absl::Status sharded = ShardLoaders({loader.get()}); !sharded.ok()) return sharded;
  absl::StatusOr<int64_t> limit =
      (validating ? options_.limit_val_batches : options_.limit_test_batches)
          .Resolve(loader->num_batches(), validating ? "limit_val_batches" : "limit_test_batches");
  if (!limit.ok()) return limit.status();
  absl::StatusOr<MetricMap> metrics = RunEvaluation(model, *loader, *limit, stage);
  status = CallUser("teardown", [&] { CallCallbacks([&](Callback& c) { c.teardown(*this, model, stage); }); });
  if (metrics.ok() && !status.ok()) return status;
  for (const auto& logger : options_.loggers) {
    if (!is_global_zero()) break;  // Only rank zero logs.
    if (absl::Status finalized = logger->finalize(); !finalized.ok()) LOG(WARNING) << finalized;
  }
  return metrics;
}

absl::StatusOr<MetricMap> Trainer::validate(LightningModule& model, DataModule& data, const std::string& ckpt_path) {
  return RunStage(model, data, ckpt_path, Stage::kValidate);
}

absl::StatusOr<MetricMap> Trainer::test(LightningModule& model, DataModule& data, const std::string& ckpt_path) {
  return RunStage(model, data, ckpt_path, Stage::kTest);
}

absl::StatusOr<std::vector<at::Tensor>> Trainer::predict(LightningModule& model, DataModule& data,
                                                         const std::string& ckpt_path) {
  if (absl::Status status = Prepare(Stage::kPredict); !status.ok()) return status;
  absl::StatusOr<std::vector<at::Tensor>> predictions = absl::UnknownError("not run");
  absl::Status status = SetupStrategy(model);
  if (status.ok()) {
    TeardownGuard teardown(*strategy_);
    predictions = Predict(model, data, ckpt_path);
    if (!predictions.ok()) CallOnException(model, predictions.status());
  } else if (absl::Status teardown = strategy_->Teardown(); !teardown.ok()) {
    LOG(WARNING) << teardown;
  }
  status = FinishStrategy(status.ok() ? predictions.status() : status);
  if (!status.ok()) return status;
  return predictions;
}

absl::StatusOr<std::vector<at::Tensor>> Trainer::Predict(LightningModule& model, DataModule& data,
                                                         const std::string& ckpt_path) {
  if (!ckpt_path.empty()) {
    if (absl::Status status = RestoreCheckpoint(model, ckpt_path, /*restore_training=*/false); !status.ok()) {
      return status;
    }
  }
  std::shared_ptr<DataLoader> loader;
  absl::Status status = CallUser("setup", [&] {
    data.setup(Stage::kPredict);
    loader = data.predict_dataloader();
    CallCallbacks([&](Callback& c) { c.setup(*this, model, Stage::kPredict); });
  });
  if (!status.ok()) return status;
  if (loader == nullptr) {
    return absl::InvalidArgumentError("predict needs a predict_dataloader; the data module returned none");
  }
  if (absl::Status sharded = ShardLoaders({loader.get()}); !sharded.ok()) return sharded;
  absl::StatusOr<int64_t> limit =
      options_.limit_predict_batches.Resolve(loader->num_batches(), "limit_predict_batches");
  if (!limit.ok()) return limit.status();
  if (absl::Status agreed = CheckNoEmptyShard(*limit, "predict"); !agreed.ok()) return agreed;
  std::vector<at::Tensor> predictions;
  model.eval();
  status = CallUser("predict_step", [&] {
    CallCallbacks([&](Callback& c) {
      c.on_predict_start(*this, model);
      c.on_predict_epoch_start(*this, model);
    });
    torch::NoGradGuard no_grad;
    loader->set_epoch(0);
    for (int64_t batch_idx = 0; batch_idx < *limit; ++batch_idx) {
      Batch batch = precision_->ConvertInput(strategy_->BatchToDevice(loader->get_batch(batch_idx)));
      CallCallbacks([&](Callback& c) { c.on_predict_batch_start(*this, model, batch, batch_idx); });
      at::Tensor prediction;
      {
        PrecisionPlugin::ForwardContext forward_context(*precision_);
        prediction = model.predict_step(batch, batch_idx);
      }
      CallCallbacks([&](Callback& c) { c.on_predict_batch_end(*this, model, prediction, batch, batch_idx); });
      predictions.push_back(prediction.to(at::kCPU));
    }
    CallCallbacks([&](Callback& c) {
      c.on_predict_epoch_end(*this, model);
      c.on_predict_end(*this, model);
    });
  });
  if (!status.ok()) return status;
  status =
      CallUser("teardown", [&] { CallCallbacks([&](Callback& c) { c.teardown(*this, model, Stage::kPredict); }); });
  if (!status.ok()) return status;
  if (strategy_->world_size() <= 1 || predictions.empty()) return predictions;  // Empty: on every rank.
  // Every rank gets every prediction, in the data's order: rank r predicted examples r, r + W, r + 2W, ... (the
  // DataLoader::set_shard contract), so the gathered shards are interleaved back.
  std::vector<at::Tensor> shards;
  status = CallUser("gathering predictions", [&] { shards = strategy_->AllGather(at::cat(predictions)); });
  if (!status.ok()) return status;
  int64_t total = 0;
  for (const at::Tensor& shard : shards) total += shard.size(0);
  const int64_t world = static_cast<int64_t>(shards.size());
  // Global row i is row i / W of shard i % W; one gather, with each shard's offset in the concatenation.
  std::vector<int64_t> offsets;
  for (int64_t rank = 0, offset = 0; rank < world; offset += shards[rank].size(0), ++rank) {
    if (shards[rank].size(0) != (total - rank + world - 1) / world) {
      return absl::InternalError(absl::StrCat("predict: rank ", rank, " returned ", shards[rank].size(0),
                                              " predictions, which does not fit ", total, " interleaved over ", world,
                                              " ranks (the predict loader breaks DataLoader::set_shard's "
                                              "contract)"));
    }
    offsets.push_back(offset);
  }
  const at::Tensor row = at::arange(total, at::TensorOptions().dtype(at::kLong));
  const at::Tensor source = at::tensor(offsets, at::TensorOptions().dtype(at::kLong))
                                .index_select(0, row.remainder(world))
                                .add(row.div(world, "floor"));
  return std::vector<at::Tensor>{at::cat(shards).index_select(0, source)};
}

}  // namespace kiln
