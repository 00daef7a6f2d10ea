#include "trainer/callbacks/model_checkpoint.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "glog/logging.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/strategies/strategy.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

constexpr char kLastName[] = "last";

// Formats `value` with a Python-style spec such as ".3f", "02d" or "" (the default).
std::string FormatValue(double value, bool integral, const std::string& spec) {
  if (spec.empty()) return integral ? absl::StrCat(static_cast<int64_t>(value)) : absl::StrFormat("%g", value);
  const char kind = spec.back();
  const bool valid = spec.find_first_not_of("0123456789.+- ") == spec.size() - 1;
  if (!valid) return absl::StrFormat("%g", value);
  char buffer[64];
  if (kind == 'd') {
    std::snprintf(buffer, sizeof(buffer), ("%" + spec.substr(0, spec.size() - 1) + "lld").c_str(),
                  static_cast<long long>(value));
  } else if (kind == 'f' || kind == 'e' || kind == 'g' || kind == 'E' || kind == 'G') {
    std::snprintf(buffer, sizeof(buffer), ("%" + spec).c_str(), value);
  } else {
    return absl::StrFormat("%g", value);
  }
  return buffer;
}

// `a` and `b` name the same folder (after making them absolute and resolving symbolic links).
bool SameFolder(const std::string& a, const std::string& b) {
  std::error_code error_a, error_b;
  const fs::path canonical_a = fs::weakly_canonical(fs::absolute(a), error_a);
  const fs::path canonical_b = fs::weakly_canonical(fs::absolute(b), error_b);
  return !error_a && !error_b && canonical_a == canonical_b;
}

bool InFolder(const std::string& file, const std::string& folder) {
  return SameFolder(fs::path(file).parent_path().string(), folder);
}

// Python's repr of a datetime.timedelta, as Lightning's state key writes train_time_interval:
// "datetime.timedelta(seconds=30)", "datetime.timedelta(days=1, microseconds=5)", "datetime.timedelta(0)".
std::string TimedeltaRepr(absl::Duration interval) {
  const int64_t total_us = absl::ToInt64Microseconds(interval);
  // Python normalises to days (any sign), 0 <= seconds < 86400 and 0 <= microseconds < 10^6.
  int64_t days = total_us / (86400LL * 1000000);
  int64_t rest = total_us % (86400LL * 1000000);
  if (rest < 0) {
    rest += 86400LL * 1000000;
    --days;
  }
  std::vector<std::string> parts;
  if (days != 0) parts.push_back(absl::StrCat("days=", days));
  if (rest / 1000000 != 0) parts.push_back(absl::StrCat("seconds=", rest / 1000000));
  if (rest % 1000000 != 0) parts.push_back(absl::StrCat("microseconds=", rest % 1000000));
  return absl::StrCat("datetime.timedelta(", parts.empty() ? "0" : absl::StrJoin(parts, ", "), ")");
}

std::string EncodeScores(const std::map<std::string, double>& scores) {
  std::string out;
  for (const auto& [path, score] : scores) absl::StrAppend(&out, path, "\t", absl::StrFormat("%.17g", score), "\n");
  return out;
}

}  // namespace

ModelCheckpoint::ModelCheckpoint(ModelCheckpointOptions options) : options_(std::move(options)) {
  if (options_.filename.empty()) options_.filename = "{epoch}-{step}";
  // Lightning's triggers: every epoch when none is given; otherwise an unset every_n_epochs is 0.
  if (!options_.every_n_epochs.has_value()) {
    options_.every_n_epochs = options_.every_n_train_steps > 0 || options_.train_time_interval.has_value() ? 0 : 1;
  }
  ParseMonitorMode(options_.mode, "ModelCheckpoint", &mode_).IgnoreError();  // Reported by validate_config.
}

std::string ModelCheckpoint::state_key() const {
  return absl::StrCat("ModelCheckpoint{'monitor': ", options_.monitor ? "'" + *options_.monitor + "'" : "None",
                      ", 'mode': '", options_.mode, "', 'every_n_train_steps': ", options_.every_n_train_steps,
                      ", 'every_n_epochs': ", *options_.every_n_epochs, ", 'train_time_interval': ",
                      options_.train_time_interval ? TimedeltaRepr(*options_.train_time_interval) : "None", "}");
}

std::vector<MonitoredMetric> ModelCheckpoint::monitored_metrics() const {
  if (!options_.monitor.has_value()) return {};
  return {{.name = *options_.monitor,
           .option = absl::StrCat("ModelCheckpoint(monitor='", *options_.monitor, "')"),
           .every_n_train_steps = options_.every_n_train_steps}};
}

absl::Status ModelCheckpoint::validate_config(const Trainer& trainer) const {
  (void)trainer;
  MonitorMode mode;
  if (absl::Status status = ParseMonitorMode(options_.mode, "ModelCheckpoint", &mode); !status.ok()) return status;
  if (options_.save_top_k < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Invalid value for save_top_k=", options_.save_top_k, ". Must be >= -1"));
  }
  if (!options_.monitor.has_value() && options_.save_top_k > 1) {
    return absl::InvalidArgumentError(absl::StrCat("ModelCheckpoint(save_top_k=", options_.save_top_k,
                                                   ", monitor=None) is not a valid configuration. No quantity for "
                                                   "top_k to track."));
  }
  if (options_.every_n_train_steps < 0 || *options_.every_n_epochs < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Invalid values for every_n_train_steps=", options_.every_n_train_steps,
                     " and every_n_epochs=", *options_.every_n_epochs, ". Both cannot be negative."));
  }
  if (options_.train_time_interval.has_value() && *options_.train_time_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("Invalid value for train_time_interval=",
                                                   absl::FormatDuration(*options_.train_time_interval),
                                                   ". Must be >= 0 (0: after every step), or unset"));
  }
  // Lightning refuses any two triggers; Kiln has always taken every_n_train_steps beside every_n_epochs (both save).
  if (options_.train_time_interval.has_value() &&
      (options_.every_n_train_steps >= 1 || *options_.every_n_epochs >= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Combination of parameters every_n_train_steps=", options_.every_n_train_steps,
        ", every_n_epochs=", *options_.every_n_epochs, " and train_time_interval=",
        options_.train_time_interval ? absl::FormatDuration(*options_.train_time_interval) : "None",
        " should be mutually exclusive; set one of them (and every_n_epochs=0 with either of the others)"));
  }
  return absl::OkStatus();
}

void ModelCheckpoint::setup(Trainer& trainer, LightningModule& module, Stage stage) { fitting_ = stage == Stage::kFit; }

void ModelCheckpoint::on_train_start(Trainer& trainer, LightningModule& module) {
  last_time_checked_ = std::chrono::steady_clock::now();
}

void ModelCheckpoint::on_fit_start(Trainer& trainer, LightningModule& module) {
  // Here rather than in setup (where Lightning resolves it): setup runs before the loggers claim the run's folder,
  // and the folder a logger would name then could be the one another run is about to claim.
  if (dirpath_.empty()) {
    // Rank 0's folder, on every rank (Lightning broadcasts it): another rank's loggers claim no run folder, and every
    // rank writes into this one for a sharded checkpoint.
    const bool several = trainer.strategy() != nullptr && trainer.strategy()->world_size() > 1;
    if (!several || trainer.is_global_zero()) {
      dirpath_ = options_.dirpath.empty() ? trainer.checkpoint_dir() : options_.dirpath;
    }
    if (several) dirpath_ = AllGatherText(*trainer.strategy(), dirpath_).at(0);
  }
  ApplyRestored();
  // What a killed run's interrupted writes left behind (rank zero alone writes, so it alone cleans).
  if (trainer.is_global_zero()) RemoveStaleTemporaryFiles(dirpath_);
}

std::string ModelCheckpoint::FormatFilename(int64_t epoch, int64_t step, const MetricMap& metrics) const {
  const std::string& pattern = options_.filename;
  std::string out;
  size_t i = 0;
  while (i < pattern.size()) {
    const size_t open = pattern.find('{', i);
    const size_t close = open == std::string::npos ? std::string::npos : pattern.find('}', open);
    if (close == std::string::npos) {
      out += pattern.substr(i);
      break;
    }
    out += pattern.substr(i, open - i);
    std::vector<std::string> parts =
        absl::StrSplit(pattern.substr(open + 1, close - open - 1), absl::MaxSplits(':', 1));
    const std::string& name = parts[0];
    const std::string spec = parts.size() > 1 ? parts[1] : "";
    const bool integral = name == "epoch" || name == "step";
    double value = 0;  // Lightning formats a metric it has not seen as 0.
    if (name == "epoch") {
      value = static_cast<double>(epoch);
    } else if (name == "step") {
      value = static_cast<double>(step);
    } else if (auto found = metrics.find(name); found != metrics.end()) {
      value = found->second;
    }
    const std::string prefix = name + "=";
    const bool has_prefix =
        out.size() >= prefix.size() && out.compare(out.size() - prefix.size(), prefix.size(), prefix) == 0;
    if (options_.auto_insert_metric_name && !has_prefix) out += prefix;
    out += FormatValue(value, integral, spec);
    i = close + 1;
  }
  return out;
}

std::string ModelCheckpoint::UniquePath(const std::string& stem, const std::string& replaceable) const {
  std::string path = absl::StrCat(dirpath_, "/", stem, kCheckpointExtension);
  if (!options_.enable_version_counter) return path;
  std::error_code error;
  const auto taken = [&](const std::string& candidate) {
    return saved_paths_.count(candidate) > 0 || fs::exists(candidate, error);
  };
  for (int version = 1; taken(path) && path != replaceable; ++version) {
    path = absl::StrCat(dirpath_, "/", stem, "-v", version, kCheckpointExtension);
  }
  return path;
}

void ModelCheckpoint::on_train_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs,
                                         const Batch& batch, int64_t batch_idx) {
  const bool step_due = options_.every_n_train_steps > 0 && trainer.global_step() % options_.every_n_train_steps == 0;
  bool time_due = false;
  const auto now = std::chrono::steady_clock::now();
  if (options_.train_time_interval.has_value()) {
    time_due = now - last_time_checked_ >= absl::ToChronoNanoseconds(*options_.train_time_interval);
    // The clocks of the ranks differ: rank zero's decides, so that every rank saves (a collective) together.
    const Strategy* strategy = trainer.strategy();
    if (strategy != nullptr && strategy->world_size() > 1) {
      time_due = AllGatherText(*trainer.strategy(), time_due ? "1" : "0").at(0) == "1";
    }
  }
  if (!step_due && !time_due) return;
  if (time_due) last_time_checked_ = now;
  if (!step_due && options_.monitor.has_value() && trainer.callback_metrics().count(*options_.monitor) == 0) {
    deferred_ = true;
    return;
  }
  Save(trainer);
}

bool ModelCheckpoint::SaveOnTrainEpochEnd(const Trainer& trainer) const {
  if (options_.save_on_train_epoch_end.has_value()) return *options_.save_on_train_epoch_end;
  // Lightning's rule: where the epoch's validation metrics are there. Validation that does not run every epoch
  // leaves the epochs without it unknown, so the saves follow validation; without validation, the epoch's end.
  const TrainerOptions& options = trainer.options();
  if (options.check_val_every_n_epoch != 1) return false;
  if (trainer.num_val_batches() == 0) return true;
  // Python's `val_check_interval == 1.0`, which the int 1 also is.
  return options.val_check_interval.is_whole() || options.val_check_interval.ToString() == "1";
}

void ModelCheckpoint::on_train_epoch_end(Trainer& trainer, LightningModule& module) {
  if (!SaveOnTrainEpochEnd(trainer)) return;
  if (*options_.every_n_epochs > 0 && (trainer.current_epoch() + 1) % *options_.every_n_epochs == 0) Save(trainer);
}

void ModelCheckpoint::on_validation_end(Trainer& trainer, LightningModule& module) {
  if (!fitting_ || trainer.sanity_checking()) return;
  if (deferred_) {
    deferred_ = false;
    Save(trainer);
    return;
  }
  if (SaveOnTrainEpochEnd(trainer)) return;
  if (*options_.every_n_epochs > 0 && (trainer.current_epoch() + 1) % *options_.every_n_epochs == 0) Save(trainer);
}

void ModelCheckpoint::Save(Trainer& trainer) {
  if (!fitting_ || trainer.sanity_checking() || trainer.options().fast_dev_run > 0) return;
  if (trainer.global_step() == last_saved_step_ || trainer.global_step() == 0) return;
  if (dirpath_.empty()) dirpath_ = options_.dirpath.empty() ? trainer.checkpoint_dir() : options_.dirpath;
  const MetricMap& metrics = trainer.callback_metrics();
  std::optional<double> score;
  if (options_.monitor.has_value()) {
    auto found = metrics.find(*options_.monitor);
    if (found == metrics.end()) {
      throw std::runtime_error(
          absl::StrCat("`ModelCheckpoint(monitor='", *options_.monitor,
                       "')` could not find the monitored key in the returned metrics: ", MetricNames(metrics),
                       ". HINT: Did you call `log('", *options_.monitor, "', value)` in the `LightningModule`?"));
    }
    // A non-finite score never ranks among the best.
    score = std::isfinite(found->second) ? found->second
                                         : (mode_ == MonitorMode::kMin ? std::numeric_limits<double>::infinity()
                                                                       : -std::numeric_limits<double>::infinity());
  }
  std::vector<std::string> written;
  const auto write = [&](const std::string& path) {
    if (absl::Status status = trainer.save_checkpoint(path, options_.save_weights_only); !status.ok()) {
      throw std::runtime_error(absl::StrCat("ModelCheckpoint could not save: ", status.message()));
    }
    saved_paths_.insert(path);
    written.push_back(path);
  };
  const auto remove = [&](const std::string& path) {
    // A file this run saved is in its folder (UniquePath put it there); any other is checked, since only a
    // hand-made checkpoint could name one outside it, and that is never deleted.
    if (saved_paths_.count(path) == 0 && !InFolder(path, dirpath_)) {
      LOG(WARNING) << "ModelCheckpoint keeps " << path << ": it is not in this run's folder " << dirpath_;
      saved_paths_.erase(path);
      return;
    }
    trainer.remove_checkpoint(path).IgnoreError();  // A failed write was already reported by write().
    saved_paths_.erase(path);
  };
  last_saved_step_ = trainer.global_step();
  const std::string stem = FormatFilename(trainer.current_epoch(), trainer.global_step(), metrics);

  if (options_.save_top_k != 0) {
    if (!score.has_value()) {
      const std::string path = UniquePath(stem, options_.save_top_k == 1 ? latest_path_ : "");
      write(path);
      if (options_.save_top_k == 1 && !latest_path_.empty() && latest_path_ != path) {
        remove(latest_path_);
      }
      latest_path_ = path;
      best_model_path_ = path;
    } else {
      std::optional<std::string> worst;
      for (const auto& [path, value] : best_k_models_) {
        if (!worst.has_value() || Improves(best_k_models_.at(*worst), value, mode_)) worst = path;
      }
      const bool room = options_.save_top_k == -1 || static_cast<int64_t>(best_k_models_.size()) < options_.save_top_k;
      if (room || Improves(*score, best_k_models_.at(*worst), mode_)) {
        const std::string path = UniquePath(stem, room ? "" : worst.value_or(""));
        write(path);
        best_k_models_[path] = *score;
        if (!room && worst.has_value() && *worst != path) {
          best_k_models_.erase(*worst);
          remove(*worst);
        }
        latest_path_ = path;
      }
      best_model_path_.clear();
      for (const auto& [path, value] : best_k_models_) {
        if (best_model_path_.empty() || Improves(value, best_k_models_.at(best_model_path_), mode_)) {
          best_model_path_ = path;
        }
      }
      best_model_score_ =
          best_model_path_.empty() ? std::nullopt : std::optional<double>(best_k_models_.at(best_model_path_));
    }
  }
  if (options_.save_last) {
    last_model_path_ = absl::StrCat(dirpath_, "/", kLastName, kCheckpointExtension);
    write(last_model_path_);
  }
  if (!trainer.is_global_zero()) return;
  // Lightning's logger.after_save_checkpoint(self), for the loggers that upload checkpoints.
  SavedCheckpoints saved{.dirpath = dirpath_,
                         .written = written,
                         .last_model_path = last_model_path_,
                         .current_score = score,
                         .best_model_path = best_model_path_,
                         .best_model_score = best_model_score_,
                         .best_k_models = best_k_models_,
                         .monitor = options_.monitor,
                         .mode = options_.mode,
                         .save_last = options_.save_last,
                         .save_top_k = options_.save_top_k,
                         .every_n_train_steps = options_.every_n_train_steps,
                         .every_n_epochs = options_.every_n_epochs.value_or(options_.every_n_train_steps > 0 ? 0 : 1)};
  for (const auto& logger : trainer.loggers()) {
    if (absl::Status status = logger->after_save_checkpoint(saved); !status.ok()) {
      throw std::runtime_error(absl::StrCat("logger '", logger->name(), "' after a checkpoint: ", status.message()));
    }
  }
}

CallbackState ModelCheckpoint::state_dict() const {
  // Absolute, so that a resume from another folder still matches; made once for each folder (made at every save,
  // with the rest of this state it cost about 9 k instructions a checkpoint on the training thread, callgrind).
  if (absolute_dirpath_of_ != dirpath_ || absolute_dirpath_.empty()) {
    std::error_code error;
    const fs::path absolute = fs::absolute(dirpath_, error);
    absolute_dirpath_ = error ? dirpath_ : absolute.lexically_normal().string();
    absolute_dirpath_of_ = dirpath_;
  }
  CallbackState state = {
      {"dirpath", absolute_dirpath_},
      {"best_model_path", best_model_path_},
      {"last_model_path", last_model_path_},
      {"latest_path", latest_path_},
      {"last_saved_step", absl::StrCat(last_saved_step_)},
      {"best_k_models", EncodeScores(best_k_models_)},
  };
  if (best_model_score_.has_value()) state["best_model_score"] = absl::StrFormat("%.17g", *best_model_score_);
  return state;
}

absl::Status ModelCheckpoint::load_state_dict(const CallbackState& state) {
  const auto get = [&](const std::string& key) {
    auto found = state.find(key);
    return found == state.end() ? std::string() : found->second;
  };
  std::map<std::string, double> scores;
  for (absl::string_view line : absl::StrSplit(get("best_k_models"), '\n', absl::SkipEmpty())) {
    std::vector<std::string> fields = absl::StrSplit(line, absl::MaxSplits('\t', 1));
    double score = 0;
    if (fields.size() != 2 || !absl::SimpleAtod(fields[1], &score)) {
      return absl::InvalidArgumentError(absl::StrCat("malformed best_k_models entry '", line, "'"));
    }
    scores[fields[0]] = score;
  }
  int64_t last_saved_step = -1;
  if (!get("last_saved_step").empty() && !absl::SimpleAtoi(get("last_saved_step"), &last_saved_step)) {
    return absl::InvalidArgumentError(absl::StrCat("malformed last_saved_step '", get("last_saved_step"), "'"));
  }
  double best_score = 0;
  const bool has_best_score = !get("best_model_score").empty();
  if (has_best_score && !absl::SimpleAtod(get("best_model_score"), &best_score)) {
    return absl::InvalidArgumentError(absl::StrCat("malformed best_model_score '", get("best_model_score"), "'"));
  }
  Restored restored;
  restored.dirpath = get("dirpath");
  restored.best_k_models = std::move(scores);
  restored.best_model_path = get("best_model_path");
  restored.last_model_path = get("last_model_path");
  restored.latest_path = get("latest_path");
  restored.last_saved_step = last_saved_step;
  if (has_best_score) restored.best_model_score = best_score;
  restored_ = std::move(restored);
  if (!dirpath_.empty()) ApplyRestored();  // Already set up.
  return absl::OkStatus();
}

void ModelCheckpoint::ApplyRestored() {
  if (!restored_.has_value() || dirpath_.empty()) return;
  Restored restored = std::move(*restored_);
  restored_.reset();
  best_model_path_ = restored.best_model_path;
  if (!SameFolder(restored.dirpath, dirpath_)) {
    LOG(WARNING) << "The dirpath has changed from " << restored.dirpath << " to " << dirpath_
                 << ", therefore best_model_score, last_model_path and best_k_models won't be reloaded. Only "
                    "best_model_path will be reloaded.";
    return;
  }
  best_k_models_ = std::move(restored.best_k_models);
  last_model_path_ = restored.last_model_path;
  latest_path_ = restored.latest_path;
  last_saved_step_ = restored.last_saved_step;
  best_model_score_ = restored.best_model_score;
}

}  // namespace kiln
