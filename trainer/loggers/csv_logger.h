// CsvLogger: Lightning's CSVLogger. Writes <save_dir>/<name>/version_<N>/metrics.csv and hparams.yaml.
//
// metrics.csv has one row per log_metrics call, with a `step` column and one column per metric name, sorted by
// name; a metric missing from a row leaves its cell empty. Rows are buffered and written by save() (the trainer
// calls it every epoch and at the end); when new names appear the file is rewritten with the wider header, as
// Lightning does. Values are written in the shortest form that reads back as the same double.
//
// The folder is claimed by setup() (or the first save() with something to write, without a trainer), so a run that
// fails its checks leaves no folder behind. Thread-safety: one thread at a time (the trainer calls loggers from the
// loop thread).
#ifndef KILN_TRAINER_LOGGERS_CSV_LOGGER_H_
#define KILN_TRAINER_LOGGERS_CSV_LOGGER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "trainer/core/logger.h"
#include "trainer/loggers/log_dir.h"

namespace kiln {

class CsvLogger final : public Logger {
 public:
  explicit CsvLogger(LogDirOptions options);
  // Loggers of one run share `folder`, so that they write to one version.
  explicit CsvLogger(std::shared_ptr<RunFolder> folder);

  std::string name() const override { return "csv"; }
  std::string log_dir() const override { return folder_->path(); }
  absl::Status setup() override { return folder_->Claim().status(); }
  absl::Status log_metrics(const MetricMap& metrics, int64_t step) override;
  absl::Status log_hyperparams(const std::map<std::string, std::string>& params) override;
  absl::Status save() override;

  std::string metrics_file() const { return log_dir() + "/metrics.csv"; }

 private:
  // A row as logged: its values by column (an index into `names_`), in the metrics' order, and its step. Cells
  // become text when written, so that logging a row costs a lookup per metric and no string.
  struct Row {
    std::vector<std::pair<uint32_t, double>> cells;
    int64_t step = 0;
  };
  uint32_t Column(const std::string& name);
  absl::Status WriteRows(const std::vector<Row>& rows, bool rewrite);

  std::shared_ptr<RunFolder> folder_;
  std::vector<Row> written_;  // Every row written so far, to rewrite the file when the header widens.
  std::vector<Row> pending_;
  absl::flat_hash_map<std::string, uint32_t> columns_;  // Each name's column.
  std::vector<std::string> names_;                      // The columns' names, in the order they first came.
  std::vector<uint32_t> header_;                        // The columns written, sorted by name.
  uint32_t step_column_ = 0;
  std::map<std::string, std::string> hparams_;
  bool hparams_pending_ = false;
};

// The shortest decimal text that reads back as `value` ("0.1", "3", "1e-07", "nan", "inf").
std::string ShortestDouble(double value);

}  // namespace kiln

#endif  // KILN_TRAINER_LOGGERS_CSV_LOGGER_H_
