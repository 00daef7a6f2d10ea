// WandbLogger: Lightning's WandbLogger, with its arguments and defaults, writing offline W&B runs only: the run
// folder wandb itself writes in offline mode, which `wandb sync <folder>` uploads later (Kiln opens no connection).
//
//   <save_dir>/wandb/offline-run-<YYYYMMDD_HHMMSS>-<id>/run-<id>.wandb   (the run's records, wandb_records.h)
//   <save_dir>/wandb/offline-run-<YYYYMMDD_HHMMSS>-<id>/files/config.yaml, wandb-summary.json, wandb-metadata.json
//   <save_dir>/wandb/latest-run -> offline-run-...
//
// run-<id>.wandb holds, as wandb's own writer orders them: a header; the run (id, project, entity, display name,
// group, job type, notes, tags, host, start time); Lightning's define_metric calls (trainer/global_step, and every
// other metric stepped by it); the hyper-parameters (a config record per log_hyperparams, values as JSON: true/false
// and numbers bare, other text as strings, as hparams.yaml reads them); per log_metrics one history row (the
// metrics, prefixed with `prefix` and "-", and trainer/global_step, _step (the row's number, from 0), _timestamp
// and _runtime) and a summary record with the row's values; with log_model, a files record per checkpoint; at the
// end the summary and the exit record (exit code 0, or 1 after a failed run). The record file is appended to as the
// run goes and flushed to the disk by save() (every epoch) and at the end: a crash loses at most what came since,
// and can leave the last record torn, which the log format tolerates. A stage after the end (fit, then test in one
// program) goes on in the same run: its end records are cut off and written again at the new end. The files under files/ are written whole
// (WriteFileDurably) at setup and at the end; wandb 0.29 writes these three when a run is synced or online, and
// Kiln writes them for an offline run too, so that the folder reads like one.
//
// Not as Lightning: offline=False (Lightning's default, which streams to W&B's servers) is refused unless
// $WANDB_MODE is offline or dryrun (as wandb.init reads it); pass offline=true and run `wandb sync` on the folder.
// log_model, which Lightning refuses offline, keeps each checkpoint ModelCheckpoint logs as a file of the run,
// files/<checkpoint_name>/v<N>/model.ckpt (a hard link where it can, else a copy), with metadata.json beside it
// (Lightning's artifact metadata and aliases), at the end of a successful run (kTrue; with every save when
// save_top_k is -1) or with every save (kAll); `wandb sync` uploads them as the run's files, not as W&B artifacts.
// Media (log_image, log_table), watch() and anonymous are not supported.
//
// Only global rank zero logs (the Trainer calls loggers there alone). Thread-safety: one thread at a time.
#ifndef KILN_TRAINER_LOGGERS_WANDB_LOGGER_H_
#define KILN_TRAINER_LOGGERS_WANDB_LOGGER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "trainer/core/logger.h"
#include "trainer/loggers/log_model.h"

namespace kiln {

namespace wandb {
class RecordLogFile;
}  // namespace wandb

struct WandbLoggerOptions {
  std::optional<std::string> name;  // The run's display name; unset: W&B names it when the run is synced.
  std::string save_dir = ".";       // The run goes under <save_dir>/wandb.
  std::optional<std::string> version;  // The run's id (Lightning's version; id is the same).
  bool offline = false;                // Must be true (or $WANDB_MODE offline): Kiln writes offline runs only.
  std::optional<std::string> dir;      // Same as save_dir, used when save_dir is empty.
  std::optional<std::string> id;       // Same as version.
  // Unset: $WANDB_PROJECT, else "lightning_logs".
  std::optional<std::string> project;
  LogModel log_model = LogModel::kFalse;
  std::string prefix;
  std::optional<std::string> checkpoint_name;  // Unset: "model-<id>".
  // wandb.init's arguments Lightning passes on (its **kwargs).
  std::optional<std::string> entity;
  std::optional<std::string> group;
  std::optional<std::string> job_type;
  std::optional<std::string> notes;
  std::vector<std::string> tags;
};

// What setup() refuses that can be told from the options alone: offline=False (unless $WANDB_MODE is offline or
// dryrun), an id, version or project W&B does not accept (empty, over 128 characters, or with any of / \ # ? % :),
// a checkpoint_name other than letters, digits, '-', '_' and '.'. InvalidArgument naming the value and the fix.
absl::Status CheckWandbLoggerOptions(const WandbLoggerOptions& options);

class WandbLogger final : public Logger {
 public:
  explicit WandbLogger(WandbLoggerOptions options = {});
  ~WandbLogger() override;

  std::string name() const override { return "wandb"; }
  // Lightning's <save_dir>/<project>/<id>, where checkpoints go when this is the first logger (W&B's own files are
  // in run_dir()).
  std::string log_dir() const override;
  // Checks the options (offline, the id's and project's characters) and starts the run: its folder, the record
  // file, files/wandb-metadata.json. InvalidArgument naming the value and the fix; Internal or ResourceExhausted
  // naming the file.
  absl::Status setup() override;
  absl::Status log_metrics(const MetricMap& metrics, int64_t step) override;
  absl::Status log_hyperparams(const std::map<std::string, std::string>& params) override;
  // Flushes the record file to the disk and writes files/wandb-summary.json.
  absl::Status save() override;
  absl::Status finalize() override { return finalize_with_status("success"); }
  absl::Status finalize_with_status(absl::string_view status) override;
  absl::Status after_save_checkpoint(const SavedCheckpoints& checkpoints) override;

  // The run's id (given, or 8 random letters and digits as wandb makes them), its project and its folder
  // (<save_dir>/wandb/offline-run-...; empty before setup).
  const std::string& id() const { return id_; }
  const std::string& project() const { return project_; }
  const std::string& run_dir() const { return run_dir_; }

 private:
  absl::Status AppendRecord(int field, const std::string& message);
  absl::Status LogCheckpoints(const SavedCheckpoints& checkpoints);
  absl::Status WriteFiles();

  WandbLoggerOptions options_;
  std::string id_;
  std::string project_;
  std::string save_dir_;
  std::string run_dir_;
  std::unique_ptr<wandb::RecordLogFile> file_;
  int64_t records_ = 0;  // Record numbers, from 1.
  int64_t rows_ = 0;     // History rows (_step), from 0.
  absl::Time start_;
  std::map<std::string, std::string> config_;   // Key -> JSON value.
  std::map<std::string, std::string> summary_;  // Key -> JSON value.
  bool finalized_ = false;
  int64_t end_offset_ = 0;
  int64_t end_records_ = 0;  // Where the record file's end (summary, exit) starts, once finalized.
  std::optional<SavedCheckpoints> checkpoints_;  // The last after_save_checkpoint's, for the end (log_model kTrue).
  std::map<std::string, int64_t> logged_;        // Checkpoint path -> its modification time when logged.
  int64_t versions_ = 0;                         // Checkpoints logged (v0, v1, ...).
};

}  // namespace kiln

#endif  // KILN_TRAINER_LOGGERS_WANDB_LOGGER_H_
