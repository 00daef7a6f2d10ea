// MLFlowLogger: Lightning's MLFlowLogger, with its arguments and defaults. Logs a run to an MLflow tracking server
// over its REST API (an http:// tracking URI), or into MLflow's file store (a `file:` tracking URI, or save_dir
// when no tracking URI is given or set in $MLFLOW_TRACKING_URI) as MLflow itself lays it out:
//
//   <save_dir>/0/meta.yaml                              (MLflow's "Default" experiment, when the store is new)
//   <save_dir>/<experiment id>/meta.yaml
//   <save_dir>/<experiment id>/<run id>/meta.yaml        (status, start and end times, artifact_uri)
//   <save_dir>/<experiment id>/<run id>/params/<key>     (the value)
//   <save_dir>/<experiment id>/<run id>/metrics/<key>    ("<timestamp ms> <value> <step>" per line)
//   <save_dir>/<experiment id>/<run id>/tags/<key>
//   <save_dir>/<experiment id>/<run id>/artifacts/...
//
// every file written whole (WriteFileDurably): a reader never sees half of one. MLflow 3's client reads a file store
// only with MLFLOW_ALLOW_FILE_STORE=true set (or after `mlflow migrate-filestore`).
//
// As Lightning's: the experiment is found by name, or created (with artifact_location); a run is created with the
// tags, run_name as the tag mlflow.runName, and mlflow.user, mlflow.source.name and mlflow.source.type as MLflow's
// context adds them; or, with run_id, that run is continued. Hyper-parameters are params (values cut to 250
// characters, 100 per request). Metrics are logged at their step, their names prefixed with `prefix` and "-" and
// stripped of characters MLflow refuses (anything but letters, digits, _ / . - and space). finalize sets the run's
// status (FINISHED, or FAILED after a failed run) and end time. log_model uploads the checkpoints ModelCheckpoint
// keeps as artifacts, under the checkpoint's stem, each with metadata.yaml and aliases.txt beside it: at the end of
// the run (kTrue, and with every save when save_top_k is -1) or after every save (kAll). Checkpoints are written in
// the background: uploading with every save waits for that save's files to be on the disk.
//
// Over REST every call is one HTTP request to the server, with `timeout`; a server that cannot be reached or that
// refuses a request stops the run with an error naming the URL and the server's message. Artifacts are uploaded
// through the server (`mlflow server --serve-artifacts`, MLflow's default): a run whose artifact_uri is not an
// mlflow-artifacts: URI is refused when log_model is set. https:// is not supported (trainer/io/http_client.h).
//
// Only global rank zero logs (the Trainer calls loggers there alone). Thread-safety: one thread at a time.
#ifndef KILN_TRAINER_LOGGERS_MLFLOW_LOGGER_H_
#define KILN_TRAINER_LOGGERS_MLFLOW_LOGGER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainer/core/logger.h"
#include "trainer/loggers/log_model.h"  // IWYU pragma: export

namespace kiln {

struct MLFlowLoggerOptions {
  std::string experiment_name = "lightning_logs";
  std::optional<std::string> run_name;
  // http://host:port of a tracking server, or file:<folder> (file:///abs/path too). Unset: $MLFLOW_TRACKING_URI when
  // set, otherwise file:<save_dir>.
  std::optional<std::string> tracking_uri;
  std::map<std::string, std::string> tags;
  std::string save_dir = "./mlruns";  // Used only without a tracking URI.
  LogModel log_model = LogModel::kFalse;
  std::string prefix;
  std::optional<std::string> artifact_location;  // For an experiment this logger creates.
  std::optional<std::string> run_id;             // Continue this run instead of starting one.
  absl::Duration timeout = absl::Seconds(30);    // Each HTTP request's (Kiln's; MLflow's client has its own).
};

class MLFlowLogger final : public Logger {
 public:
  explicit MLFlowLogger(MLFlowLoggerOptions options = {});
  ~MLFlowLogger() override;

  std::string name() const override { return "mlflow"; }
  // The run's folder in a file store (<save_dir>/<experiment id>/<run id>: Lightning's save_dir/name/version, where
  // checkpoints go), once setup; empty over REST (checkpoints then go under the trainer's default_root_dir).
  std::string log_dir() const override;
  // Finds or creates the experiment and starts (or continues) the run.
  absl::Status setup() override;
  absl::Status log_metrics(const MetricMap& metrics, int64_t step) override;
  absl::Status log_hyperparams(const std::map<std::string, std::string>& params) override;
  // File store: writes the metrics logged since the last save. REST: nothing (every call was sent).
  absl::Status save() override;
  absl::Status finalize() override { return finalize_with_status("success"); }
  absl::Status finalize_with_status(absl::string_view status) override;
  absl::Status after_save_checkpoint(const SavedCheckpoints& checkpoints) override;

  // The tracking URI in use (after the defaults above), the experiment's id and the run's id (empty before setup).
  const std::string& tracking_uri() const { return tracking_uri_; }
  const std::string& experiment_id() const { return experiment_id_; }
  const std::string& run_id() const { return run_id_; }

  // What the store does (REST or file store); public for the implementation file alone.
  class Store;

 private:
  absl::Status UploadCheckpoints(const SavedCheckpoints& checkpoints);

  MLFlowLoggerOptions options_;
  std::string tracking_uri_;
  std::unique_ptr<Store> store_;
  std::string experiment_id_;
  std::string run_id_;
  std::string artifact_uri_;
  bool finalized_ = false;
  std::optional<SavedCheckpoints> checkpoints_;  // The last after_save_checkpoint's, for the end (log_model kTrue).
  std::map<std::string, int64_t> uploaded_;      // Checkpoint path -> its modification time when uploaded.
};

}  // namespace kiln

#endif  // KILN_TRAINER_LOGGERS_MLFLOW_LOGGER_H_
