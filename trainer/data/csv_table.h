// CSV files as tensors: feature columns and one label column, for classification or regression.
//
//   a,b,c,label        <- an optional header row (detected: see below)
//   0.5,1,2.25,cat
//   ...
//
// Cells are separated by commas; a cell may be double-quoted ("a, b", with "" for a quote inside), but a quoted cell
// cannot span lines. Blank lines are skipped; lines may end with "\n", "\r\n" or a lone "\r". The text must be
// UTF-8 (a byte-order mark is dropped; other encodings are errors: text_encoding.h). Files may be gzip-compressed.
// A file whose text, line index or values would take more than InputMemoryBudget (memory_budget.h) is refused with
// ResourceExhausted before they are allocated.
//
// The header: the first row is a header when the label column is chosen by name, or when one of its feature cells is
// not a number, or when its label cell is not a number while the second row's is. Otherwise columns are named
// "column_<i>" (0-based).
//
// Labels: for classification, every distinct label is a class; classes are numbered in numeric order when all labels
// are numbers (so labels 0..9 stay 0..9) and in text order otherwise, and `class_names` keeps what the file wrote.
// Among numeric labels, "nan" or "inf" is an error naming the cell (a missing value, not a class).
// For regression, labels must be numbers.
//
// Numbers (feature cells, and regression labels) must be finite as float32: "nan", "inf" and values beyond float32's
// range are errors naming the cell, so that a model never trains on them.
#ifndef KILN_TRAINER_DATA_CSV_TABLE_H_
#define KILN_TRAINER_DATA_CSV_TABLE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/data/task.h"

namespace kiln {

struct CsvReadOptions {
  // The label column: a header name, a 0-based index, or a negative index counted from the end (-1: the last).
  std::string label_column = "-1";
  Task task = Task::kClassification;
  // For files to predict on: rows with exactly this many cells are features only. Rows with one more cell have a
  // label column (chosen by `label_column`), which is skipped. Unset: every file has a label column.
  std::optional<int64_t> num_features;
  // Rows are parsed by this many threads (>= 1); the result does not depend on it.
  int num_threads = 1;
  // Classification with a single class is accepted (a block of a larger file, csv_stream.h); otherwise refused.
  bool allow_single_class = false;
};

struct CsvTable {
  std::string source;  // The file, for messages.
  bool has_header = false;
  std::vector<std::string> feature_names;  // From the header, or "column_<i>".
  std::string label_name;                  // Empty when the file has no label column (or it was skipped).
  at::Tensor features;                     // float32 [rows, features].
  at::Tensor labels;                       // int64 class indices, float32 values, or undefined (no labels read).
  std::vector<std::string> class_names;    // Classification: the file's label for each class index.

  int64_t num_rows() const { return features.defined() ? features.size(0) : 0; }
  int64_t num_features() const { return static_cast<int64_t>(feature_names.size()); }
};

// Parses CSV `text`; `source` names it in errors. Every error is InvalidArgument and names the source, the line
// (1-based, counting the header and blank lines), the column and the cell, and what would be accepted; except a text
// too large for memory, which is ResourceExhausted.
absl::StatusOr<CsvTable> ParseCsv(absl::string_view text, const std::string& source, const CsvReadOptions& options);

// Reads and parses a CSV file (plain or gzip). NotFound when the file does not exist.
absl::StatusOr<CsvTable> ReadCsv(const std::string& path, const CsvReadOptions& options);

}  // namespace kiln

#endif  // KILN_TRAINER_DATA_CSV_TABLE_H_
