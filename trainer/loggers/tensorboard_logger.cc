#include "trainer/loggers/tensorboard_logger.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "trainer/loggers/hparams_yaml.h"
#include "trainer/loggers/tensorboard_events.h"

namespace kiln {
namespace {

double WallTime() { return static_cast<double>(absl::ToUnixMicros(absl::Now())) / 1e6; }

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

TensorBoardLogger::TensorBoardLogger(LogDirOptions options)
    : TensorBoardLogger(std::make_shared<RunFolder>(std::move(options))) {}

TensorBoardLogger::TensorBoardLogger(std::shared_ptr<RunFolder> folder) : folder_(std::move(folder)) {}

absl::Status TensorBoardLogger::Open() {
  if (writer_ != nullptr) return absl::OkStatus();
  absl::StatusOr<std::string> folder = folder_->Claim();
  if (!folder.ok()) return folder.status();
  // SummaryWriter's name: events.out.tfevents.<seconds>.<host>.<pid>.<n>, n counting files in this process.
  static std::atomic<int> files{0};
  const std::string path = absl::StrCat(*folder, "/events.out.tfevents.", absl::ToUnixSeconds(absl::Now()), ".",
                                        HostName(), ".", getpid(), ".", files++);
  absl::StatusOr<std::unique_ptr<TfRecordWriter>> writer = TfRecordWriter::Open(path);
  if (!writer.ok()) return writer.status();
  writer_ = std::move(writer).value();
  return writer_->Write(FileVersionEvent(WallTime()));
}

absl::Status TensorBoardLogger::log_metrics(const MetricMap& metrics, int64_t step) {
  if (absl::Status opened = Open(); !opened.ok()) return opened;
  const double now = WallTime();
  for (const auto& [tag, value] : metrics) {
    // Rows logged at one step all say their epoch (Lightning's validation and epoch rows share a step): a scalar
    // already written at this step with this value is not written again.
    const auto written_before = last_written_.find(tag);
    if (written_before != last_written_.end() && written_before->second.first == step &&
        written_before->second.second == static_cast<float>(value)) {
      continue;
    }
    if (absl::Status written = writer_->Write(ScalarEvent(now, step, tag, static_cast<float>(value))); !written.ok()) {
      return written;
    }
    last_written_[tag] = {step, static_cast<float>(value)};
  }
  return absl::OkStatus();
}

absl::Status TensorBoardLogger::log_hyperparams(const std::map<std::string, std::string>& params) {
  if (absl::Status opened = Open(); !opened.ok()) return opened;
  if (absl::Status written = WriteHparamsYaml(log_dir() + "/hparams.yaml", params); !written.ok()) return written;
  hparams_logged_ = true;
  const double now = WallTime();
  if (default_hp_metric_) {
    if (absl::Status written = log_metrics({{"hp_metric", -1.0}}, 0); !written.ok()) return written;
    if (absl::Status written = writer_->Write(HParamsExperimentEvent(now, params, {"hp_metric"})); !written.ok()) {
      return written;
    }
  }
  return writer_->Write(HParamsStartEvent(now, params));
}

absl::Status TensorBoardLogger::save() { return writer_ != nullptr ? writer_->Flush() : absl::OkStatus(); }

absl::Status TensorBoardLogger::finalize() {
  if (writer_ == nullptr) return absl::OkStatus();
  // A trainer that logs again (test after fit) writes a new event file in the same folder, as SummaryWriter does
  // after close(); TensorBoard reads the folder's files as one run.
  std::unique_ptr<TfRecordWriter> writer = std::move(writer_);
  last_written_.clear();
  if (hparams_logged_) {
    hparams_logged_ = false;
    if (absl::Status written = writer->Write(HParamsEndEvent(WallTime(), session_status_)); !written.ok()) {
      return written;
    }
  }
  return writer->Close();
}

}  // namespace kiln
