// Experiment loggers: where metrics and hyper-parameters go (Lightning's Logger). Only the process with global rank
// zero calls them.
#ifndef KILN_TRAINER_CORE_LOGGER_H_
#define KILN_TRAINER_CORE_LOGGER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "trainer/core/metrics.h"

namespace kiln {

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
