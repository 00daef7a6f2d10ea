#include "trainer/cli/fit_config.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <utility>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "trainer/cli/flags.h"
#include "trainer/io/http_client.h"
#include "trainer/io/memory_budget.h"
#include "trainer/trainer_options.h"

namespace kiln {
namespace {

// Comma-separated integers in [1, kMaxLayerSize]; `expected` > 0 asks for exactly that many.
absl::StatusOr<std::vector<int64_t>> ParseSizes(absl::string_view flag, const std::string& value,
                                                absl::string_view accepted, size_t expected = 0,
                                                bool allow_empty = true) {
  std::vector<int64_t> sizes;
  for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
    int64_t size = 0;
    if (!absl::SimpleAtoi(part, &size) || size <= 0 || size > kMaxLayerSize) {
      return FlagError(flag, value, absl::StrCat(accepted, " (each at most ", kMaxLayerSize, ")"));
    }
    sizes.push_back(size);
  }
  if ((expected > 0 && !sizes.empty() && sizes.size() != expected) || (!allow_empty && sizes.empty())) {
    return FlagError(flag, value, accepted);
  }
  return sizes;
}

absl::Status AtLeast(absl::string_view flag, int64_t value, int64_t minimum, absl::string_view meaning = "") {
  if (value >= minimum) return absl::OkStatus();
  return FlagError(flag, absl::StrCat(value), absl::StrCat("pass an int >= ", minimum, meaning));
}

bool IsPath(absl::string_view value) { return absl::StrContains(value, '/') || absl::StrContains(value, '.'); }

// --name in (lo, hi] or [lo, hi] as `open_low` says, and finite.
absl::Status InRange(absl::string_view flag, double value, double lo, double hi, bool open_low,
                     absl::string_view accepted) {
  const bool ok = std::isfinite(value) && (open_low ? value > lo : value >= lo) && value <= hi;
  return ok ? absl::OkStatus() : FlagError(flag, absl::StrCat(value), accepted);
}

constexpr double kNoLimit = std::numeric_limits<double>::max();

// A timedelta as LightningCLI reads and writes one (jsonargparse: "H:M:S", "D day(s), H:M:S"; seconds may have a
// fraction), or an Abseil duration (90s, 30m); >= 0, below 10^9 days.
std::optional<absl::Duration> ParseTimedelta(const std::string& value) {
  absl::string_view text = value;
  absl::Duration days = absl::ZeroDuration();
  if (const size_t day = text.find(" day"); day != absl::string_view::npos) {
    int64_t count = 0;
    const size_t comma = text.find(", ", day);
    if (!absl::SimpleAtoi(text.substr(0, day), &count) || count < 0 || count >= 1000000000 ||
        comma == absl::string_view::npos) {
      return std::nullopt;
    }
    days = absl::Hours(24 * count);
    text = text.substr(comma + 2);
  }
  if (!absl::StrContains(text, ':')) {
    absl::Duration duration;
    if (days != absl::ZeroDuration() || !absl::ParseDuration(text, &duration) || duration < absl::ZeroDuration() ||
        duration == absl::InfiniteDuration()) {
      return std::nullopt;
    }
    return duration;
  }
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  int64_t hours = 0;
  int64_t minutes = 0;
  double seconds = 0;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &hours) || !absl::SimpleAtoi(parts[1], &minutes) ||
      !absl::SimpleAtod(parts[2], &seconds) || hours < 0 || minutes < 0 || !(seconds >= 0) || hours >= 1000000000 ||
      minutes >= 1000000000 || seconds >= 1e12) {
    return std::nullopt;
  }
  return days + absl::Hours(hours) + absl::Minutes(minutes) + absl::Seconds(seconds);
}

// The scheduler's name, interval, frequency, monitor, warm-up, and the step and cosine schedules' settings.
absl::Status SchedulerBasicsFromFlags(LRSchedulerOptions& s) {
  s.name = absl::GetFlag(FLAGS_lr_scheduler);
  if (s.name != "none" && s.name != "step" && s.name != "cosine" && s.name != "plateau" && s.name != "onecycle") {
    return FlagError("lr_scheduler", s.name, "pass none, step, cosine, plateau or onecycle");
  }
  const std::string interval = absl::GetFlag(FLAGS_lr_scheduler_interval);
  if (interval != "epoch" && interval != "step") {
    return FlagError("lr_scheduler_interval", interval, "pass epoch or step");
  }
  s.interval = interval == "step" ? SchedulerConfig::Interval::kStep : SchedulerConfig::Interval::kEpoch;
  s.frequency = absl::GetFlag(FLAGS_lr_scheduler_frequency);
  if (absl::Status st = AtLeast("lr_scheduler_frequency", s.frequency, 1); !st.ok()) return st;
  s.monitor = absl::GetFlag(FLAGS_lr_scheduler_monitor);
  if (s.name == "plateau" && s.monitor.empty()) {
    return FlagError("lr_scheduler_monitor", s.monitor, "pass the logged metric the plateau watches, e.g. val_loss");
  }
  s.warmup_iters = absl::GetFlag(FLAGS_warmup_iters);
  if (absl::Status st = AtLeast("warmup_iters", s.warmup_iters, 0, " (0: no warm-up)"); !st.ok()) return st;
  if (s.warmup_iters > 0 && s.name == "onecycle") {
    return FlagError("warmup_iters", absl::StrCat(s.warmup_iters),
                     "OneCycleLR warms up by itself: pass --warmup_iters=0 and set its warm-up share with --pct_start");
  }
  s.warmup_start_factor = absl::GetFlag(FLAGS_warmup_start_factor);
  if (absl::Status st = InRange("warmup_start_factor", s.warmup_start_factor, 0, 1, true, "pass a value in (0, 1]");
      !st.ok()) {
    return st;
  }
  s.step_size = absl::GetFlag(FLAGS_step_size);
  if (absl::Status st = AtLeast("step_size", s.step_size, 1); !st.ok()) return st;
  s.gamma = absl::GetFlag(FLAGS_gamma);
  if (absl::Status st = InRange("gamma", s.gamma, 0, kNoLimit, true, "pass a value > 0, e.g. 0.1"); !st.ok()) {
    return st;
  }
  s.T_max = absl::GetFlag(FLAGS_T_max);
  if (absl::Status st = AtLeast("T_max", s.T_max, 0, " (0: the run's length)"); !st.ok()) return st;
  s.eta_min = absl::GetFlag(FLAGS_eta_min);
  if (absl::Status st = InRange("eta_min", s.eta_min, 0, kNoLimit, false, "pass a value >= 0"); !st.ok()) return st;
  return absl::OkStatus();
}

// OneCycleLR's settings.
absl::Status OneCycleFromFlags(OneCycleLROptions& o) {
  o.max_lr = absl::GetFlag(FLAGS_max_lr);
  if (absl::Status st = InRange("max_lr", o.max_lr, 0, kNoLimit, false, "pass a value > 0 (0: --learning_rate)");
      !st.ok()) {
    return st;
  }
  o.total_steps = absl::GetFlag(FLAGS_total_steps);
  if (absl::Status st = AtLeast("total_steps", o.total_steps, 0, " (0: the run's length)"); !st.ok()) return st;
  o.pct_start = absl::GetFlag(FLAGS_pct_start);
  if (absl::Status st = InRange("pct_start", o.pct_start, 0, 1, false, "pass a value in [0, 1], e.g. 0.3"); !st.ok()) {
    return st;
  }
  o.anneal_strategy = absl::GetFlag(FLAGS_anneal_strategy);
  if (o.anneal_strategy != "cos" && o.anneal_strategy != "linear") {
    return FlagError("anneal_strategy", o.anneal_strategy, "pass cos or linear");
  }
  o.div_factor = absl::GetFlag(FLAGS_div_factor);
  if (absl::Status st = InRange("div_factor", o.div_factor, 0, kNoLimit, true, "pass a value > 0, e.g. 25"); !st.ok()) {
    return st;
  }
  o.final_div_factor = absl::GetFlag(FLAGS_final_div_factor);
  if (absl::Status st =
          InRange("final_div_factor", o.final_div_factor, 0, kNoLimit, true, "pass a value > 0, e.g. 1e4");
      !st.ok()) {
    return st;
  }
  o.three_phase = absl::GetFlag(FLAGS_three_phase);
  return absl::OkStatus();
}

// ReduceLROnPlateau's settings (the plateau_* flags).
absl::Status PlateauFromFlags(ReduceLROnPlateauOptions& p) {
  p.mode = absl::GetFlag(FLAGS_plateau_mode);
  if (p.mode != "min" && p.mode != "max") return FlagError("plateau_mode", p.mode, "pass min or max");
  p.factor = absl::GetFlag(FLAGS_plateau_factor);
  if (!(p.factor > 0 && p.factor < 1)) {
    return FlagError("plateau_factor", absl::StrCat(p.factor), "pass a value in (0, 1), e.g. 0.1");
  }
  p.patience = absl::GetFlag(FLAGS_plateau_patience);
  if (absl::Status st = AtLeast("plateau_patience", p.patience, 0); !st.ok()) return st;
  p.threshold = absl::GetFlag(FLAGS_plateau_threshold);
  if (absl::Status st = InRange("plateau_threshold", p.threshold, 0, kNoLimit, false, "pass a value >= 0, e.g. 1e-4");
      !st.ok()) {
    return st;
  }
  p.threshold_mode = absl::GetFlag(FLAGS_plateau_threshold_mode);
  if (p.threshold_mode != "rel" && p.threshold_mode != "abs") {
    return FlagError("plateau_threshold_mode", p.threshold_mode, "pass rel or abs");
  }
  p.cooldown = absl::GetFlag(FLAGS_plateau_cooldown);
  if (absl::Status st = AtLeast("plateau_cooldown", p.cooldown, 0); !st.ok()) return st;
  p.min_lr = absl::GetFlag(FLAGS_min_lr);
  if (absl::Status st = InRange("min_lr", p.min_lr, 0, kNoLimit, false, "pass a value >= 0"); !st.ok()) return st;
  return absl::OkStatus();
}

// The --lr_scheduler flags (scheduler_flags.cc). `max_epochs` (-1: none) fills an epoch schedule's length.
absl::StatusOr<LRSchedulerOptions> SchedulerFromFlags(int64_t max_epochs) {
  LRSchedulerOptions s;
  if (absl::Status st = SchedulerBasicsFromFlags(s); !st.ok()) return st;
  if (absl::Status st = OneCycleFromFlags(s.one_cycle); !st.ok()) return st;
  if (absl::Status st = PlateauFromFlags(s.plateau); !st.ok()) return st;
  OneCycleLROptions& o = s.one_cycle;
  // A schedule over epochs spans --max_epochs unless its length is given; over steps, the trainer's estimate.
  if (s.interval == SchedulerConfig::Interval::kEpoch && (s.name == "cosine" || s.name == "onecycle")) {
    const bool cosine = s.name == "cosine";
    int64_t& length = cosine ? s.T_max : o.total_steps;
    if (length == 0) {
      if (max_epochs < 0) {
        return FlagError(cosine ? "T_max" : "total_steps", "0",
                         "the run has no epoch limit (--max_epochs=-1) to span; pass its length in epochs");
      }
      length = cosine ? max_epochs - s.warmup_iters : max_epochs;
      if (length < 1) {
        return FlagError("warmup_iters", absl::StrCat(s.warmup_iters),
                         absl::StrCat("the warm-up leaves none of the ", max_epochs,
                                      " epochs (--max_epochs) to the cosine; pass fewer, or --T_max"));
      }
    }
  }
  // So that MakeLRSchedulers checks an epoch schedule's rates over the whole run (the trainer's estimate is in steps).
  if (s.interval == SchedulerConfig::Interval::kEpoch && max_epochs > 0) s.run_epochs = max_epochs;
  return s;
}

}  // namespace

absl::Status FlagError(absl::string_view flag, absl::string_view value, absl::string_view accepted) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, "='", value, "' is not valid; ", accepted));
}

absl::Status TrainerOptionsFromFlags(TrainerOptions& options) {
#define KILN_TRAINER_OPTION(group, type, name, fit_default, section, key, help)        \
  if (OptionCheck refused = SetTrainerOption_##name(options, absl::GetFlag(FLAGS_##name))) { \
    return FlagError(#name, refused->value, refused->accepted);                          \
  }                                                                                      \
  if (OptionCheck refused = CheckTrainerOption_##name(options)) {                        \
    return FlagError(#name, refused->value, refused->accepted);                          \
  }
#include "trainer/trainer_options.inc"
  return absl::OkStatus();
}

absl::Status ApplyInputLimitFlags() {
  const int64_t mib = absl::GetFlag(FLAGS_max_inflated_mib);
  if (mib < 1 || mib > kMaxInflatedMib) {
    return FlagError("max_inflated_mib", absl::StrCat(mib),
                     absl::StrCat("pass a number of MiB in [1, ", kMaxInflatedMib, "] (default 1024: 1 GiB)"));
  }
  SetMaxInflatedBytes(static_cast<uint64_t>(mib) << 20);
  return absl::OkStatus();
}

namespace {

// --mode, --ckpt_path and --predict_data, which must fit the mode.
absl::Status ModeFromFlags(FitConfig& config) {
  config.mode = absl::GetFlag(FLAGS_mode);
  if (config.mode != "fit" && config.mode != "validate" && config.mode != "test" && config.mode != "predict") {
    return FlagError("mode", config.mode, "pass fit, validate, test or predict");
  }
  config.ckpt_path = absl::GetFlag(FLAGS_ckpt_path);
  if (config.ckpt_path != "last" && config.ckpt_path != "best") config.ckpt_path = UserPath(config.ckpt_path);
  if (config.mode != "fit" && config.ckpt_path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--mode=", config.mode,
                                                   " needs --ckpt_path: a .ckpt file, or "
                                                   "\"last\" for the newest checkpoint under --default_root_dir"));
  }
  if (config.mode != "fit" && config.ckpt_path == "best") {
    return FlagError(
        "ckpt_path", "best",
        absl::StrCat("\"best\" only exists during fit; with --mode=", config.mode, " pass a .ckpt path or \"last\""));
  }
  if (const std::string predict_data = absl::GetFlag(FLAGS_predict_data);
      !predict_data.empty() && config.mode != "predict") {
    return FlagError("predict_data", predict_data,
                     "it is only read with --mode=predict; drop it or add --mode=predict");
  }
  return absl::OkStatus();
}

// The data flags; `seed` is --seed (the data's split and shuffling).
absl::Status DataFromFlags(uint64_t seed, DataSpec& data) {
  data.data = absl::GetFlag(FLAGS_data);
  if (data.data != "synthetic" && data.data != "digits") {
    if (!IsPath(data.data)) {
      return FlagError("data", data.data, "pass synthetic, digits, or the path of a CSV file (.csv or .csv.gz)");
    }
    data.data = UserPath(data.data);
  }
  absl::StatusOr<Task> task = ParseTask(absl::GetFlag(FLAGS_task));
  if (!task.ok()) return FlagError("task", absl::GetFlag(FLAGS_task), "pass classification or regression");
  data.task = *task;
  if (data.task == Task::kRegression && (data.data == "synthetic" || data.data == "digits")) {
    return FlagError("task", "regression",
                     absl::StrCat("--data=", data.data,
                                  " is a classification task; "
                                  "regression needs a CSV file with numeric labels"));
  }
  data.label_column = absl::GetFlag(FLAGS_label_column);
  if (data.label_column.empty()) return FlagError("label_column", "", "pass a header name or a column index");
  data.val_fraction = absl::GetFlag(FLAGS_val_fraction);
  if (!(data.val_fraction >= 0.0 && data.val_fraction < 1.0)) {
    return FlagError("val_fraction", absl::StrCat(data.val_fraction), "pass a fraction in [0.0, 1.0), e.g. 0.2");
  }
  data.batch_size = absl::GetFlag(FLAGS_batch_size);
  if (absl::Status s = AtLeast("batch_size", data.batch_size, 1); !s.ok()) return s;
  data.shuffle = absl::GetFlag(FLAGS_shuffle);
  data.normalize = absl::GetFlag(FLAGS_normalize);
  data.streaming = absl::GetFlag(FLAGS_streaming);
  data.val_data = UserPath(absl::GetFlag(FLAGS_val_data));
  if (data.streaming && (data.data == "synthetic" || data.data == "digits")) {
    return FlagError("streaming", "true", absl::StrCat("--data=", data.data, " is in memory already; --streaming reads "
                                                       "a CSV file (--data=PATH.csv)"));
  }
  if (!data.val_data.empty() && !data.streaming) {
    return FlagError("val_data", data.val_data, "it is read with --streaming only (without it, --val_fraction of "
                                                "--data's rows are the validation rows); pass --streaming or drop it");
  }
  data.num_workers = absl::GetFlag(FLAGS_num_workers);
  if (data.num_workers < 0 || data.num_workers > kMaxNumWorkers) {
    return FlagError("num_workers", absl::StrCat(data.num_workers),
                     absl::StrCat("pass an int in [0, ", kMaxNumWorkers, "] (0: no background threads)"));
  }
  data.seed = seed;
  data.digits_path = UserPath(absl::GetFlag(FLAGS_digits_path));
  data.predict_data = UserPath(absl::GetFlag(FLAGS_predict_data));
  SyntheticOptions& synthetic = data.synthetic;
  synthetic.num_features = absl::GetFlag(FLAGS_num_features);
  synthetic.num_classes = absl::GetFlag(FLAGS_num_classes);
  synthetic.num_train = absl::GetFlag(FLAGS_num_train);
  synthetic.num_val = absl::GetFlag(FLAGS_num_val);
  synthetic.batch_size = data.batch_size;
  synthetic.seed = data.seed;
  synthetic.shuffle = data.shuffle;
  if (absl::Status s = AtLeast("num_features", synthetic.num_features, 1); !s.ok()) return s;
  if (absl::Status s = AtLeast("num_classes", synthetic.num_classes, 2); !s.ok()) return s;
  if (absl::Status s = AtLeast("num_train", synthetic.num_train, 1); !s.ok()) return s;
  if (absl::Status s = AtLeast("num_val", synthetic.num_val, 1); !s.ok()) return s;
  return absl::OkStatus();
}

// The model flags and its learning-rate schedule; `max_epochs` (-1: none) is the run's.
absl::Status ModelFromFlags(int64_t max_epochs, ModelSpec& model) {
  model.model = absl::GetFlag(FLAGS_model);
  if (model.model != "mlp" && model.model != "cnn") {
    if (!IsPath(model.model)) {
      return FlagError("model", model.model,
                       "pass mlp, cnn, or the path of a TorchScript module (e.g. model.pt, saved with "
                       "torch.jit.script(model).save(path))");
    }
    model.model = UserPath(model.model);
  }
  absl::StatusOr<std::vector<int64_t>> hidden = ParseSizes(
      "hidden_sizes", absl::GetFlag(FLAGS_hidden_sizes), "pass positive layer widths separated by commas, e.g. 64,64");
  if (!hidden.ok()) return hidden.status();
  model.hidden_sizes = *hidden;
  absl::StatusOr<std::vector<int64_t>> channels =
      ParseSizes("channels", absl::GetFlag(FLAGS_channels),
                 "pass positive channel counts separated by commas, e.g. 16,32", 0, /*allow_empty=*/false);
  if (!channels.ok()) return channels.status();
  model.channels = *channels;
  model.kernel_size = absl::GetFlag(FLAGS_kernel_size);
  if (model.kernel_size < 1 || model.kernel_size % 2 == 0) {
    return FlagError("kernel_size", absl::StrCat(model.kernel_size), "pass an odd int >= 1, e.g. 3 or 5");
  }
  absl::StatusOr<std::vector<int64_t>> shape =
      ParseSizes("input_shape", absl::GetFlag(FLAGS_input_shape),
                 "pass three positive sizes C,H,W (channels, height, width), e.g. 1,8,8", 3);
  if (!shape.ok()) return shape.status();
  model.input_shape = *shape;
  model.optimizer = absl::GetFlag(FLAGS_optimizer);
  if (model.optimizer != "adam" && model.optimizer != "adamw" && model.optimizer != "sgd") {
    return FlagError("optimizer", model.optimizer, "pass adam, adamw or sgd (or Adam, AdamW, SGD)");
  }
  model.momentum = absl::GetFlag(FLAGS_momentum);
  if (!(model.momentum >= 0 && model.momentum < 1)) {
    return FlagError("momentum", absl::StrCat(model.momentum), "pass a value in [0, 1), e.g. 0.9");
  }
  const double weight_decay = absl::GetFlag(FLAGS_weight_decay);
  if (weight_decay != -1) {
    if (!(weight_decay >= 0 && weight_decay <= std::numeric_limits<float>::max())) {
      return FlagError("weight_decay", absl::StrCat(weight_decay), "pass a value >= 0, or -1 for PyTorch's default");
    }
    model.weight_decay = weight_decay;
  }
  model.fused_optimizer = absl::GetFlag(FLAGS_fused_optimizer);
  model.learning_rate = absl::GetFlag(FLAGS_learning_rate);
  // Parameters are float32 and so are the rates the optimizers apply: a rate past float32's range is infinite there.
  if (!(model.learning_rate > 0) || !(model.learning_rate <= std::numeric_limits<float>::max())) {
    return FlagError("learning_rate", absl::StrCat(model.learning_rate),
                     "pass a value > 0 within float32's range (at most 3.4e38), e.g. 0.001");
  }
  absl::StatusOr<LRSchedulerOptions> lr_scheduler = SchedulerFromFlags(max_epochs);
  if (!lr_scheduler.ok()) return lr_scheduler.status();
  model.lr_scheduler = *std::move(lr_scheduler);
  return absl::OkStatus();
}

constexpr absl::string_view kLoggersAccepted =
    "pass csv, tensorboard, mlflow, wandb, or several of them comma-separated (csv,tensorboard), or none";

// The --mlflow_* flags: MLFlowLogger's arguments, checked where fit can (the tracking URI's form, log_model, tags).
absl::Status MLFlowFromFlags(MLFlowLoggerOptions& mlflow) {
  mlflow.experiment_name = absl::GetFlag(FLAGS_mlflow_experiment_name);
  if (mlflow.experiment_name.empty()) {
    return FlagError("mlflow_experiment_name", "", "pass a name, e.g. lightning_logs (Lightning's default)");
  }
  if (const std::string name = absl::GetFlag(FLAGS_mlflow_run_name); !name.empty()) mlflow.run_name = name;
  if (const std::string uri = absl::GetFlag(FLAGS_mlflow_tracking_uri); !uri.empty()) {
    if (absl::StartsWith(uri, "file:")) {
      mlflow.tracking_uri = absl::StrCat("file:", UserPath(uri.substr(5)));
    } else if (absl::StatusOr<HttpUrl> url = ParseHttpUrl(uri); url.ok()) {
      mlflow.tracking_uri = uri;
    } else {
      return FlagError(
          "mlflow_tracking_uri", uri,
          absl::StrCat("pass http://host:port (an MLflow tracking server) or file:<folder>: ", url.status().message()));
    }
  }
  for (absl::string_view tag : absl::StrSplit(absl::GetFlag(FLAGS_mlflow_tags), ',', absl::SkipWhitespace())) {
    const size_t equals = tag.find('=');
    if (equals == absl::string_view::npos || equals == 0) {
      return FlagError("mlflow_tags", absl::GetFlag(FLAGS_mlflow_tags),
                       "pass key=value pairs, e.g. team=vision,env=ci");
    }
    mlflow.tags[std::string(tag.substr(0, equals))] = std::string(tag.substr(equals + 1));
  }
  mlflow.save_dir = UserPath(absl::GetFlag(FLAGS_mlflow_save_dir));
  absl::StatusOr<LogModel> log_model = ParseLogModel(absl::GetFlag(FLAGS_mlflow_log_model));
  if (!log_model.ok()) {
    return FlagError("mlflow_log_model", absl::GetFlag(FLAGS_mlflow_log_model), "pass false, true or all");
  }
  mlflow.log_model = *log_model;
  mlflow.prefix = absl::GetFlag(FLAGS_mlflow_prefix);
  if (const std::string where = absl::GetFlag(FLAGS_mlflow_artifact_location); !where.empty()) {
    mlflow.artifact_location = where;
  }
  if (const std::string id = absl::GetFlag(FLAGS_mlflow_run_id); !id.empty()) mlflow.run_id = id;
  return absl::OkStatus();
}

// The --wandb_* flags: WandbLogger's arguments. `used`: --logger names wandb (offline and the names are checked
// then; log_model always).
absl::Status WandbFromFlags(WandbLoggerOptions& wandb, bool used) {
  const auto optional = [](const std::string& value) {
    return value.empty() ? std::nullopt : std::optional<std::string>(value);
  };
  wandb.name = optional(absl::GetFlag(FLAGS_wandb_name));
  wandb.save_dir = absl::GetFlag(FLAGS_wandb_save_dir).empty() ? "" : UserPath(absl::GetFlag(FLAGS_wandb_save_dir));
  wandb.version = optional(absl::GetFlag(FLAGS_wandb_version));
  wandb.offline = absl::GetFlag(FLAGS_wandb_offline);
  if (const std::string dir = absl::GetFlag(FLAGS_wandb_dir); !dir.empty()) wandb.dir = UserPath(dir);
  wandb.id = optional(absl::GetFlag(FLAGS_wandb_id));
  wandb.project = optional(absl::GetFlag(FLAGS_wandb_project));
  absl::StatusOr<LogModel> log_model = ParseLogModel(absl::GetFlag(FLAGS_wandb_log_model));
  if (!log_model.ok()) {
    return FlagError("wandb_log_model", absl::GetFlag(FLAGS_wandb_log_model), "pass false, true or all");
  }
  wandb.log_model = *log_model;
  wandb.prefix = absl::GetFlag(FLAGS_wandb_prefix);
  wandb.checkpoint_name = optional(absl::GetFlag(FLAGS_wandb_checkpoint_name));
  if (!used) return absl::OkStatus();
  if (absl::Status checked = CheckWandbLoggerOptions(wandb); !checked.ok()) {
    // The same refusal, in the flags' words.
    if (!wandb.offline && absl::StrContains(checked.message(), "offline=False")) {
      return FlagError("wandb_offline", "false",
                       absl::StrCat("Kiln writes offline W&B runs only (it opens no connection to W&B's servers): "
                                    "pass --wandb_offline=true (or set WANDB_MODE=offline), and upload the run "
                                    "afterwards with `wandb sync ",
                                    (std::filesystem::path(wandb.save_dir.empty() ? wandb.dir.value_or(".")
                                                                                  : wandb.save_dir) /
                                     "wandb")
                                        .string(),
                                    "/offline-run-<time>-<id>`"));
    }
    for (const auto& [flag, value] : {std::pair{"wandb_version", wandb.version}, std::pair{"wandb_id", wandb.id},
                                      std::pair{"wandb_project", wandb.project},
                                      std::pair{"wandb_checkpoint_name", wandb.checkpoint_name}}) {
      if (value.has_value() && absl::StrContains(checked.message(), absl::StrCat("'", *value, "'"))) {
        return FlagError(flag, *value, checked.message());
      }
    }
    return checked;
  }
  return absl::OkStatus();
}

// The loggers, the report, the summary, predictions and the callbacks' flags; `root` is --default_root_dir.
absl::Status OutputsFromFlags(const std::string& root, OutputSpec& outputs) {
  const std::string loggers = absl::GetFlag(FLAGS_logger);
  for (absl::string_view logger : absl::StrSplit(loggers, ',', absl::SkipWhitespace())) {
    if (logger == "none" && loggers == "none") break;
    if (logger != "csv" && logger != "tensorboard" && logger != "mlflow" && logger != "wandb") {
      return FlagError("logger", loggers, kLoggersAccepted);
    }
    if (std::find(outputs.loggers.begin(), outputs.loggers.end(), logger) == outputs.loggers.end()) {
      outputs.loggers.emplace_back(logger);
    }
  }
  if (outputs.loggers.empty() && loggers != "none") {
    return FlagError("logger", loggers, kLoggersAccepted);
  }
  if (absl::Status mlflow = MLFlowFromFlags(outputs.mlflow); !mlflow.ok()) return mlflow;
  const bool wandb = std::find(outputs.loggers.begin(), outputs.loggers.end(), "wandb") != outputs.loggers.end();
  if (absl::Status s = WandbFromFlags(outputs.wandb, wandb); !s.ok()) return s;
  outputs.log_dir.save_dir = root;
  outputs.log_dir.name = absl::GetFlag(FLAGS_log_name);
  if (absl::StrContains(outputs.log_dir.name, '/') || outputs.log_dir.name == "." || outputs.log_dir.name == "..") {
    return FlagError("log_name", outputs.log_dir.name, "pass a folder name without '/', e.g. lightning_logs");
  }
  const int64_t version = absl::GetFlag(FLAGS_log_version);
  if (absl::Status s = AtLeast("log_version", version, -1, " (-1: the next free version)"); !s.ok()) return s;
  if (version >= 0) outputs.log_dir.version = version;
  outputs.report = absl::GetFlag(FLAGS_report);
  outputs.save_config_overwrite = absl::GetFlag(FLAGS_save_config_overwrite);
  outputs.summary_json = UserPath(absl::GetFlag(FLAGS_summary_json));
  outputs.predictions = absl::GetFlag(FLAGS_predictions).empty()
                            ? absl::StrCat(root, "/predictions.csv")
                            : UserPath(absl::GetFlag(FLAGS_predictions));
  ModelCheckpointOptions& checkpoint = outputs.checkpoint;
  checkpoint.every_n_train_steps = absl::GetFlag(FLAGS_every_n_train_steps);
  if (absl::Status s = AtLeast("every_n_train_steps", checkpoint.every_n_train_steps, 0, " (0: only at epoch ends)");
      !s.ok()) {
    return s;
  }
  checkpoint.save_last = absl::GetFlag(FLAGS_save_last);
  if (const std::string monitor = absl::GetFlag(FLAGS_checkpoint_monitor); !monitor.empty()) {
    checkpoint.monitor = monitor;
  }
  checkpoint.mode = absl::GetFlag(FLAGS_checkpoint_mode);
  if (checkpoint.mode != "min" && checkpoint.mode != "max") {
    return FlagError("checkpoint_mode", checkpoint.mode, "pass min or max");
  }
  checkpoint.save_top_k = absl::GetFlag(FLAGS_save_top_k);
  if (absl::Status s = AtLeast("save_top_k", checkpoint.save_top_k, -1, " (-1: all, 0: none)"); !s.ok()) return s;
  checkpoint.filename = absl::GetFlag(FLAGS_checkpoint_filename);
  checkpoint.every_n_epochs = absl::GetFlag(FLAGS_every_n_epochs);
  if (absl::Status s = AtLeast("every_n_epochs", *checkpoint.every_n_epochs, 0, " (0: never at epoch ends)"); !s.ok()) {
    return s;
  }
  checkpoint.save_weights_only = absl::GetFlag(FLAGS_save_weights_only);
  checkpoint.enable_version_counter = absl::GetFlag(FLAGS_enable_version_counter);
  if (const std::string interval = absl::GetFlag(FLAGS_train_time_interval); !interval.empty()) {
    std::optional<absl::Duration> parsed = ParseTimedelta(interval);
    if (!parsed.has_value()) {
      return FlagError("train_time_interval", interval,
                       "pass H:MM:SS (\"0:30:00\"), \"D days, H:MM:SS\", or a duration such as 90s or 30m; empty: off");
    }
    checkpoint.train_time_interval = *parsed;
  }
  if (const std::string on_end = absl::GetFlag(FLAGS_save_on_train_epoch_end); !on_end.empty()) {
    if (on_end != "true" && on_end != "false") {
      return FlagError("save_on_train_epoch_end", on_end, "pass true, false, or empty for Lightning's choice");
    }
    checkpoint.save_on_train_epoch_end = on_end == "true";
  }
  if (checkpoint.train_time_interval.has_value()) {
    // Lightning's every_n_epochs left unset beside a time interval is 0 (fit's default, 1, is taken as unset);
    // another value is refused below, as the triggers are exclusive.
    const absl::CommandLineFlag* epochs = absl::FindCommandLineFlag("every_n_epochs");
    if (epochs == nullptr || epochs->CurrentValue() == epochs->DefaultValue()) checkpoint.every_n_epochs = 0;
    if (checkpoint.every_n_train_steps > 0 || *checkpoint.every_n_epochs > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--train_time_interval=", absl::GetFlag(FLAGS_train_time_interval), " with --every_n_train_steps=",
          checkpoint.every_n_train_steps, " and --every_n_epochs=", *checkpoint.every_n_epochs,
          ": Lightning's ModelCheckpoint takes one of the three triggers; pass --every_n_train_steps=0 and "
          "--every_n_epochs=0 with --train_time_interval, or leave it empty"));
    }
  }
  if (const std::string dirpath = absl::GetFlag(FLAGS_on_exception_dirpath); !dirpath.empty()) {
    const std::string filename = absl::GetFlag(FLAGS_on_exception_filename);
    if (filename.empty() || absl::StrContains(filename, '/')) {
      return FlagError("on_exception_filename", filename, "pass a file name without '/' or the extension, e.g. "
                       "on_exception (the default)");
    }
    outputs.on_exception = OnExceptionCheckpointOptions{.dirpath = UserPath(dirpath), .filename = filename};
  }
  if (const std::string monitor = absl::GetFlag(FLAGS_early_stopping_monitor); !monitor.empty()) {
    EarlyStoppingOptions early_stopping{.monitor = monitor,
                                        .min_delta = absl::GetFlag(FLAGS_min_delta),
                                        .patience = absl::GetFlag(FLAGS_patience),
                                        .mode = absl::GetFlag(FLAGS_early_stopping_mode)};
    if (early_stopping.mode != "min" && early_stopping.mode != "max") {
      return FlagError("early_stopping_mode", early_stopping.mode, "pass min or max");
    }
    if (absl::Status s = AtLeast("patience", early_stopping.patience, 0); !s.ok()) return s;
    if (!(early_stopping.min_delta >= 0)) {
      return FlagError("min_delta", absl::StrCat(early_stopping.min_delta), "pass a value >= 0");
    }
    outputs.early_stopping = early_stopping;
  }
  return absl::OkStatus();
}

// Whether the flag `name` was given a value other than its default.
bool Changed(const char* name) {
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  return flag != nullptr && flag->CurrentValue() != flag->DefaultValue();
}

// A flag that tunes a callback which is off: refused rather than ignored.
absl::Status OnlyWith(const std::vector<const char*>& flags, absl::string_view callback, absl::string_view how) {
  for (const char* name : flags) {
    if (!Changed(name)) continue;
    return FlagError(name, absl::FindCommandLineFlag(name)->CurrentValue(),
                     absl::StrCat("it tunes ", callback, ", which is off: ", how, ", or leave it out"));
  }
  return absl::OkStatus();
}

// An optional step or epoch index: empty (none) or an int >= 0.
absl::StatusOr<std::optional<int64_t>> OptionalIndex(const char* flag, const std::string& value,
                                                     absl::string_view what) {
  if (value.empty()) return std::optional<int64_t>();
  int64_t index = 0;
  if (!absl::SimpleAtoi(value, &index) || index < 0) {
    return FlagError(flag, value, absl::StrCat("pass ", what, ", an int >= 0, or leave it empty (none)"));
  }
  return std::optional<int64_t>(index);
}

// StochasticWeightAveraging (--swa_lrs) and EMAWeightAveraging (--ema_weight_averaging), with Lightning's checks and
// those that fit's model adds (one parameter group, so one rate), before anything is written. `strategy` is the
// strategy's name: neither averages a sharded model.
absl::Status WeightAveragingFromFlags(const std::string& strategy, OutputSpec& outputs) {
  const std::string swa_lrs = absl::GetFlag(FLAGS_swa_lrs);
  if (swa_lrs.empty()) {
    if (absl::Status off = OnlyWith({"swa_epoch_start", "annealing_epochs", "annealing_strategy"},
                                    "StochasticWeightAveraging", "add it with --swa_lrs (e.g. --swa_lrs=0.01)");
        !off.ok()) {
      return off;
    }
  } else {
    StochasticWeightAveragingOptions swa;
    double lr = 0;
    if (absl::StrContains(swa_lrs, ',') || !absl::SimpleAtod(swa_lrs, &lr) || !(lr > 0) ||
        !(lr <= std::numeric_limits<float>::max())) {
      return FlagError("swa_lrs", swa_lrs,
                       "pass one learning rate > 0 (fit's optimizer has one parameter group), e.g. 0.01; or leave it "
                       "empty for no SWA");
    }
    swa.swa_lrs = {lr};
    const std::string start = absl::GetFlag(FLAGS_swa_epoch_start);
    const std::string start_accepted =
        "pass an int >= 1 (the epoch SWA starts at, counted from 1) or a fraction of --max_epochs in [0.0, 1.0] "
        "written with a '.', e.g. 0.8 (Lightning's default)";
    if (start.find_first_of(".eE") != std::string::npos) {
      double fraction = 0;
      if (!absl::SimpleAtod(start, &fraction) || !(fraction >= 0 && fraction <= 1)) {
        return FlagError("swa_epoch_start", start, start_accepted);
      }
      swa.swa_epoch_start = fraction;
    } else {
      int64_t epoch = 0;
      if (!absl::SimpleAtoi(start, &epoch) || epoch < 1) return FlagError("swa_epoch_start", start, start_accepted);
      swa.swa_epoch_start = epoch;
    }
    swa.annealing_epochs = absl::GetFlag(FLAGS_annealing_epochs);
    if (absl::Status s = AtLeast("annealing_epochs", swa.annealing_epochs, 0, " (0: straight to --swa_lrs)"); !s.ok()) {
      return s;
    }
    swa.annealing_strategy = absl::GetFlag(FLAGS_annealing_strategy);
    if (swa.annealing_strategy != "cos" && swa.annealing_strategy != "linear") {
      return FlagError("annealing_strategy", swa.annealing_strategy, "pass cos or linear");
    }
    if (absl::StrContains(strategy, "fsdp")) {
      return FlagError("swa_lrs", swa_lrs,
                       absl::StrCat("StochasticWeightAveraging does not average a sharded model (--strategy=", strategy,
                                    "); use --strategy=ddp, or leave --swa_lrs empty"));
    }
    outputs.swa = std::move(swa);
  }
  if (!absl::GetFlag(FLAGS_ema_weight_averaging)) {
    return OnlyWith({"ema_decay", "ema_update_every_n_steps", "ema_update_starting_at_step",
                     "ema_update_starting_at_epoch", "ema_use_buffers"},
                    "EMAWeightAveraging", "add it with --ema_weight_averaging");
  }
  EMAWeightAveragingOptions ema;
  ema.decay = absl::GetFlag(FLAGS_ema_decay);
  if (!(ema.decay >= 0 && ema.decay <= 1)) {
    return FlagError("ema_decay", absl::StrCat(ema.decay), "pass a value in [0, 1], e.g. 0.999 (Lightning's default)");
  }
  ema.update_every_n_steps = absl::GetFlag(FLAGS_ema_update_every_n_steps);
  if (absl::Status s = AtLeast("ema_update_every_n_steps", ema.update_every_n_steps, 1); !s.ok()) return s;
  absl::StatusOr<std::optional<int64_t>> step = OptionalIndex(
      "ema_update_starting_at_step", absl::GetFlag(FLAGS_ema_update_starting_at_step), "the first step to update after");
  if (!step.ok()) return step.status();
  ema.update_starting_at_step = *step;
  absl::StatusOr<std::optional<int64_t>> epoch =
      OptionalIndex("ema_update_starting_at_epoch", absl::GetFlag(FLAGS_ema_update_starting_at_epoch),
                    "the first epoch to update at the end of");
  if (!epoch.ok()) return epoch.status();
  ema.update_starting_at_epoch = *epoch;
  ema.use_buffers = absl::GetFlag(FLAGS_ema_use_buffers);
  if (absl::StrContains(strategy, "fsdp")) {
    return FlagError("ema_weight_averaging", "true",
                     absl::StrCat("EMAWeightAveraging does not average a sharded model (--strategy=", strategy,
                                  "); use --strategy=ddp, or leave it out"));
  }
  outputs.ema = ema;
  return absl::OkStatus();
}

}  // namespace

// --auto_lr_find, --auto_scale_batch_size and the lr_find settings (tuner_flags.cc), each checked as Tuner checks it.
absl::Status TuneFromFlags(TuneSpec& tune) {
  tune.auto_lr_find = absl::GetFlag(FLAGS_auto_lr_find);
  tune.auto_scale_batch_size = absl::GetFlag(FLAGS_auto_scale_batch_size);
  if (tune.auto_scale_batch_size != "none" && tune.auto_scale_batch_size != "power" &&
      tune.auto_scale_batch_size != "binsearch") {
    return FlagError("auto_scale_batch_size", tune.auto_scale_batch_size, "accepted: none, power, binsearch");
  }
  tune.lr_find_min_lr = absl::GetFlag(FLAGS_lr_find_min_lr);
  if (!(tune.lr_find_min_lr > 0) || !std::isfinite(tune.lr_find_min_lr)) {
    return FlagError("lr_find_min_lr", absl::StrCat(tune.lr_find_min_lr), "pass a learning rate > 0");
  }
  tune.lr_find_max_lr = absl::GetFlag(FLAGS_lr_find_max_lr);
  if (!(tune.lr_find_max_lr > 0) || !std::isfinite(tune.lr_find_max_lr)) {
    return FlagError("lr_find_max_lr", absl::StrCat(tune.lr_find_max_lr), "pass a learning rate > 0");
  }
  tune.lr_find_num_training = absl::GetFlag(FLAGS_lr_find_num_training);
  if (tune.lr_find_num_training < 1) {
    return FlagError("lr_find_num_training", absl::StrCat(tune.lr_find_num_training), "pass a number of steps >= 1");
  }
  tune.lr_find_mode = absl::GetFlag(FLAGS_lr_find_mode);
  if (tune.lr_find_mode != "exponential" && tune.lr_find_mode != "linear") {
    return FlagError("lr_find_mode", tune.lr_find_mode, "accepted: exponential, linear");
  }
  return absl::OkStatus();
}

absl::StatusOr<FitConfig> FitConfigFromFlags() {
  if (absl::Status limits = ApplyInputLimitFlags(); !limits.ok()) return limits;
  FitConfig config;
  if (absl::Status mode = ModeFromFlags(config); !mode.ok()) return mode;
  // The Trainer's options: each row of trainer/trainer_options.inc, set from its flag and checked by its one check
  // (the library's Trainer runs the same checks).
  TrainerOptions& trainer = config.trainer;
  if (absl::Status set = TrainerOptionsFromFlags(trainer); !set.ok()) return set;
  trainer.logger = false;  // fit makes the loggers --logger names itself, sharing one run folder (fit_main.cc).
  trainer.default_root_dir = UserPath(trainer.default_root_dir);
  trainer.enable_checkpointing = trainer.enable_checkpointing && config.mode == "fit";

  if (absl::Status data = DataFromFlags(trainer.seed.value_or(0), config.data); !data.ok()) return data;
  if (absl::Status model = ModelFromFlags(trainer.max_epochs.value_or(-1), config.model); !model.ok()) return model;
  if (absl::Status outputs = OutputsFromFlags(trainer.default_root_dir, config.outputs); !outputs.ok()) return outputs;
  if (absl::Status averaging = WeightAveragingFromFlags(trainer.strategy.name(), config.outputs); !averaging.ok()) {
    return averaging;
  }
  if (absl::Status tune = TuneFromFlags(config.tune); !tune.ok()) return tune;
  return config;
}

}  // namespace kiln
