#include "trainer/loggers/csv_logger.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "trainer/io/durable_file.h"
#include "trainer/loggers/hparams_yaml.h"

namespace kiln {
namespace {

// Appends the shortest decimal text that reads back as `value`.
void AppendShortestDouble(std::string& text, double value) {
  char buffer[64];
  const std::to_chars_result result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  text.append(buffer, result.ptr);
}

}  // namespace

std::string ShortestDouble(double value) {
  std::string text;
  AppendShortestDouble(text, value);
  return text;
}

CsvLogger::CsvLogger(LogDirOptions options) : CsvLogger(std::make_shared<RunFolder>(std::move(options))) {}

CsvLogger::CsvLogger(std::shared_ptr<RunFolder> folder) : folder_(std::move(folder)) { step_column_ = Column("step"); }

uint32_t CsvLogger::Column(const std::string& name) {
  const auto [found, added] = columns_.try_emplace(name, static_cast<uint32_t>(names_.size()));
  if (added) names_.push_back(name);
  return found->second;
}

absl::Status CsvLogger::log_metrics(const MetricMap& metrics, int64_t step) {
  Row& row = pending_.emplace_back();
  row.step = step;
  row.cells.reserve(metrics.size());
  for (const auto& [name, value] : metrics) {
    const uint32_t column = Column(name);
    if (column != step_column_) row.cells.emplace_back(column, value);  // A metric named "step" is the step.
  }
  return absl::OkStatus();
}

absl::Status CsvLogger::log_hyperparams(const std::map<std::string, std::string>& params) {
  hparams_ = params;
  hparams_pending_ = true;
  return absl::OkStatus();
}

absl::Status CsvLogger::WriteRows(const std::vector<Row>& rows, bool rewrite) {
  const std::string path = metrics_file();
  std::string text;
  if (rewrite) {
    for (size_t i = 0; i < header_.size(); ++i) absl::StrAppend(&text, i == 0 ? "" : ",", names_[header_[i]]);
    text += '\n';
  }
  // Where each column's value is in the row being written (-1: not in it).
  std::vector<int64_t> cell_of(names_.size(), -1);
  for (const Row& row : rows) {
    for (size_t i = 0; i < row.cells.size(); ++i) cell_of[row.cells[i].first] = static_cast<int64_t>(i);
    for (size_t i = 0; i < header_.size(); ++i) {
      if (i > 0) text += ',';
      const uint32_t column = header_[i];
      if (column == step_column_) {
        absl::StrAppend(&text, row.step);
      } else if (cell_of[column] >= 0) {
        AppendShortestDouble(text, row.cells[cell_of[column]].second);
      }
    }
    text += '\n';
    for (const auto& [column, value] : row.cells) cell_of[column] = -1;
  }
  // A wider header rewrites the whole file: atomically, so that a kill in the middle leaves the old file whole.
  if (rewrite) return WriteFileDurably(path, text);
  std::ofstream file(path, std::ios::app);
  file << text;
  file.flush();
  if (!file) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status CsvLogger::save() {
  if (pending_.empty() && !hparams_pending_) return absl::OkStatus();
  absl::StatusOr<std::string> folder = folder_->Claim();
  if (!folder.ok()) return folder.status();
  if (hparams_pending_) {
    if (absl::Status written = WriteHparamsYaml(*folder + "/hparams.yaml", hparams_); !written.ok()) return written;
    hparams_pending_ = false;
  }
  if (pending_.empty()) return absl::OkStatus();
  // The header is every column a row has used, and the step; it widens when a row brings a new one.
  std::vector<bool> in_header(names_.size(), false);
  for (const uint32_t column : header_) in_header[column] = true;
  const size_t header_size = header_.size();
  const auto use = [&](uint32_t column) {
    if (!in_header[column]) {
      in_header[column] = true;
      header_.push_back(column);
    }
  };
  for (const Row& row : pending_) {
    use(step_column_);
    for (const auto& [column, value] : row.cells) use(column);
  }
  const bool new_keys = header_.size() > header_size;
  if (new_keys) {
    std::sort(header_.begin(), header_.end(), [&](uint32_t a, uint32_t b) { return names_[a] < names_[b]; });
  }
  absl::Status status;
  if (new_keys) {
    written_.insert(written_.end(), std::make_move_iterator(pending_.begin()), std::make_move_iterator(pending_.end()));
    status = WriteRows(written_, /*rewrite=*/true);
  } else {
    status = WriteRows(pending_, /*rewrite=*/false);
    written_.insert(written_.end(), std::make_move_iterator(pending_.begin()), std::make_move_iterator(pending_.end()));
  }
  pending_.clear();
  return status;
}

}  // namespace kiln
