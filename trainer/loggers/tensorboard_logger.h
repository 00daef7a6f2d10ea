// TensorBoardLogger: Lightning's TensorBoardLogger. Writes an event file
// <save_dir>/<name>/version_<N>/events.out.tfevents.<time>.<host>.<pid>.<n> that TensorBoard reads, and
// hparams.yaml beside it.
//
// Every metric of log_metrics becomes a scalar (tag = metric name, at that step), as SummaryWriter.add_scalar
// writes it. Hyper-parameters go to TensorBoard's HParams plugin as Lightning's logger sends them: with
// default_hp_metric (Lightning's default), the placeholder scalar `hp_metric` = -1 at step 0 and an `experiment`
// summary that lists the hyper-parameters and hp_metric (log the run's real score under "hp_metric" to fill the
// column), then a session-start summary with the values; a session-end summary at finalize, with the status given
// to set_session_status (Logger::finalize carries no outcome; unset, the status is "unknown"). Without
// default_hp_metric no experiment is declared, and TensorBoard builds one from the run, listing every scalar as a
// metric column. See tensorboard_events.h for the bytes.
//
// The folder is claimed by setup() (or the first write, without a trainer); the file is created on the first write and
// flushed by save(). Thread-safety: one thread at a time.
#ifndef KILN_TRAINER_LOGGERS_TENSORBOARD_LOGGER_H_
#define KILN_TRAINER_LOGGERS_TENSORBOARD_LOGGER_H_

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "trainer/core/logger.h"
#include "trainer/loggers/log_dir.h"
#include "trainer/loggers/tensorboard_events.h"
#include "trainer/loggers/tfrecord_writer.h"

namespace kiln {

class TensorBoardLogger final : public Logger {
 public:
  explicit TensorBoardLogger(LogDirOptions options);
  // Loggers of one run share `folder`, so that they write to one version.
  explicit TensorBoardLogger(std::shared_ptr<RunFolder> folder);

  std::string name() const override { return "tensorboard"; }
  std::string log_dir() const override { return folder_->path(); }
  absl::Status setup() override { return folder_->Claim().status(); }
  absl::Status log_metrics(const MetricMap& metrics, int64_t step) override;
  absl::Status log_hyperparams(const std::map<std::string, std::string>& params) override;
  // Lightning's TensorBoardLogger(default_hp_metric=...): true unless set.
  void set_default_hp_metric(bool on) { default_hp_metric_ = on; }
  absl::Status save() override;
  absl::Status finalize() override;

  // The outcome the session-end summary will record (see above); call before finalize.
  void set_session_status(SessionStatus status) { session_status_ = status; }

  // The event file's path; empty before the first write.
  std::string event_file() const { return writer_ != nullptr ? writer_->path() : ""; }

 private:
  absl::Status Open();

  std::shared_ptr<RunFolder> folder_;
  bool default_hp_metric_ = true;
  std::unique_ptr<TfRecordWriter> writer_;
  bool hparams_logged_ = false;
  SessionStatus session_status_ = SessionStatus::kUnknown;
  std::map<std::string, std::pair<int64_t, float>> last_written_;  // Each scalar's last step and value.
};

}  // namespace kiln

#endif  // KILN_TRAINER_LOGGERS_TENSORBOARD_LOGGER_H_
