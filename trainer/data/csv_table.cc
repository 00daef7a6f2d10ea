#include "trainer/data/csv_table.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <thread>
#include <utility>

#include "ATen/ATen.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainer/core/option_fix.h"
#include "trainer/io/memory_budget.h"
#include "trainer/data/text_encoding.h"
#include "trainer/data/text_file.h"

namespace kiln {
namespace {

struct Line {
  int64_t number;  // 1-based, in the file.
  absl::string_view text;
};

// One row's cells. Quoted cells with "" inside are unescaped into `scratch`, which owns them.
struct Cells {
  std::vector<absl::string_view> values;
  std::deque<std::string> scratch;
};

// Splits one line into cells; false (with `error`) on an unterminated quote.
bool SplitCells(absl::string_view line, Cells& cells, std::string& error) {
  cells.values.clear();
  cells.scratch.clear();
  size_t pos = 0;
  while (true) {
    // Leading spaces before a quote are allowed.
    size_t start = pos;
    while (start < line.size() && (line[start] == ' ' || line[start] == '\t')) ++start;
    if (start < line.size() && line[start] == '"') {
      std::string value;
      size_t i = start + 1;
      bool closed = false;
      bool escaped = false;
      for (; i < line.size(); ++i) {
        if (line[i] != '"') {
          value.push_back(line[i]);
        } else if (i + 1 < line.size() && line[i + 1] == '"') {
          value.push_back('"');
          escaped = true;
          ++i;
        } else {
          closed = true;
          break;
        }
      }
      if (!closed) {
        error = "a quoted cell is not closed (quoted cells cannot span lines)";
        return false;
      }
      if (escaped) {
        cells.scratch.push_back(std::move(value));
        cells.values.push_back(cells.scratch.back());
      } else {
        cells.values.push_back(line.substr(start + 1, i - start - 1));
      }
      const size_t comma = line.find(',', i + 1);
      if (comma == absl::string_view::npos) return true;
      pos = comma + 1;
      continue;
    }
    const size_t comma = line.find(',', pos);
    cells.values.push_back(absl::StripAsciiWhitespace(
        line.substr(pos, comma == absl::string_view::npos ? absl::string_view::npos : comma - pos)));
    if (comma == absl::string_view::npos) return true;
    pos = comma + 1;
  }
}

bool IsNumber(absl::string_view cell) {
  double value = 0;
  return !cell.empty() && absl::SimpleAtod(cell, &value);
}

std::string Quote(absl::string_view cell) { return absl::StrCat("'", cell, "'"); }

// A cell's value as the float32 that training uses. Empty when the cell is not a number, or is one that float32
// cannot hold as a finite value ("nan", "inf", 1e39): a model must never see a NaN or an infinity from the data.
// `problem` then says which.
std::optional<float> FiniteValue(absl::string_view cell, std::string& problem) {
  double value = 0;
  if (cell.empty() || !absl::SimpleAtod(cell, &value)) {  // IsNumber, keeping the value it parses.
    problem = "is not a number";
    return std::nullopt;
  }
  const float single = static_cast<float>(value);
  if (!std::isfinite(single)) {
    problem = std::isnan(value) ? "is not a number (NaN)" : "is not a finite float32 (beyond +-3.4e38)";
    return std::nullopt;
  }
  return single;
}

// Where a row went wrong, so that the earliest error wins however the rows were split between threads.
struct RowError {
  int64_t row = -1;
  std::string message;
};

}  // namespace

absl::StatusOr<CsvTable> ParseCsv(absl::string_view raw_text, const std::string& source,
                                  const CsvReadOptions& options) {
  absl::StatusOr<absl::string_view> utf8 = Utf8Text(raw_text, source);
  if (!utf8.ok()) return utf8.status();
  const absl::string_view text = *utf8;
  // Every line is indexed, and every cell becomes a float: both are bounded by the memory an input may take.
  const uint64_t breaks = static_cast<uint64_t>(std::count(text.begin(), text.end(), '\n')) +
                          static_cast<uint64_t>(std::count(text.begin(), text.end(), '\r')) + 1;
  const std::string fix = "split the file, or train from a DataModule of your own that streams it";
  if (absl::Status fits = CheckInputFits(SaturatingMultiply(breaks, sizeof(Line)), source + "'s line index", fix);
      !fits.ok()) {
    return fits;
  }
  std::vector<Line> lines;
  int64_t number = 0;
  // Lines end with "\n" (Unix), "\r\n" (Windows) or a lone "\r" (classic Mac OS, and some spreadsheet exports).
  for (size_t start = 0; start <= text.size();) {
    size_t end = text.find_first_of("\r\n", start);
    if (end == absl::string_view::npos) end = text.size();
    absl::string_view line = text.substr(start, end - start);
    ++number;
    if (!absl::StripAsciiWhitespace(line).empty()) lines.push_back({number, line});
    start = end + (end + 1 < text.size() && text[end] == '\r' && text[end + 1] == '\n' ? 2 : 1);
  }
  if (lines.empty()) return absl::InvalidArgumentError(absl::StrCat(source, " is empty; a CSV file needs data rows"));

  const auto at = [&](const Line& line) { return absl::StrCat(source, ":", line.number, ": "); };
  Cells first;
  std::string error;
  if (!SplitCells(lines[0].text, first, error)) return absl::InvalidArgumentError(absl::StrCat(at(lines[0]), error));
  const int64_t width = static_cast<int64_t>(first.values.size());

  // Which column holds the label, if any.
  const bool features_only = options.num_features.has_value() && width == *options.num_features;
  if (options.num_features.has_value() && !features_only && width != *options.num_features + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        at(lines[0]), width, " columns, but the model was trained on ", *options.num_features,
        " features; pass a file with ", *options.num_features, " feature columns (and optionally the label column)"));
  }
  int64_t label_index = -1;
  bool label_by_name = false;
  int64_t index = 0;
  if (features_only) {
    // No label column to find.
  } else if (absl::SimpleAtoi(options.label_column, &index)) {
    if (index < -width || index >= width) {
      return absl::InvalidArgumentError(absl::StrCat("label column ", index, " is out of range for ", source,
                                                     ", which has ", width, " columns; pass an index in [", -width,
                                                     ", ", width - 1, "] or a header name"));
    }
    label_index = index < 0 ? width + index : index;
  } else {
    label_by_name = true;
    for (int64_t i = 0; i < width; ++i) {
      if (first.values[i] != options.label_column) continue;
      if (label_index >= 0) {  // Which one the user meant cannot be told.
        return absl::InvalidArgumentError(absl::StrCat(
            "label column '", options.label_column, "' appears twice in the header of ", source, " (columns ",
            label_index + 1, " and ", i + 1, "); rename one, or pass the label column's index (e.g. ",
            label_index, ")"));
      }
      label_index = i;
    }
    if (label_index < 0) {
      std::vector<std::string> names(first.values.begin(), first.values.end());
      return absl::InvalidArgumentError(
          absl::StrCat("label column '", options.label_column, "' is not in the header of ", source, " (",
                       absl::StrJoin(names, ", "), "); pass one of these names or a column index"));
    }
  }
  if (width < 2 && !features_only) {
    return absl::InvalidArgumentError(
        absl::StrCat(at(lines[0]), "only ", width, " column; a CSV file needs feature columns and a label column"));
  }
  const bool read_labels = label_index >= 0 && !options.num_features.has_value();

  bool header = label_by_name && label_index >= 0;
  for (int64_t i = 0; i < width && !header; ++i) {
    if (i != label_index && !IsNumber(first.values[i])) header = true;
  }
  if (!header && label_index >= 0 && !IsNumber(first.values[label_index]) && lines.size() > 1) {
    Cells second;
    if (SplitCells(lines[1].text, second, error) && static_cast<int64_t>(second.values.size()) == width &&
        IsNumber(second.values[label_index])) {
      header = true;
    }
  }

  CsvTable table;
  table.source = source;
  table.has_header = header;
  for (int64_t i = 0; i < width; ++i) {
    std::string name = header ? std::string(first.values[i]) : absl::StrCat("column_", i);
    if (i == label_index) {
      if (read_labels) table.label_name = std::move(name);
    } else {
      table.feature_names.push_back(std::move(name));
    }
  }
  const size_t first_row = header ? 1 : 0;
  const int64_t rows = static_cast<int64_t>(lines.size() - first_row);
  if (rows == 0) return absl::InvalidArgumentError(absl::StrCat(source, " has a header but no data rows"));
  const int64_t num_features = table.num_features();

  if (absl::Status fits = CheckInputFits(SaturatingMultiply(static_cast<uint64_t>(rows), (num_features + 1) * 4),
                                         source + "'s values", fix);
      !fits.ok()) {
    return fits;
  }
  std::vector<float> features(static_cast<size_t>(rows * num_features));
  std::vector<std::string> label_text(read_labels && options.task == Task::kClassification ? rows : 0);
  std::vector<float> label_values(read_labels && options.task == Task::kRegression ? rows : 0);

  const int threads = std::max(1, std::min<int>(options.num_threads, static_cast<int>((rows + 1023) / 1024)));
  std::vector<RowError> errors(threads);
  const auto parse_rows = [&](int thread, int64_t begin, int64_t end) {
    Cells cells;
    std::string split_error;
    RowError& row_error = errors[thread];
    for (int64_t row = begin; row < end; ++row) {
      const Line& line = lines[first_row + row];
      const auto fail = [&](std::string message) { row_error = {row, absl::StrCat(at(line), message)}; };
      if (!SplitCells(line.text, cells, split_error)) return fail(split_error);
      if (static_cast<int64_t>(cells.values.size()) != width) {
        return fail(absl::StrCat(cells.values.size(), " cells, but the first row has ", width,
                                 "; every row needs the same columns"));
      }
      float* out = features.data() + row * num_features;
      for (int64_t i = 0, feature = 0; i < width; ++i) {
        const absl::string_view cell = cells.values[i];
        if (i == label_index) {
          if (!read_labels) continue;
          if (options.task == Task::kClassification) {
            if (cell.empty())
              return fail(absl::StrCat("the label (column ", i + 1, ", '", table.label_name,
                                       "') is empty; every row needs a label"));
            label_text[row] = std::string(cell);
          } else {
            std::string problem;
            const std::optional<float> value = FiniteValue(cell, problem);
            if (!value.has_value()) {
              return fail(absl::StrCat("label ", Quote(cell), " (column ", i + 1, ", '", table.label_name, "') ",
                                       problem, "; ",
                                       OptionFix("Task::kRegression needs finite numeric labels (or use "
                                                 "Task::kClassification)",
                                                 "--task=regression needs finite numeric labels (or use "
                                                 "--task=classification)")));
            }
            label_values[row] = *value;
          }
          continue;
        }
        std::string problem;
        const std::optional<float> value = FiniteValue(cell, problem);
        if (!value.has_value()) {
          return fail(absl::StrCat("column ", i + 1, " ('", table.feature_names[feature], "'): ", Quote(cell), " ",
                                   problem, "; feature cells must be finite numbers (fill in missing values, or ",
                                   "choose the label column with --label_column)"));
        }
        out[feature++] = *value;
      }
    }
  };
  if (threads == 1) {
    parse_rows(0, 0, rows);
  } else {
    std::vector<std::thread> pool;
    const int64_t chunk = (rows + threads - 1) / threads;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back(parse_rows, t, std::min(rows, t * chunk), std::min(rows, (t + 1) * chunk));
    }
    for (std::thread& thread : pool) thread.join();
  }
  for (const RowError& row_error : errors) {  // Threads own increasing row ranges: the first error is the earliest.
    if (row_error.row >= 0) return absl::InvalidArgumentError(row_error.message);
  }

  table.features = at::from_blob(features.data(), {rows, num_features}, at::kFloat).clone();
  if (!read_labels) return table;
  if (options.task == Task::kRegression) {
    table.labels = at::from_blob(label_values.data(), {rows}, at::kFloat).clone();
    return table;
  }
  // Classes: numeric order when every label is a number, text order otherwise. A number that is not finite ("nan",
  // "inf") among numeric labels is a missing or broken value, not a class: it has no place in the order.
  bool numeric = true;
  std::vector<double> numbers(rows);
  int64_t non_finite = -1;
  for (int64_t row = 0; row < rows && numeric; ++row) {
    numeric = IsNumber(label_text[row]) && absl::SimpleAtod(label_text[row], &numbers[row]);
    if (numeric && !std::isfinite(numbers[row]) && non_finite < 0) non_finite = row;
  }
  if (numeric && non_finite >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        at(lines[first_row + non_finite]), "label ", Quote(label_text[non_finite]), " (column ", label_index + 1, ", '",
        table.label_name, "') is not a finite number, but the other labels are numbers; fill in or drop the rows "
        "whose label is missing"));
  }
  std::vector<int64_t> classes(rows);
  if (numeric) {
    std::vector<double> distinct = numbers;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    for (double value : distinct) table.class_names.push_back(absl::StrCat(value));
    for (int64_t row = 0; row < rows; ++row) {
      classes[row] = std::lower_bound(distinct.begin(), distinct.end(), numbers[row]) - distinct.begin();
    }
  } else {
    std::map<std::string, int64_t> distinct;
    for (const std::string& label : label_text) distinct.emplace(label, 0);
    for (auto& [label, class_index] : distinct) {
      class_index = static_cast<int64_t>(table.class_names.size());
      table.class_names.push_back(label);
    }
    for (int64_t row = 0; row < rows; ++row) classes[row] = distinct.at(label_text[row]);
  }
  if (table.class_names.size() < 2 && !options.allow_single_class) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": the label column '", table.label_name,
                                                   "' has a single class ('", table.class_names[0],
                                                   "'); classification needs at least two (or use ",
                                                   OptionFix("Task::kRegression", "--task=regression"), ")"));
  }
  table.labels = at::from_blob(classes.data(), {rows}, at::kLong).clone();
  return table;
}

absl::StatusOr<CsvTable> ReadCsv(const std::string& path, const CsvReadOptions& options) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) return text.status();
  return ParseCsv(*text, path, options);
}

}  // namespace kiln
