// Experiment loggers: where metrics and hyper-parameters go (Lightning's Logger). Only the process with global rank
// zero calls them.
#ifndef KILN_TRAINER_CORE_LOGGER_H_
#define KILN_TRAINER_CORE_LOGGER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "trainer/core/metrics.h"

namespace kiln {

// What a ModelCheckpoint callback holds after a save, as Lightning's Logger.after_save_checkpoint sees the callback:
// the files it keeps and why (for loggers that upload checkpoints, log_model). Paths are as the callback wrote them;
// a file may still be on its way to the disk (checkpoints are written in the background) and appears whole, under
// its name, once written.
struct SavedCheckpoints {
  std::string dirpath;
  std::vector<std::string> written;     // The files this save wrote (queued to the background writer).
  std::string last_model_path;          // Empty without save_last.
  std::optional<double> current_score;  // The monitored value of this save; unset without a monitor.
  std::string best_model_path;
  std::optional<double> best_model_score;
  std::map<std::string, double> best_k_models;  // Path -> monitored value; empty without a monitor.
  // The callback's settings.
  std::optional<std::string> monitor;
  std::string mode = "min";
  bool save_last = false;
  int64_t save_top_k = 1;
  bool save_weights_only = false;
  int64_t every_n_train_steps = 0;
  int64_t every_n_epochs = 1;
};

class Logger {
 public:
  virtual ~Logger() = default;
  virtual std::string name() const = 0;
  // The folder this run writes to (checkpoints go to `<log_dir>/checkpoints` when the first logger has one);
  // empty when the logger writes no files.
  virtual std::string log_dir() const { return ""; }
  // Called by the Trainer on the process with global rank zero alone, once per fit, validate or test, after the
  // run's input checks (the checkpoint to resume from included) and before anything is logged or checkpointed. A
  // logger that writes files claims its folder here (log_dir() is final afterwards); an error stops the run.
  virtual absl::Status setup() { return absl::OkStatus(); }
  virtual absl::Status log_metrics(const MetricMap& metrics, int64_t step) = 0;
  virtual absl::Status log_hyperparams(const std::map<std::string, std::string>& params) = 0;
  // Flushes what is buffered; called at the end of every epoch and when the run ends.
  virtual absl::Status save() { return absl::OkStatus(); }
  virtual absl::Status finalize() { return save(); }
  // Lightning's finalize(status): the same, told how the run ended, "success" or "failed" (a run's status in MLflow,
  // its exit code in W&B). The Trainer calls this form; by default it is finalize().
  virtual absl::Status finalize_with_status(absl::string_view status) { return finalize(); }
  // Lightning's after_save_checkpoint: called on global rank zero after every save of a ModelCheckpoint, with what
  // it keeps (for loggers that upload checkpoints). An error stops the run.
  virtual absl::Status after_save_checkpoint(const SavedCheckpoints& checkpoints) { return absl::OkStatus(); }
};

// Keeps every logged row in memory; for programs that read metrics back, and for tests.
class MemoryLogger final : public Logger {
 public:
  struct Row {
    int64_t step;
    MetricMap metrics;
  };
  std::string name() const override { return "memory"; }
  absl::Status log_metrics(const MetricMap& metrics, int64_t step) override {
    rows_.push_back({step, metrics});
    return absl::OkStatus();
  }
  absl::Status log_hyperparams(const std::map<std::string, std::string>& params) override {
    hyperparams_ = params;
    return absl::OkStatus();
  }
  const std::vector<Row>& rows() const { return rows_; }
  const std::map<std::string, std::string>& hyperparams() const { return hyperparams_; }

 private:
  std::vector<Row> rows_;
  std::map<std::string, std::string> hyperparams_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_CORE_LOGGER_H_
