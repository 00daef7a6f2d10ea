// `bazel run //trainer:fit`: trains (or evaluates, or predicts with) a model with Kiln from the command line.
//
// The flags are in trainer/cli/flags.h; `fit --help` lists them in groups. Exit status: 0 when the run finished,
// 2 for a bad flag, bad data or a plan the connector rejects (one `error: ` line, nothing written), 1 when training
// itself fails.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "hal/compat/error_message.h"
#include "hal/compat/logging.h"
#include "hal/compat/version.h"
#include "torch/utils.h"
#include "trainer/accelerator_plugins.h"
#include "trainer/callbacks/device_stats_monitor.h"
#include "trainer/callbacks/throughput_monitor.h"
#include "trainer/callbacks/early_stopping.h"
#include "trainer/callbacks/on_exception_checkpoint.h"
#include "trainer/callbacks/stochastic_weight_averaging.h"
#include "trainer/callbacks/weight_averaging.h"
#include "trainer/callbacks/learning_rate_monitor.h"
#include "trainer/callbacks/model_checkpoint.h"
#include "trainer/cli/command_line.h"
#include "trainer/cli/config_file.h"
#include "trainer/cli/data_factory.h"
#include "trainer/cli/fit_config.h"
#include "trainer/cli/flags.h"
#include "trainer/cli/help.h"
#include "trainer/cli/lightning_cli.h"
#include "trainer/cli/model_factory.h"
#include "trainer/cli/out_of_memory.h"
#include "trainer/cli/output_locations.h"
#include "trainer/cli/predictions_csv.h"
#include "trainer/cli/report_summary.h"
#include "trainer/cli/run_summary.h"
#include "trainer/cli/saved_run.h"
#include "trainer/cli/versions.h"
#include "trainer/core/option_fix.h"
#include "trainer/io/durable_file.h"
#include "trainer/io/memory_budget.h"
#include "trainer/loggers/csv_logger.h"
#include "trainer/loggers/mlflow_logger.h"
#include "trainer/loggers/wandb_logger.h"
#include "trainer/loggers/tensorboard_logger.h"
#include "trainer/report/run_report.h"
#include "trainer/trainer.h"
#include "trainer/tuner.h"

namespace kiln {
namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

constexpr char kUsage[] =
    "Trains a model with Kiln, the C++ counterpart of PyTorch Lightning's Trainer.\n\n"
    "  bazel run //trainer:fit                                  # an MLP on the built-in synthetic task\n"
    "  bazel run //trainer:fit -- --data=digits --model=cnn     # the UCI digits (python3-sklearn)\n"
    "  bazel run //trainer:fit -- --data=my.csv --label_column=price --task=regression\n"
    "  bazel run //trainer:fit -- --model=model.pt              # a TorchScript module from Python\n"
    "  bazel run //trainer:fit -- --ckpt_path=last              # resume the newest run\n"
    "  bazel run //trainer:fit -- --mode=predict --ckpt_path=last\n"
    "  bazel run //trainer:fit -- --version                     # Kiln's version, its LibTorch, the plugin C API's\n\n"
    "Flags are named after Lightning's Trainer arguments, and LightningCLI's spellings work too: fit validate ...,\n"
    "--trainer.max_epochs=3, --model.KEY, --data.KEY, --optimizer=SGD --optimizer.lr=0.1, --seed_everything=7.\n"
    "Each run writes <default_root_dir>/lightning_logs/version_<N>/ (metrics.csv, hparams.yaml, report.html,\n"
    "checkpoints/). Exit status: 0 done, 2 bad flags or data (nothing written), 1 training failed.";

// Every `error:` line fit prints: one line, whatever the message holds (OneLine, command_line.h).
void PrintError(absl::string_view message) { std::cerr << "error: " << OneLine(message) << std::endl; }

// What fit is doing (a literal), for the line of an exception that escapes everything else (EscapedErrorLine).
std::atomic<const char*> doing{"reading the command line"};

// That line: when memory ran out, what ran out, while doing what, and the limits of the inputs (out_of_memory.h);
// anything else is an internal error.
std::string EscapedErrorLine(const std::exception& error) {
  const std::string what = compat::ExceptionMessage(error);
  if (IsOutOfMemory(error)) return OutOfMemoryMessage(doing.load(), what, MaxInflatedBytes(), InputMemoryBudget());
  return absl::StrCat("internal error, training stopped: ", what);
}

// Each monitor a fit flag names must be a metric the model logs: otherwise the run would fail at the first epoch's
// end, with a run folder written.
absl::Status CheckMonitors(const FitConfig& config, const SupervisedModule& model) {
  const std::vector<std::string> logged = model.logged_metric_names();
  std::vector<std::pair<std::string, std::string>> monitors;
  if (config.trainer.enable_checkpointing && config.outputs.checkpoint.monitor.has_value()) {
    monitors.emplace_back("checkpoint_monitor", *config.outputs.checkpoint.monitor);
  }
  if (config.outputs.early_stopping.has_value()) {
    monitors.emplace_back("early_stopping_monitor", config.outputs.early_stopping->monitor);
  }
  if (config.model.lr_scheduler.name == "plateau") {
    monitors.emplace_back("lr_scheduler_monitor", config.model.lr_scheduler.monitor);
  }
  for (const auto& [flag, monitor] : monitors) {
    if (std::find(logged.begin(), logged.end(), monitor) != logged.end()) continue;
    const std::string closest = ClosestName(monitor, logged);
    return FlagError(flag, monitor,
                     absl::StrCat("the model logs ", absl::StrJoin(logged, ", "),
                                  closest.empty() ? "" : absl::StrCat("; did you mean ", closest, "?")));
  }
  return absl::OkStatus();
}

// A flag or data error: one line, exit 2.
[[noreturn]] void UsageError(absl::string_view message) {
  PrintError(message);
  std::exit(kExitUsage);
}

// Errors the trainer reports before it writes anything: the user's input was wrong (or too large to load).
bool IsInputError(const absl::Status& status) {
  return status.code() == absl::StatusCode::kInvalidArgument || status.code() == absl::StatusCode::kResourceExhausted ||
         status.code() == absl::StatusCode::kFailedPrecondition || status.code() == absl::StatusCode::kNotFound ||
         status.code() == absl::StatusCode::kUnimplemented;
}

// Calls `fn` when fit reaches its end successfully (on_fit_end runs only then).
class OnFitEnd final : public Callback {
 public:
  explicit OnFitEnd(std::function<void()> fn) : fn_(std::move(fn)) {}
  std::string state_key() const override { return "OnFitEnd"; }
  void on_fit_end(Trainer& trainer, LightningModule& module) override { fn_(); }

 private:
  std::function<void()> fn_;
};

// Lightning's trainer.log_dir: the first logger's folder that has one, else default_root_dir.
std::string LogDir(const Trainer& trainer) {
  for (const auto& logger : trainer.loggers()) {
    if (!logger->log_dir().empty()) return logger->log_dir();
  }
  return trainer.options().default_root_dir;
}

// Saves the run's configuration as <run folder>/config.yaml, as LightningCLI's SaveConfigCallback does: `fit
// --config=<run folder>/config.yaml` repeats the run. Rank zero alone writes it. A file that cannot be written stops
// the run, like a log that cannot be. LightningCLI writes it in setup; Kiln's setup hooks run before the checkpoint
// and the other inputs are checked (Lightning's order), and a run refused for its input leaves no folder behind, so
// it is written at the stage's first start hook (on_fit_start, or on_validation_start, on_test_start,
// on_predict_start), once the loggers have claimed the run folder.
class SaveConfig final : public Callback {
 public:
  SaveConfig(std::shared_ptr<RunFolder> folder, std::string yaml)
      : folder_(std::move(folder)), yaml_(std::move(yaml)) {}
  std::string state_key() const override { return "SaveConfig"; }
  void on_fit_start(Trainer& trainer, LightningModule& module) override { Write(trainer); }
  void on_validation_start(Trainer& trainer, LightningModule& module) override { Write(trainer); }
  void on_test_start(Trainer& trainer, LightningModule& module) override { Write(trainer); }
  void on_predict_start(Trainer& trainer, LightningModule& module) override { Write(trainer); }

 private:
  void Write(Trainer& trainer) {
    if (written_ || !trainer.is_global_zero()) return;
    written_ = true;
    // Without a logger that has a version folder (MLflow, W&B alone): the trainer's log_dir, as Lightning's.
    absl::StatusOr<std::string> dir =
        folder_ != nullptr ? folder_->Claim() : absl::StatusOr<std::string>(LogDir(trainer));
    absl::Status written = dir.ok() ? WriteFileDurably(*dir + "/config.yaml", yaml_) : dir.status();
    if (!written.ok()) throw std::runtime_error(absl::StrCat("config.yaml: ", written.message()));
  }

  const std::shared_ptr<RunFolder> folder_;
  const std::string yaml_;
  bool written_ = false;
};

// The plan's devices as a JSON list, as their accelerator numbers them ("acme:0").
nlohmann::ordered_json JsonDevices(const Plan& plan) {
  nlohmann::ordered_json devices = nlohmann::ordered_json::array();
  for (const LogicalDevice& device : plan.logical_devices()) {
    devices.push_back(absl::StrCat(device.accelerator, ":", device.index));
  }
  return devices;
}

void PrintMetrics(const MetricMap& metrics) {
  std::printf("Final metrics:\n");
  for (const auto& [name, value] : metrics) {
    if (absl::EndsWith(name, "_step") || name == "epoch") continue;
    std::printf("  %-16s %.4f\n", name.c_str(), value);
  }
}

// `spec` at batch size `size`: the synthetic task reads its own copy of --batch_size (SyntheticOptions).
void SetBatchSize(DataSpec& spec, int64_t size) {
  spec.batch_size = size;
  spec.synthetic.batch_size = size;
}

// The data of `spec` at whatever batch size the batch-size finder tries (Tuner::scale_batch_size): each size loads the
// data again (LoadData), so every kind of data fit reads takes it, at the cost of reading the input once a trial.
class BatchSizeTrials final : public DataModule, public TunableAttributes {
 public:
  BatchSizeTrials(DataSpec spec, std::shared_ptr<DataModule> current)
      : spec_(std::move(spec)), current_(std::move(current)) {}
  void setup(Stage stage) override { current_->setup(stage); }
  std::shared_ptr<DataLoader> train_dataloader() override { return current_->train_dataloader(); }
  std::vector<std::shared_ptr<DataLoader>> val_dataloaders() override { return current_->val_dataloaders(); }
  std::optional<double> get_attribute(std::string_view name) const override {
    if (name == "batch_size") return static_cast<double>(spec_.batch_size);
    return std::nullopt;
  }
  void set_attribute(std::string_view name, double value) override {
    SetBatchSize(spec_, static_cast<int64_t>(value));
    absl::StatusOr<LoadedData> loaded = LoadData(spec_);
    if (!loaded.ok()) throw std::runtime_error(std::string(loaded.status().message()));
    current_ = loaded->module;
  }

 private:
  DataSpec spec_;
  std::shared_ptr<DataModule> current_;
};

// --auto_scale_batch_size, then --auto_lr_find (Lightning 1.x's trainer.tune order), before the run: the batch size
// found replaces --batch_size (the data is loaded again with it), lr_find's suggestion --learning_rate, each in the
// model's hyper-parameters too. One line each on standard error.
absl::Status Tune(const FitConfig& config, Trainer& trainer, LoadedData& data, SupervisedModule& model,
                  std::optional<LRFinder>& lr_found) {
  const TuneSpec& tune = config.tune;
  std::map<std::string, std::string> hparams = model.hparams();
  if (tune.auto_scale_batch_size != "none") {
    if (config.data.streaming) {
      return FlagError("auto_scale_batch_size", tune.auto_scale_batch_size,
                       "a stream (--streaming) has no length to tune against; pass none, or read the file whole");
    }
    BatchSizeTrials trials(config.data, data.module);
    absl::StatusOr<std::optional<int64_t>> size;
    try {
      size = Tuner(trainer).scale_batch_size(model, trials, {.mode = tune.auto_scale_batch_size});
    } catch (const std::exception& error) {
      size = absl::InvalidArgumentError(absl::StrCat("--auto_scale_batch_size: ", error.what()));
    }
    if (!size.ok()) return size.status();
    if (size->has_value()) {
      DataSpec spec = config.data;
      SetBatchSize(spec, **size);
      absl::StatusOr<LoadedData> loaded = LoadData(spec);
      if (!loaded.ok()) return loaded.status();
      data = *std::move(loaded);
      hparams["batch_size"] = absl::StrCat(**size);
      std::cerr << "auto_scale_batch_size (" << tune.auto_scale_batch_size << "): batch size " << **size
                << " in place of --batch_size=" << config.data.batch_size << std::endl;
    }
  }
  if (tune.auto_lr_find) {
    absl::StatusOr<std::optional<LRFinder>> found =
        Tuner(trainer).lr_find(model, *data.module,
                               {.min_lr = tune.lr_find_min_lr, .max_lr = tune.lr_find_max_lr,
                                .num_training = tune.lr_find_num_training, .mode = tune.lr_find_mode,
                                .update_attr = false});
    if (!found.ok()) return found.status();
    if (found->has_value()) {
      lr_found = **found;
      const std::optional<int64_t> index = lr_found->optimal_index();
      if (index.has_value()) {
        const double lr = lr_found->lrs[*index];
        model.set_learning_rate(lr);
        hparams["learning_rate"] = absl::StrFormat("%.17g", lr);
        std::cerr << "auto_lr_find: learning rate " << absl::StrFormat("%.6g", lr) << " (point " << *index << " of "
                  << lr_found->lrs.size() << ") in place of --learning_rate=" << config.model.learning_rate
                  << std::endl;
      } else {
        std::cerr << "auto_lr_find: no suggestion (" << lr_found->lrs.size()
                  << " points); training with --learning_rate=" << config.model.learning_rate << std::endl;
      }
    }
  }
  model.save_hyperparameters(std::move(hparams));
  return absl::OkStatus();
}

// `typed`: the command line as typed; `expanded`: as fit read it (flag files expanded). Both go into report.html.
int RunFit(const FitConfig& config, LoadedData& data, SupervisedModule& model, const std::vector<std::string>& typed,
           const std::vector<std::string>& expanded) {
  TrainerOptions options = config.trainer;
  const OutputSpec& outputs = config.outputs;
  // Each logger has its own version folder, as Lightning's loggers do (the same one when --log_version names it),
  // claimed in the order of --logger when the run starts (Logger::setup). The first one's holds the checkpoints and
  // config.yaml.
  std::shared_ptr<RunFolder> folder;
  const auto own_folder = [&] {
    auto made = std::make_shared<RunFolder>(outputs.log_dir);
    if (folder == nullptr) folder = made;
    return made;
  };
  std::shared_ptr<TensorBoardLogger> tensorboard;
  for (const std::string& name : outputs.loggers) {
    if (name == "csv") options.loggers.push_back(std::make_shared<CsvLogger>(own_folder()));
    if (name == "mlflow") options.loggers.push_back(std::make_shared<MLFlowLogger>(outputs.mlflow));
    if (name == "wandb") options.loggers.push_back(std::make_shared<WandbLogger>(outputs.wandb));
    if (name == "tensorboard") {
      tensorboard = std::make_shared<TensorBoardLogger>(own_folder());
      tensorboard->set_session_status(SessionStatus::kFailure);  // Until fit reaches its end.
      options.loggers.push_back(tensorboard);
      options.callbacks.push_back(
          std::make_shared<OnFitEnd>([tensorboard] { tensorboard->set_session_status(SessionStatus::kSuccess); }));
    }
  }
  // fast_dev_run writes no logs, and so no config.yaml.
  if (!outputs.loggers.empty() && options.fast_dev_run == 0) {
    options.callbacks.push_back(std::make_shared<SaveConfig>(folder, ConfigYaml()));
  }
  const bool report = outputs.report && options.fast_dev_run == 0;
  std::shared_ptr<RunReport> run_report;
  if (report) {
    auto memory = std::make_shared<MemoryLogger>();
    options.loggers.push_back(memory);  // Last: the first logger with a folder decides where checkpoints go.
    run_report = std::make_shared<RunReport>(memory, RunReportOptions{.every_n_steps = options.log_every_n_steps});
    options.callbacks.push_back(run_report);
  }
  // Before ModelCheckpoint, so that a checkpoint saved after a step or an epoch holds the average that includes it.
  if (outputs.swa.has_value()) options.callbacks.push_back(std::make_shared<StochasticWeightAveraging>(*outputs.swa));
  if (outputs.ema.has_value()) options.callbacks.push_back(std::make_shared<EMAWeightAveraging>(*outputs.ema));
  std::shared_ptr<ModelCheckpoint> checkpoint;
  if (options.enable_checkpointing) {
    checkpoint = std::make_shared<ModelCheckpoint>(outputs.checkpoint);
    options.callbacks.push_back(checkpoint);
  }
  if (outputs.on_exception.has_value()) {
    options.callbacks.push_back(std::make_shared<OnExceptionCheckpoint>(*outputs.on_exception));
  }
  if (outputs.early_stopping.has_value()) {
    options.callbacks.push_back(std::make_shared<EarlyStopping>(*outputs.early_stopping));
  }
  if (absl::GetFlag(FLAGS_device_stats_monitor)) options.callbacks.push_back(std::make_shared<DeviceStatsMonitor>());
  if (absl::GetFlag(FLAGS_throughput_monitor)) {
    ThroughputMonitorOptions throughput{.window_size = absl::GetFlag(FLAGS_throughput_window_size)};
    if (const double peak = absl::GetFlag(FLAGS_throughput_available_flops); peak != 0) {
      throughput.available_flops = peak;
    }
    options.callbacks.push_back(std::make_shared<ThroughputMonitor>(std::move(throughput)));
  }
  // A schedule's rates go to the loggers, as a Lightning user would add LearningRateMonitor to see them.
  const LRSchedulerOptions& schedule = config.model.lr_scheduler;
  if ((schedule.name != "none" || schedule.warmup_iters > 0) && !options.loggers.empty()) {
    options.callbacks.push_back(std::make_shared<LearningRateMonitor>());
  }

  std::cerr << "Data: " << data.description << std::endl;
  Trainer trainer(options);
  std::optional<LRFinder> lr_found;
  if (absl::Status tuned = Tune(config, trainer, data, model, lr_found); !tuned.ok()) {
    if (IsInputError(tuned)) UsageError(tuned.message());
    PrintError(tuned.message());
    return kExitFailed;
  }
  if (lr_found.has_value() && run_report != nullptr) {
    std::vector<std::pair<double, double>> points;
    for (size_t i = 0; i < lr_found->lrs.size(); ++i) points.emplace_back(lr_found->lrs[i], lr_found->losses[i]);
    const std::optional<int64_t> index = lr_found->optimal_index();
    run_report->set_lr_find(std::move(points),
                            index.has_value() ? std::optional<double>(lr_found->lrs[*index]) : std::nullopt);
  }
  const absl::Time start = absl::Now();
  const absl::Status status = trainer.fit(model, *data.module, config.ckpt_path);
  const double wall_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  // Bad input found before the first step (flags the trainer checks, the plan, the checkpoint to resume from): like
  // a bad flag, nothing is written.
  if (!status.ok() && IsInputError(status) && trainer.global_step() == 0) UsageError(status.message());

  // With several processes, the other ranks trained the same model: rank zero alone reports and writes outputs.
  if (status.ok() && !trainer.is_global_zero()) return 0;
  const std::string run_dir = folder != nullptr ? folder->path() : LogDir(trainer);
  const std::string report_path = run_dir + "/report.html";
  if (run_report != nullptr && trainer.plan().has_value() && trainer.is_global_zero()) {
    run_report->set_title(absl::StrCat("Kiln run ", run_dir));
    ReportSummaryFacts facts{
        .command_line = typed,
        .expanded_command_line = expanded,
        .run_dir = run_dir,
        .status = status.ok() ? "finished" : std::string(status.message()),
        .data = data.description,
        .epochs = trainer.current_epoch(),
        .global_step = trainer.global_step(),
        .wall_seconds = wall_seconds,
        .resumed_from = trainer.resumed_from(),
        .params_sha256 = ParamsSha256(model),
    };
    if (checkpoint != nullptr) {
      facts.last_checkpoint = checkpoint->last_model_path();
      facts.best_checkpoint = checkpoint->best_model_path();
      facts.monitor = outputs.checkpoint.monitor;
      facts.best_score = checkpoint->best_model_score();
    }
    ReportTable metrics{"final-metrics", "Final metrics", {}};
    for (const auto& [name, value] : trainer.callback_metrics())
      metrics.rows.emplace_back(name, absl::StrFormat("%.6g", value));
    const std::string line =
        status.ok() ? absl::StrCat("Finished: ", trainer.current_epoch(), " epochs, ", trainer.global_step(),
                                   " steps in ", absl::StrFormat("%.1f", wall_seconds), " s.")
                    : absl::StrCat("Failed: ", status.message());
    // Written durably, its folder made if missing (WriteFileDurably), like every output below.
    const absl::Status written = run_report->Write(report_path, line, ReportSummary(facts), {metrics});
    if (!written.ok()) LOG(WARNING) << "report.html: " << written;
  }
  if (!status.ok()) {
    PrintError(status.message());
    return IsInputError(status) ? kExitUsage : kExitFailed;
  }

  if (lr_found.has_value() && trainer.is_global_zero()) {
    // The range test's curve beside the run's metrics, every value as it was (17 significant digits).
    std::string csv = "lr,loss\n";
    for (size_t i = 0; i < lr_found->lrs.size(); ++i) {
      absl::StrAppend(&csv, absl::StrFormat("%.17g,%.17g\n", lr_found->lrs[i], lr_found->losses[i]));
    }
    if (absl::Status written = WriteFileDurably(run_dir + "/lr_find.csv", csv); !written.ok()) {
      LOG(WARNING) << "lr_find.csv: " << written;
    }
  }
  const Plan& plan = *trainer.plan();
  std::printf("Trained on %s (%s, %s) for %lld epochs, %lld steps.\n", plan.accelerator->name().c_str(),
              plan.strategy.c_str(), std::string(PrecisionName(plan.precision)).c_str(),
              static_cast<long long>(trainer.current_epoch()), static_cast<long long>(trainer.global_step()));
  // fast_dev_run writes no logs and no checkpoints.
  if (options.fast_dev_run == 0 && (!outputs.loggers.empty() || report || checkpoint != nullptr)) {
    std::printf("Run folder: %s\n", run_dir.c_str());
  }
  if (!outputs.summary_json.empty()) {
    JsonObject json;
    json.AddString("mode", "fit")
        .Add("final_metrics", JsonMetrics(trainer.callback_metrics()))
        .Add("epochs", trainer.current_epoch())
        .Add("global_step", trainer.global_step())
        .Add("wall_time_seconds", std::round(wall_seconds * 1000) / 1000);  // Whole milliseconds.
    json.Add("plan", plan.ToJsonValue())
        .AddString("accelerator", plan.accelerator->name())
        .Add("devices", JsonDevices(plan))
        .AddString("strategy", plan.strategy)
        .AddString("precision", std::string(PrecisionName(plan.precision)))
        .AddString("model", config.model.model)
        .AddString("data", config.data.data)
        .AddString("resumed_from", trainer.resumed_from())
        .AddString("log_dir", outputs.loggers.empty() ? "" : run_dir)
        .AddString("report", report ? report_path : "")
        .AddString("last_checkpoint", checkpoint != nullptr ? checkpoint->last_model_path() : "")
        .AddString("params_sha256", ParamsSha256(model));
    AddVersions(json);
    if (absl::Status written = WriteFileDurably(outputs.summary_json, json.ToString()); !written.ok()) {
      PrintError(absl::StrCat("--summary_json: ", written.message()));
      return kExitFailed;
    }
  }
  PrintMetrics(trainer.callback_metrics());
  return 0;
}

// --mode=validate and --mode=test.
int RunEvaluate(const FitConfig& config, LoadedData& data, SupervisedModule& model) {
  Trainer trainer(config.trainer);
  absl::StatusOr<MetricMap> metrics = config.mode == "test" ? trainer.test(model, *data.module, config.ckpt_path)
                                                            : trainer.validate(model, *data.module, config.ckpt_path);
  if (!metrics.ok()) {
    if (IsInputError(metrics.status())) UsageError(metrics.status().message());
    PrintError(metrics.status().message());
    return kExitFailed;
  }
  if (!trainer.is_global_zero()) return 0;  // The metrics are every rank's; rank zero alone reports them.
  if (!config.outputs.summary_json.empty()) {
    JsonObject json;
    json.AddString("mode", config.mode)
        .Add("final_metrics", JsonMetrics(*metrics))
        .AddString("ckpt_path", config.ckpt_path)
        .AddString("accelerator", trainer.plan()->accelerator->name())
        .AddString("params_sha256", ParamsSha256(model));
    AddVersions(json);
    if (absl::Status written = WriteFileDurably(config.outputs.summary_json, json.ToString()); !written.ok()) {
      PrintError(absl::StrCat("--summary_json: ", written.message()));
      return kExitFailed;
    }
  }
  PrintMetrics(*metrics);
  return 0;
}

int RunPredict(const FitConfig& config, LoadedData& data, SupervisedModule& model) {
  Trainer trainer(config.trainer);
  absl::StatusOr<std::vector<at::Tensor>> predictions = trainer.predict(model, *data.module, config.ckpt_path);
  if (!predictions.ok()) {
    if (IsInputError(predictions.status())) UsageError(predictions.status().message());
    PrintError(predictions.status().message());
    return kExitFailed;
  }
  if (!trainer.is_global_zero()) return 0;  // Every rank holds every prediction; rank zero alone writes them.
  absl::StatusOr<std::string> csv = PredictionsCsv(*predictions, data.task, data.class_names);
  if (!csv.ok()) {
    PrintError(csv.status().message());
    return kExitFailed;
  }
  if (absl::Status written = WriteFileDurably(config.outputs.predictions, *csv); !written.ok()) {
    PrintError(absl::StrCat("--predictions: ", written.message()));
    return kExitFailed;
  }
  int64_t rows = 0;
  for (const at::Tensor& batch : *predictions) rows += batch.size(0);
  if (!config.outputs.summary_json.empty()) {
    JsonObject json;
    json.AddString("mode", "predict")
        .Add("rows", rows)
        .AddString("predictions", config.outputs.predictions)
        .AddString("ckpt_path", config.ckpt_path)
        .AddString("params_sha256", ParamsSha256(model));
    AddVersions(json);
    if (absl::Status written = WriteFileDurably(config.outputs.summary_json, json.ToString()); !written.ok()) {
      PrintError(absl::StrCat("--summary_json: ", written.message()));
      return kExitFailed;
    }
  }
  std::printf("Wrote %lld predictions to %s\n", static_cast<long long>(rows), config.outputs.predictions.c_str());
  return 0;
}

int Main(int argc, char** argv) {
  // A file-size limit (ulimit -f) then makes a checkpoint write fail with EFBIG, reported like a full disk, instead
  // of killing the process in the middle of training.
  std::signal(SIGXFSZ, SIG_IGN);
  // Errors name their fixes as this program's flags, not as a library program's options.
  UseFlagSpelling();
  absl::SetProgramUsageMessage(kUsage);
  if (WantsHelp(argc, argv)) {
    std::cout << FlagsHelp(kUsage, FitFlagGroups());
    return 0;
  }
  if (WantsVersion(argc, argv)) {
    std::cout << VersionText();
    return 0;
  }
  // Headers of one LibTorch and libraries of another would train on a broken ABI.
  if (absl::Status versions = compat::CheckLibTorchVersion(); !versions.ok()) UsageError(versions.message());
  // Flag files and variables first, so that their flags meet the same checks as the command line's.
  absl::StatusOr<std::vector<std::string>> args = ExpandCommandLine({argv, argv + argc}, UserPath);
  if (!args.ok()) UsageError(args.status().message());
  // LightningCLI's spellings (fit validate ..., --trainer.max_epochs=3, --seed_everything) as fit's flags.
  std::vector<std::string> notes;
  args = LightningCliArguments(*args, &notes);
  if (!args.ok()) UsageError(args.status().message());
  for (const std::string& note : notes) std::cerr << "note: " << note << std::endl;
  absl::StatusOr<std::vector<std::string>> config_files = ConfigFileNames(*args);
  if (!config_files.ok()) UsageError(config_files.status().message());
  // Config files' flags go first, so that the command line overrides them and they meet the same checks.
  args = ApplyConfigFiles(*args, UserPath);
  if (!args.ok()) UsageError(args.status().message());
  std::vector<char*> expanded = ArgvOf(*args);
  const int expanded_argc = static_cast<int>(args->size());
  if (WantsHelp(expanded_argc, expanded.data())) {
    std::cout << FlagsHelp(kUsage, FitFlagGroups());
    return 0;
  }
  if (absl::Status checked = CheckCommandLine(expanded_argc, expanded.data()); !checked.ok()) {
    UsageError(checked.message());
  }
  absl::ParseCommandLine(expanded_argc, expanded.data());
  FLAGS_logtostderr = true;
  // On a terminal, INFO lines would break up the progress bar and wrap across the screen: people see warnings and
  // errors unless they ask for more. Logs that go to a file or a pipe keep everything.
  if (isatty(STDERR_FILENO) == 1 && !absl::GetFlag(FLAGS_verbose)) FLAGS_minloglevel = google::GLOG_WARNING;
  google::InitGoogleLogging(argv[0]);
  compat::MatchLibTorchLoggingToGlog(FLAGS_minloglevel);
  // Plugins register their accelerators before anything resolves --accelerator.
  if (absl::Status loaded = LoadAcceleratorPluginsFromCommandLine(expanded_argc, expanded.data()); !loaded.ok()) {
    UsageError(loaded.message());
  }

  // Before any input is read (the saved run's checkpoint, just below).
  if (absl::Status limits = ApplyInputLimitFlags(); !limits.ok()) UsageError(limits.message());
  // --mode=validate and --mode=predict take the model and data flags left out from the checkpoint.
  std::optional<SavedRun> saved;
  doing = "reading the run --ckpt_path names";
  const std::string ckpt_path = absl::GetFlag(FLAGS_ckpt_path);
  if (absl::GetFlag(FLAGS_mode) != "fit" && !ckpt_path.empty() && ckpt_path != "best") {
    absl::StatusOr<SavedRun> run = ApplySavedRun(ckpt_path == "last" ? ckpt_path : UserPath(ckpt_path),
                                                 UserPath(absl::GetFlag(FLAGS_default_root_dir)), *args);
    if (!run.ok()) UsageError(run.status().message());
    saved = *std::move(run);
    if (!saved->taken.empty()) {
      std::cerr << "From " << saved->path << ": " << absl::StrJoin(saved->taken, " ") << std::endl;
    }
  }
  absl::StatusOr<FitConfig> config = FitConfigFromFlags();
  if (!config.ok()) UsageError(config.status().message());
  if (saved.has_value()) {
    config->ckpt_path = saved->path;
    config->data.saved_state = saved->data_state;
  }
  if (absl::GetFlag(FLAGS_print_config)) {
    std::cout << ConfigYaml();
    return 0;
  }
  for (const std::string& file : *config_files) config->config_files.push_back(UserPath(file));
  if (absl::Status writable = CheckOutputLocations(*config); !writable.ok()) UsageError(writable.message());
  doing = "loading the data";
  absl::StatusOr<LoadedData> data = LoadData(config->data);
  if (!data.ok()) UsageError(data.status().message());
  // Seed before building the model, so that its initial parameters depend on --seed alone.
  torch::manual_seed(*config->trainer.seed);
  doing = "building the model";
  absl::StatusOr<std::shared_ptr<SupervisedModule>> model = MakeModel(config->model, *data);
  if (!model.ok()) UsageError(model.status().message());
  std::map<std::string, std::string> hparams = (*model)->hparams();
  hparams["data"] = config->data.data;
  hparams["batch_size"] = absl::StrCat(config->data.batch_size);
  hparams["seed"] = absl::StrCat(*config->trainer.seed);
  if (config->data.streaming) {
    hparams["streaming"] = "true";
    hparams["val_data"] = config->data.val_data;
    hparams["label_column"] = config->data.label_column;
    hparams["normalize"] = config->data.normalize ? "true" : "false";
  } else if (data->table != nullptr) {
    hparams["val_fraction"] = absl::StrCat(config->data.val_fraction);
    hparams["label_column"] = config->data.label_column;
    hparams["normalize"] = config->data.normalize ? "true" : "false";
  }
  // The synthetic task's examples, so that validate and predict from the checkpoint make the same ones.
  if (config->data.data == "synthetic") {
    hparams["num_train"] = absl::StrCat(config->data.synthetic.num_train);
    hparams["num_val"] = absl::StrCat(config->data.synthetic.num_val);
  }
  (*model)->save_hyperparameters(std::move(hparams));

  if (config->mode == "fit") {
    if (absl::Status monitors = CheckMonitors(*config, **model); !monitors.ok()) UsageError(monitors.message());
  }
  if (config->mode == "validate" || config->mode == "test") {
    doing = "evaluating the model (--mode=validate or test)";
    return RunEvaluate(*config, *data, **model);
  }
  if (config->mode == "predict") {
    doing = "predicting (--mode=predict)";
    return RunPredict(*config, *data, **model);
  }
  doing = "training (--mode=fit, a --ckpt_path checkpoint read first)";
  return RunFit(*config, *data, **model, std::vector<std::string>(argv, argv + argc), *args);
}

}  // namespace
}  // namespace kiln

// The last net under fit's promise "never an abort": an exception that escapes (from Kiln, LibTorch or a user's
// module), here or in a background thread, ends fit with one `error:` line and exit status 1: memory that ran out
// says so (what fit was doing, the inputs' limits), anything else is an internal error. Outputs are written
// atomically, so nothing half-written is left behind.
[[noreturn]] static void OnTerminate() {
  std::string line = "internal error, training stopped: an unknown exception";
  if (std::exception_ptr current = std::current_exception()) {
    try {
      std::rethrow_exception(current);
    } catch (const std::exception& error) {
      line = kiln::EscapedErrorLine(error);
    } catch (...) {
    }
  } else {
    line = "internal error, training stopped: std::terminate without an exception";
  }
  kiln::PrintError(line);
  std::_Exit(kiln::kExitFailed);
}

int main(int argc, char** argv) {
  std::set_terminate(OnTerminate);
  try {
    return kiln::Main(argc, argv);
  } catch (const std::exception& error) {  // LibTorch's c10::Error too, without its backtrace.
    kiln::PrintError(kiln::EscapedErrorLine(error));
    return kiln::kExitFailed;
  }
}
