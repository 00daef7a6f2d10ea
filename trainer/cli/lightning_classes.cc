// The LightningCLI classes Kiln has (lightning_classes.h). The arguments and defaults are those Lightning 2.6 and
// PyTorch 2.11 have: what `LightningCLI --print_config` writes for each class.
#include "trainer/cli/lightning_classes.h"

#include <cmath>
#include <random>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "trainer/strategies/fsdp_options.h"

namespace kiln {
namespace {

using Section = ConfigKey::Section;

// Arguments every torch.optim optimizer has that Kiln takes as PyTorch's defaults.
std::vector<ClassArgument> OptimizerArguments(std::vector<ClassArgument> own) {
  for (ClassArgument common : {ClassArgument{"maximize", nullptr, "false"}, ClassArgument{"foreach", nullptr, "null"},
                               ClassArgument{"differentiable", nullptr, "false"},
                               // Kiln's --fused_optimizer picks LibTorch's fused kernels itself.
                               ClassArgument{"fused", nullptr, "null"}}) {
    own.push_back(common);
  }
  return own;
}

std::vector<LightningClass> MakeClasses() {
  const ClassArgument last_epoch{"last_epoch", nullptr, "-1"};
  const std::vector<ClassArgument> adam_betas = {
      {"betas", nullptr, "[0.9, 0.999]"}, {"eps", nullptr, "1.0e-08"}};
  return {
      // Optimizers (torch.optim).
      {ClassKind::kOptimizer, "Adam", "torch.optim", "optimizer", "adam",
       OptimizerArguments({{"lr", "learning_rate", "0.001"},
                           adam_betas[0],
                           adam_betas[1],
                           {"weight_decay", "weight_decay", "0.0"},
                           {"amsgrad", nullptr, "false"},
                           {"capturable", nullptr, "false"},
                           {"decoupled_weight_decay", nullptr, "false"}})},
      {ClassKind::kOptimizer, "AdamW", "torch.optim", "optimizer", "adamw",
       OptimizerArguments({{"lr", "learning_rate", "0.001"},
                           adam_betas[0],
                           adam_betas[1],
                           {"weight_decay", "weight_decay", "0.01"},
                           {"amsgrad", nullptr, "false"},
                           {"capturable", nullptr, "false"}})},
      {ClassKind::kOptimizer, "SGD", "torch.optim", "optimizer", "sgd",
       OptimizerArguments({{"lr", "learning_rate", "0.001"},
                           {"momentum", "momentum", "0.0"},
                           {"dampening", nullptr, "0.0"},
                           {"weight_decay", "weight_decay", "0.0"},
                           {"nesterov", nullptr, "false"}})},
      // Learning-rate schedulers (torch.optim.lr_scheduler; Lightning's ReduceLROnPlateau adds the monitor).
      {ClassKind::kScheduler, "StepLR", "torch.optim.lr_scheduler", "lr_scheduler", "step",
       {{"step_size", "step_size", nullptr}, {"gamma", "gamma", "0.1"}, last_epoch}},
      {ClassKind::kScheduler, "CosineAnnealingLR", "torch.optim.lr_scheduler", "lr_scheduler", "cosine",
       {{"T_max", "T_max", nullptr}, {"eta_min", "eta_min", "0.0"}, last_epoch}},
      {ClassKind::kScheduler, "OneCycleLR", "torch.optim.lr_scheduler", "lr_scheduler", "onecycle",
       {{"max_lr", "max_lr", nullptr},
        {"total_steps", "total_steps", "null"},
        {"epochs", nullptr, "null"},
        {"steps_per_epoch", nullptr, "null"},
        {"pct_start", "pct_start", "0.3"},
        {"anneal_strategy", "anneal_strategy", "cos"},
        // Kiln's one-cycle schedule moves the learning rate only.
        {"cycle_momentum", nullptr, "true", "false"},
        {"base_momentum", nullptr, "0.85"},
        {"max_momentum", nullptr, "0.95"},
        {"div_factor", "div_factor", "25.0"},
        {"final_div_factor", "final_div_factor", "10000.0"},
        {"three_phase", "three_phase", "false"},
        last_epoch}},
      {ClassKind::kScheduler, "ReduceLROnPlateau", "lightning.pytorch.cli", "lr_scheduler", "plateau",
       {{"monitor", "lr_scheduler_monitor", nullptr},
        {"mode", "plateau_mode", "min"},
        {"factor", "plateau_factor", "0.1"},
        {"patience", "plateau_patience", "10"},
        {"threshold", "plateau_threshold", "0.0001"},
        {"threshold_mode", "plateau_threshold_mode", "rel"},
        {"cooldown", "plateau_cooldown", "0"},
        {"min_lr", "min_lr", "0.0"},
        {"eps", nullptr, "1.0e-08"}}},
      // Callbacks (lightning.pytorch.callbacks).
      // Listed or not, fit's checkpointing is --enable_checkpointing's (Lightning refuses the two disagreeing).
      {ClassKind::kCallback, "ModelCheckpoint", "lightning.pytorch.callbacks", nullptr, nullptr,
       {{"dirpath", nullptr, "null"},
        {"filename", "checkpoint_filename", "null"},
        {"monitor", "checkpoint_monitor", "null"},
        {"verbose", nullptr, "false"},
        // Lightning's save_last=None writes no last.ckpt.
        {"save_last", "save_last", "false"},
        {"save_top_k", "save_top_k", "1"},
        {"save_on_exception", nullptr, "false"},
        {"save_weights_only", "save_weights_only", "false"},
        {"mode", "checkpoint_mode", "min"},
        {"auto_insert_metric_name", nullptr, "true"},
        {"every_n_train_steps", "every_n_train_steps", "null"},
        {"train_time_interval", "train_time_interval", "null"},
        {"every_n_epochs", "every_n_epochs", "null"},
        {"save_on_train_epoch_end", "save_on_train_epoch_end", "null"},
        {"enable_version_counter", "enable_version_counter", "true"}}},
      {ClassKind::kCallback, "EarlyStopping", "lightning.pytorch.callbacks", nullptr, nullptr,
       {{"monitor", "early_stopping_monitor", nullptr},
        {"min_delta", "min_delta", "0.0"},
        {"patience", "patience", "3"},
        {"verbose", nullptr, "false"},
        {"mode", "early_stopping_mode", "min"},
        {"strict", nullptr, "true"},
        {"check_finite", nullptr, "true"},
        {"stopping_threshold", nullptr, "null"},
        {"divergence_threshold", nullptr, "null"},
        {"check_on_train_epoch_end", nullptr, "null"},
        {"log_rank_zero_only", nullptr, "false"}}},
      // Weight averaging: --swa_lrs adds StochasticWeightAveraging (Lightning requires swa_lrs: config_file.cc);
      // naming EMAWeightAveraging sets --ema_weight_averaging. Kiln has the equal average and the EMA, and keeps the
      // averaged copy where Lightning's default puts it (SWA: cpu; EMA: null, the module's device).
      {ClassKind::kCallback, "StochasticWeightAveraging", "lightning.pytorch.callbacks", nullptr, nullptr,
       {{"swa_lrs", "swa_lrs", nullptr},
        {"swa_epoch_start", "swa_epoch_start", "0.8"},
        {"annealing_epochs", "annealing_epochs", "10"},
        {"annealing_strategy", "annealing_strategy", "cos"},
        {"avg_fn", nullptr, "null"},
        {"device", nullptr, "cpu"}}},
      {ClassKind::kCallback, "EMAWeightAveraging", "lightning.pytorch.callbacks", "ema_weight_averaging", "true",
       {{"device", nullptr, "null"},
        {"use_buffers", "ema_use_buffers", "true"},
        {"decay", "ema_decay", "0.999"},
        {"update_every_n_steps", "ema_update_every_n_steps", "1"},
        {"update_starting_at_step", "ema_update_starting_at_step", "null"},
        {"update_starting_at_epoch", "ema_update_starting_at_epoch", "null"},
        {"multi_avg_fn", nullptr, "null"}}},
      // fit logs the learning rates whenever a schedule runs.
      {ClassKind::kCallback, "LearningRateMonitor", "lightning.pytorch.callbacks", nullptr, nullptr,
       {{"logging_interval", nullptr, "null"},
        {"log_momentum", nullptr, "false"},
        {"log_weight_decay", nullptr, "false"}}},
      {ClassKind::kCallback, "ModelSummary", "lightning.pytorch.callbacks", "enable_model_summary", "true",
       {{"max_depth", nullptr, "1"}}},
      {ClassKind::kCallback, "DeviceStatsMonitor", "lightning.pytorch.callbacks", "device_stats_monitor", "true",
       {{"cpu_stats", nullptr, "null"}}},
      // Kiln counts a batch's samples as its first dimension (Lightning's required batch_size_fn, a Python callable)
      // and has no length_fn in fit; the peak FLOP/s is fit's --throughput_available_flops.
      {ClassKind::kCallback, "ThroughputMonitor", "lightning.pytorch.callbacks", "throughput_monitor", "true",
       {{"batch_size_fn", nullptr, nullptr, "null", /*written=*/false},
        {"length_fn", nullptr, "null"},
        {"window_size", "throughput_window_size", "100"},
        {"separator", nullptr, "/"}}},
      {ClassKind::kCallback, "Timer", "lightning.pytorch.callbacks", nullptr, nullptr,
       {{"duration", "max_time", "null"}, {"interval", nullptr, "step"}, {"verbose", nullptr, "true"}}},
      {ClassKind::kCallback, "TQDMProgressBar", "lightning.pytorch.callbacks", "enable_progress_bar", "true",
       {{"refresh_rate", nullptr, "1"}, {"process_position", nullptr, "0"}, {"leave", nullptr, "false"}}},
      // fit adds it with --on_exception_dirpath.
      {ClassKind::kCallback, "OnExceptionCheckpoint", "lightning.pytorch.callbacks", nullptr, nullptr,
       {{"dirpath", "on_exception_dirpath", nullptr}, {"filename", "on_exception_filename", "on_exception"}}},
      // Loggers (lightning.pytorch.loggers). save_dir is the trainer's default_root_dir (config_file.cc).
      {ClassKind::kLogger, "CSVLogger", "lightning.pytorch.loggers", "logger", "csv",
       {{"save_dir", nullptr, "null"},
        {"name", "log_name", "lightning_logs"},
        {"version", "log_version", "null"},
        {"prefix", nullptr, "''"},
        {"flush_logs_every_n_steps", nullptr, "100"}}},
      {ClassKind::kLogger, "TensorBoardLogger", "lightning.pytorch.loggers", "logger", "tensorboard",
       {{"save_dir", nullptr, "null"},
        {"name", "log_name", "lightning_logs"},
        {"version", "log_version", "null"},
        {"log_graph", nullptr, "false"},
        {"default_hp_metric", nullptr, "true"},
        {"prefix", nullptr, "''"},
        {"sub_dir", nullptr, "null"},
        {"comment", nullptr, "''"},
        {"purge_step", nullptr, "null"},
        {"max_queue", nullptr, "10"},
        {"flush_secs", nullptr, "120"},
        {"filename_suffix", nullptr, "''"},
        // The writer's own arguments, which LightningCLI lists too: torch.utils.tensorboard's SummaryWriter
        // (log_dir), or tensorboardX's where that is the writer installed. Read, not written: each is unknown
        // to a LightningCLI with the other writer.
        {"log_dir", nullptr, "null", nullptr, /*written=*/false},
        {"logdir", nullptr, "null", nullptr, /*written=*/false},
        {"write_to_disk", nullptr, "true", nullptr, /*written=*/false},
        {"comet_config", nullptr, "{disabled: true}", nullptr, /*written=*/false}}},
      // Lightning 2.6's MLFlowLogger: its save_dir is its own (the file store), not the trainer's default_root_dir. Its
      // tags are --mlflow_tags on the command line (a mapping here is not read yet: null only).
      {ClassKind::kLogger, "MLFlowLogger", "lightning.pytorch.loggers", "logger", "mlflow",
       {{"experiment_name", "mlflow_experiment_name", "lightning_logs"},
        {"run_name", "mlflow_run_name", "null"},
        {"tracking_uri", "mlflow_tracking_uri", "null"},
        {"tags", nullptr, "null"},
        {"save_dir", "mlflow_save_dir", "./mlruns"},
        {"log_model", "mlflow_log_model", "false"},
        {"prefix", "mlflow_prefix", "''"},
        {"artifact_location", "mlflow_artifact_location", "null"},
        {"run_id", "mlflow_run_id", "null"},
        {"synchronous", nullptr, "null"}}},
      // Lightning 2.6's WandbLogger: save_dir is its own (the run goes to <save_dir>/wandb), not the trainer's
      // default_root_dir. Kiln writes offline runs only (offline must be true, or $WANDB_MODE offline); wandb.init's
      // own arguments (Lightning's **kwargs: entity, group, tags, ...) are the library's (WandbLoggerOptions).
      {ClassKind::kLogger, "WandbLogger", "lightning.pytorch.loggers", "logger", "wandb",
       {{"name", "wandb_name", "null"},
        {"save_dir", "wandb_save_dir", "."},
        {"version", "wandb_version", "null"},
        {"offline", "wandb_offline", "false"},
        {"dir", "wandb_dir", "null"},
        {"id", "wandb_id", "null"},
        {"anonymous", nullptr, "null"},
        {"project", "wandb_project", "null"},
        {"log_model", "wandb_log_model", "false"},
        {"experiment", nullptr, "null"},
        {"prefix", "wandb_prefix", "''"},
        {"checkpoint_name", "wandb_checkpoint_name", "null"},
        {"add_file_policy", nullptr, "mutable"}}},
      // Strategies (lightning.pytorch.strategies), as a LightningCLI config names one under trainer.strategy, with
      // their init arguments in Lightning 2.6's order and defaults. What picks hardware or plugins is the trainer's
      // in Kiln (accelerator, devices, plugins), timeout is fit's --process_group_timeout, and DDP's
      // find_unused_parameters and FSDP's cpu_offload, when true, are the strategy names
      // ddp_find_unused_parameters_true and fsdp_cpu_offload (config_file.cc).
      {ClassKind::kStrategy, "DDPStrategy", "lightning.pytorch.strategies", "strategy", "ddp",
       {{"accelerator", nullptr, "null"},
        {"parallel_devices", nullptr, "null"},
        {"cluster_environment", nullptr, "null"},
        {"checkpoint_io", nullptr, "null"},
        {"precision_plugin", nullptr, "null"},
        {"ddp_comm_state", nullptr, "null"},
        {"ddp_comm_hook", nullptr, "null"},
        {"ddp_comm_wrapper", nullptr, "null"},
        {"model_averaging_period", nullptr, "null"},
        {"process_group_backend", "process_group_backend", "null"},
        {"timeout", nullptr, "0:30:00"},
        {"start_method", nullptr, "popen"}}},
      {ClassKind::kStrategy, "FSDPStrategy", "lightning.pytorch.strategies", "strategy", "fsdp",
       {{"accelerator", nullptr, "null"},
        {"parallel_devices", nullptr, "null"},
        {"cluster_environment", nullptr, "null"},
        {"checkpoint_io", nullptr, "null"},
        {"precision_plugin", nullptr, "null"},
        {"process_group_backend", "process_group_backend", "null"},
        {"timeout", nullptr, "0:30:00"},
        // fsdp's own: the flag each sets is its row's in trainer/strategies/fsdp_options.inc (nullptr: none).
        {"mixed_precision", FsdpOptionForInitArg("mixed_precision"), "null"},
        {"auto_wrap_policy", FsdpOptionForInitArg("auto_wrap_policy"), "null"},
        {"activation_checkpointing", FsdpOptionForInitArg("activation_checkpointing"), "null"},
        {"activation_checkpointing_policy", FsdpOptionForInitArg("activation_checkpointing_policy"), "null"},
        {"sharding_strategy", FsdpOptionForInitArg("sharding_strategy"), "FULL_SHARD"},
        {"state_dict_type", FsdpOptionForInitArg("state_dict_type"), "full"},
        {"device_mesh", FsdpOptionForInitArg("device_mesh"), "null"}}},
      // Lightning's ModelParallelStrategy: its init arguments are the trainer's rows of the same names.
      {ClassKind::kStrategy, "ModelParallelStrategy", "lightning.pytorch.strategies", "strategy", "model_parallel",
       {{"data_parallel_size", "data_parallel_size", "auto"},
        {"tensor_parallel_size", "tensor_parallel_size", "auto"},
        {"save_distributed_checkpoint", "save_distributed_checkpoint", "true"},
        {"process_group_backend", "process_group_backend", "null"},
        {"timeout", nullptr, "0:30:00"}}},
      // Profilers (lightning.pytorch.profilers), as a LightningCLI config names one under trainer.profiler. Kiln's
      // report every action (AdvancedProfiler: line_count_restriction 1.0) and the PyTorchProfiler's table every
      // operator (row_limit -1), which its trace holds by name, not by module (record_module_names false).
      {ClassKind::kProfiler, "SimpleProfiler", "lightning.pytorch.profilers", "profiler", "simple",
       {{"dirpath", "profiler_dirpath", "null"},
        {"filename", "profiler_filename", "null"},
        {"extended", nullptr, "true"}}},
      {ClassKind::kProfiler, "AdvancedProfiler", "lightning.pytorch.profilers", "profiler", "advanced",
       {{"dirpath", "profiler_dirpath", "null"},
        {"filename", "profiler_filename", "null"},
        {"line_count_restriction", nullptr, "1.0"},
        {"dump_stats", nullptr, "false"}}},
      {ClassKind::kProfiler, "PyTorchProfiler", "lightning.pytorch.profilers", "profiler", "pytorch",
       {{"dirpath", "profiler_dirpath", "null"},
        {"filename", "profiler_filename", "null"},
        {"group_by_input_shapes", nullptr, "false"},
        {"emit_nvtx", nullptr, "false"},
        {"export_to_chrome", nullptr, "true"},
        {"row_limit", nullptr, "20", "-1"},
        {"sort_by_key", nullptr, "null"},
        {"record_module_names", nullptr, "true", "false"},
        {"table_kwargs", nullptr, "null"}}},
  };
}

// A flow list's items: "[0.9, 0.999]" -> {"0.9", "0.999"}; anything else -> itself alone.
std::vector<std::string> Items(absl::string_view value) {
  absl::string_view inner = absl::StripAsciiWhitespace(value);
  if (!absl::ConsumePrefix(&inner, "[") || !absl::ConsumeSuffix(&inner, "]")) return {std::string(inner)};
  std::vector<std::string> items;
  for (absl::string_view item : absl::StrSplit(inner, ',', absl::SkipWhitespace())) {
    items.emplace_back(absl::StripAsciiWhitespace(item));
  }
  return items;
}

std::string Unquoted(absl::string_view text) {
  if (text.size() >= 2 && (text.front() == '\'' || text.front() == '"') && text.back() == text.front()) {
    return std::string(text.substr(1, text.size() - 2));
  }
  return std::string(text);
}

bool SameItem(absl::string_view a, absl::string_view b) {
  double x = 0;
  double y = 0;
  if (absl::SimpleAtod(a, &x) && absl::SimpleAtod(b, &y)) return x == y || (std::isnan(x) && std::isnan(y));
  const std::string left = Unquoted(a);
  const std::string right = Unquoted(b);
  const auto is_null = [](const std::string& s) { return s == "null" || s == "~" || s == "None"; };
  if (is_null(left) && is_null(right)) return true;
  const auto lower = [](const std::string& s) { return absl::AsciiStrToLower(s); };
  if ((lower(left) == "true" || lower(left) == "false") && lower(left) == lower(right)) return true;
  return left == right;
}

}  // namespace

const std::vector<LightningClass>& LightningClasses() {
  static const std::vector<LightningClass>* classes = new std::vector<LightningClass>(MakeClasses());
  return *classes;
}

const LightningClass* FindLightningClass(ClassKind kind, absl::string_view class_path) {
  const size_t dot = class_path.rfind('.');
  const absl::string_view bare = dot == absl::string_view::npos ? class_path : class_path.substr(dot + 1);
  for (const LightningClass& c : LightningClasses()) {
    if (c.kind != kind) continue;
    if (bare == c.name || (c.value != nullptr && c.flag != nullptr && kind != ClassKind::kCallback &&
                           class_path == c.value)) {
      return &c;
    }
  }
  return nullptr;
}

const LightningClass* LightningClassOfValue(ClassKind kind, absl::string_view value) {
  for (const LightningClass& c : LightningClasses()) {
    if (c.kind == kind && c.value != nullptr && value == c.value) return &c;
  }
  return nullptr;
}

std::string LightningClassNames(ClassKind kind) {
  std::vector<std::string> names;
  for (const LightningClass& c : LightningClasses()) {
    if (c.kind == kind) names.emplace_back(c.name);
  }
  return absl::StrJoin(names, ", ");
}

const std::vector<DefaultOnlyKey>& DefaultOnlyKeys() {
  static const std::vector<DefaultOnlyKey>* keys = new std::vector<DefaultOnlyKey>{
      {Section::kTrainer, "min_steps", "null", "fit has no minimum step count; use min_epochs"},
      {Section::kTrainer, "benchmark", "null", "LibTorch's cuDNN autotuner stays as the device's default"},
      {Section::kTrainer, "inference_mode", "true", "evaluation always runs under LibTorch's inference mode"},
      {Section::kTrainer, "use_distributed_sampler", "true", "fit's loaders always shard their data across ranks"},
      {Section::kTrainer, "detect_anomaly", "false", "LibTorch's anomaly mode is not offered"},
      {Section::kTrainer, "barebones", "false", "fit has no barebones mode; turn off its loggers, bar and summary"},
      {Section::kTrainer, "plugins", "null", "precision and devices are fit's own flags (--precision, --accelerator)"},
      {Section::kTrainer, "reload_dataloaders_every_n_epochs", "0", "fit's loaders are built once"},
      {Section::kTrainer, "enable_autolog_hparams", "true", "the loggers always get the model's hyper-parameters"},
      {Section::kTrainer, "model_registry", "null", "Kiln uploads nothing"},
      {Section::kTop, "weights_only", "null", "Kiln's checkpoint reader runs no code from a file in any case"},
  };
  return *keys;
}

std::string SeedEverything(absl::string_view value, bool* drawn) {
  const std::string lower = absl::AsciiStrToLower(value);
  *drawn = lower == "true" || lower == "false";
  return *drawn ? absl::StrCat(std::random_device{}()) : std::string(value);
}

bool SameYamlValue(absl::string_view value, absl::string_view expected) {
  const std::vector<std::string> a = Items(value);
  const std::vector<std::string> b = Items(expected);
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!SameItem(a[i], b[i])) return false;
  }
  return true;
}

}  // namespace kiln
