#include "trainer/loggers/csv_logger.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainer/loggers/atomic_file.h"
#include "trainer/loggers/hparams_yaml.h"

namespace kiln {
std::string ShortestDouble(double value) {
  char buffer[64];
  const std::to_chars_result result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

CsvLogger::CsvLogger(LogDirOptions options) : CsvLogger(std::make_shared<RunFolder>(std::move(options))) {}

CsvLogger::CsvLogger(std::shared_ptr<RunFolder> folder) : folder_(std::move(folder)) {}

absl::Status CsvLogger::log_metrics(const MetricMap& metrics, int64_t step) {
  Row row;
  for (const auto& [name, value] : metrics) row[name] = ShortestDouble(value);
  row["step"] = absl::StrCat(step);
  pending_.push_back(std::move(row));
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
  if (rewrite) absl::StrAppend(&text, absl::StrJoin(keys_, ","), "\n");
  for (const Row& row : rows) {
    std::vector<std::string> cells;
    for (const std::string& key : keys_) {
      auto found = row.find(key);
      cells.push_back(found == row.end() ? "" : found->second);
    }
    absl::StrAppend(&text, absl::StrJoin(cells, ","), "\n");
  }
  // A wider header rewrites the whole file: atomically, so that a kill in the middle leaves the old file whole.
  if (rewrite) return WriteFileAtomically(path, text);
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
  bool new_keys = false;
  for (const Row& row : pending_) {
    for (const auto& [key, value] : row) {
      if (std::find(keys_.begin(), keys_.end(), key) == keys_.end()) {
        keys_.push_back(key);
        new_keys = true;
      }
    }
  }
  std::sort(keys_.begin(), keys_.end());
  absl::Status status;
  if (new_keys) {
    written_.insert(written_.end(), pending_.begin(), pending_.end());
    status = WriteRows(written_, /*rewrite=*/true);
  } else {
    status = WriteRows(pending_, /*rewrite=*/false);
    written_.insert(written_.end(), pending_.begin(), pending_.end());
  }
  pending_.clear();
  return status;
}

}  // namespace kiln
