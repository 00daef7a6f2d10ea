// ModelCheckpoint: saves checkpoints during fit, keeping the best `save_top_k` by a monitored metric (Lightning's
// ModelCheckpoint, with its option names and defaults).
//
// When it saves: every `every_n_train_steps` optimizer steps (after the step), or when `train_time_interval` has
// passed since the last check (after a step; rank zero's clock decides for every rank), or every `every_n_epochs`
// epochs: at most one of the three. With none set, every epoch. The epoch saves are made at the end of the
// training epoch (after validation and the module's on_train_epoch_end, so epoch and validation metrics are there)
// when `save_on_train_epoch_end` says so, else after each validation of fit (Lightning's on_validation_end).
// Unset, as in Lightning: at the training epoch's end when validation runs once an epoch at its end
// (check_val_every_n_epoch 1, val_check_interval 1.0) or not at all, else after validation. Never during the sanity
// check, fast_dev_run, or validate/test/predict.
// What it saves: the whole training state, or with `save_weights_only` Lightning's weights-only file (the model's
// weights, the loops' progress, the hyper-parameters and the data's state, without optimizer_states, lr_schedulers
// and callbacks): it loads for validate/test/predict, in Kiln and in Lightning, and fit refuses to resume from it.
// Which files it keeps: without `monitor`, the newest (save_top_k 1), none (0) or all (-1). With `monitor`, the
// `save_top_k` best by `mode`. `save_last` also writes `last.ckpt` on every save.
// Filenames: `filename` is a template over `epoch`, `step` and logged metrics, with Python-style format specs:
// "{epoch}-{val_loss:.3f}" gives "epoch=3-val_loss=0.123" (the "name=" is inserted unless the template already has
// it, or auto_insert_metric_name is false). Default "{epoch}-{step}". A name that already exists from another run
// gets "-v1", "-v2", ... rather than overwriting it, as Lightning's version counter does (enable_version_counter
// false: the file is replaced, atomically).
// A monitored metric that was never logged stops the run with Lightning's error the first time it is needed.
//
// Resuming: the folder is always this run's (`dirpath`, or the trainer's checkpoint_dir), never the one recorded in
// the checkpoint. What the checkpoint says about its files (best_k_models, last_model_path, ...) is taken back only
// when it was written for the same folder; otherwise, as in Lightning, only best_model_path is, with a warning, so
// that a run resumed from another run's checkpoint (or from a moved folder) neither writes into nor deletes from
// that folder. A file is only ever deleted from this run's folder.
#ifndef KILN_TRAINER_CALLBACKS_MODEL_CHECKPOINT_H_
#define KILN_TRAINER_CALLBACKS_MODEL_CHECKPOINT_H_

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/time/time.h"

#include "trainer/callbacks/monitor.h"
#include "trainer/core/callback.h"

namespace kiln {

struct ModelCheckpointOptions {
  std::string dirpath;                 // Empty: trainer.checkpoint_dir().
  std::string filename;                // Empty: "{epoch}-{step}".
  std::optional<std::string> monitor;  // Unset: keep the newest.
  std::string mode = "min";
  int64_t save_top_k = 1;
  bool save_last = false;
  int64_t every_n_train_steps = 0;        // 0: off.
  std::optional<int64_t> every_n_epochs;  // Unset: 1 unless every_n_train_steps or train_time_interval is set.
  bool auto_insert_metric_name = true;
  // Lightning's remaining arguments, with its defaults.
  bool save_weights_only = false;                   // The weights-only file (above), loadable but not resumable.
  std::optional<absl::Duration> train_time_interval;  // Unset: off. Zero: after every step.
  std::optional<bool> save_on_train_epoch_end;        // Unset: Lightning's rule (above).
  bool enable_version_counter = true;                 // false: a name taken is overwritten, not versioned.
};

class ModelCheckpoint final : public Callback {
 public:
  explicit ModelCheckpoint(ModelCheckpointOptions options = {});

  std::string state_key() const override;
  bool is_monitoring() const override { return true; }
  std::vector<MonitoredMetric> monitored_metrics() const override;
  absl::Status validate_config(const Trainer& trainer) const override;
  // Resolves dirpath (the loggers' run folder's checkpoints/ unless given) once the run folder is claimed.
  void setup(Trainer& trainer, LightningModule& module, Stage stage) override;
  void on_fit_start(Trainer& trainer, LightningModule& module) override;
  void on_train_start(Trainer& trainer, LightningModule& module) override;
  void on_train_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs, const Batch& batch,
                          int64_t batch_idx) override;
  void on_train_epoch_end(Trainer& trainer, LightningModule& module) override;
  void on_validation_end(Trainer& trainer, LightningModule& module) override;
  CallbackState state_dict() const override;
  absl::Status load_state_dict(const CallbackState& state) override;

  const std::string& best_model_path() const { return best_model_path_; }
  std::optional<double> best_model_score() const { return best_model_score_; }
  const std::string& last_model_path() const { return last_model_path_; }
  const std::map<std::string, double>& best_k_models() const { return best_k_models_; }
  const std::string& dirpath() const { return dirpath_; }

  // The filename (without folder and extension) for the given values; public for tests.
  std::string FormatFilename(int64_t epoch, int64_t step, const MetricMap& metrics) const;

 private:
  // What load_state_dict read, applied by setup once this run's folder is known.
  struct Restored {
    std::string dirpath;
    std::map<std::string, double> best_k_models;
    std::string best_model_path;
    std::optional<double> best_model_score;
    std::string last_model_path;
    std::string latest_path;
    int64_t last_saved_step = -1;
  };
  void ApplyRestored();
  // Whether the epoch saves are made at the end of the training epoch (else after validation).
  bool SaveOnTrainEpochEnd(const Trainer& trainer) const;
  void Save(Trainer& trainer);
  // `dirpath_/stem.ckpt`, or with -v1, -v2, ... when that file exists, unless it is `replaceable` (the file this
  // save is about to delete anyway).
  std::string UniquePath(const std::string& stem, const std::string& replaceable) const;

  ModelCheckpointOptions options_;
  MonitorMode mode_ = MonitorMode::kMin;
  bool fitting_ = false;
  // A train_time_interval save found the monitored metric not logged yet (validation logs it): made after the next
  // validation instead, as Lightning defers it.
  bool deferred_ = false;                 // The stage set up is fit (the callback is kept for validate and test).
  // train_time_interval's clock: when it last checked (on_train_start, then each save it caused); rank zero's decides.
  std::chrono::steady_clock::time_point last_time_checked_;
  std::string dirpath_;
  // dirpath_ made absolute (state_dict), and the dirpath_ it was made from.
  mutable std::string absolute_dirpath_;
  mutable std::string absolute_dirpath_of_;
  int64_t last_saved_step_ = -1;
  std::string best_model_path_;
  std::optional<double> best_model_score_;
  std::string last_model_path_;
  std::string latest_path_;                      // Newest non-"last" file (for save_top_k without monitor).
  std::map<std::string, double> best_k_models_;  // Path -> monitored score.
  std::set<std::string> saved_paths_;            // Files this run saved (perhaps still being written) and kept.
  std::optional<Restored> restored_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_CALLBACKS_MODEL_CHECKPOINT_H_
