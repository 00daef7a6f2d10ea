#include "trainer/data/csv_stream.h"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "ATen/ATen.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "c10/util/Exception.h"
#include "trainer/core/option_fix.h"
#include "trainer/data/csv_table.h"

namespace kiln {
namespace {

}  // namespace

// The file's lines, read through a buffer of its own (so that a line's end offset is exact) and never longer than
// `max_line_bytes`: a file without line breaks is refused rather than read whole into memory.
class CsvStream::LineReader {
 public:
  LineReader(const std::string& path, int64_t max_line_bytes)
      : path_(path), file_(path, std::ios::binary), buffer_(1 << 16), max_line_bytes_(max_line_bytes) {}
  bool is_open() const { return file_.is_open(); }
  void Seek(int64_t offset, int64_t next_line) {
    file_.clear();
    file_.seekg(offset);
    offset_ = offset;
    next_line_ = next_line;
    begin_ = end_ = 0;
  }
  // The next line (without "\n") into `line`; false at the end of the file. Throws c10::Error for a line longer
  // than max_line_bytes, naming it.
  bool Next(std::string& line) {
    line.clear();
    while (true) {
      if (begin_ == end_ && !Fill()) {
        if (line.empty()) return false;
        break;  // A last line without "\n".
      }
      const char* start = buffer_.data() + begin_;
      const char* newline = static_cast<const char*>(std::memchr(start, '\n', end_ - begin_));
      const size_t taken = newline != nullptr ? static_cast<size_t>(newline - start) : end_ - begin_;
      TORCH_CHECK(static_cast<int64_t>(line.size() + taken) <= max_line_bytes_, path_, ":", next_line_,
                  ": a line longer than ", max_line_bytes_, " bytes, the most a CSV stream reads as one line; is the "
                  "file CSV text with \"\\n\" line breaks?");
      line.append(start, taken);
      begin_ += taken + (newline != nullptr ? 1 : 0);
      offset_ += static_cast<int64_t>(taken) + (newline != nullptr ? 1 : 0);
      if (newline != nullptr) break;
    }
    ++next_line_;
    return true;
  }
  int64_t offset() const { return offset_; }      // Of the next line.
  int64_t next_line() const { return next_line_; }  // Its number (1-based).

 private:
  bool Fill() {
    file_.read(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
    begin_ = 0;
    end_ = static_cast<size_t>(file_.gcount());
    return end_ > 0;
  }
  std::string path_;
  std::ifstream file_;
  std::vector<char> buffer_;
  int64_t max_line_bytes_;
  size_t begin_ = 0;
  size_t end_ = 0;
  int64_t offset_ = 0;
  int64_t next_line_ = 1;
};

namespace {

bool Blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

// A label's value when every label is a number (csv_table.cc's rule), for the classes' order.
bool NumericLabel(const std::string& text, double* value) {
  return !text.empty() && absl::SimpleAtod(text, value) && std::isfinite(*value);
}

}  // namespace

absl::StatusOr<CsvTable> CsvStream::ParseBlock(const std::vector<std::string>& lines,
                                               const std::vector<int64_t>& numbers) const {
  std::string text = header_line_.empty() ? "" : header_line_ + "\n";
  for (const std::string& line : lines) absl::StrAppend(&text, line, "\n");
  absl::StatusOr<CsvTable> table = ParseCsv(
      text, path_, {.label_column = options_.label_column, .task = options_.task, .allow_single_class = true});
  if (!table.ok()) {
    // ParseCsv names the block's line ("path:N: ..."); give the file's.
    const std::string prefix = path_ + ":";
    std::string message(table.status().message());
    if (absl::StartsWith(message, prefix)) {
      const size_t colon = message.find(':', prefix.size());
      int64_t block_line = 0;
      if (colon != std::string::npos &&
          absl::SimpleAtoi(message.substr(prefix.size(), colon - prefix.size()), &block_line)) {
        const int64_t index = block_line - (header_line_.empty() ? 1 : 2);
        const int64_t file_line = index < 0 ? 1 : numbers[std::min<size_t>(index, numbers.size() - 1)];
        message = absl::StrCat(prefix, file_line, message.substr(colon));
      }
    }
    return absl::Status(table.status().code(), message);
  }
  if (table->has_header != !header_line_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ":", numbers.front(), ": this block of the file reads as if its first row were a header, which the "
        "file's first rows do not say; as a stream, a file needs every label of one kind (all numbers, or all text) "
        "or a header row"));
  }
  return table;
}

absl::StatusOr<std::unique_ptr<CsvStream>> CsvStream::Open(const std::string& path, const CsvStreamOptions& options) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  if (options.batch_size < 1 || options.block_lines < 1 || options.max_block_bytes < 1 ||
      options.max_line_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a CSV stream needs batch_size, block_lines, max_block_bytes and max_line_bytes >= 1, got ",
        options.batch_size, ", ", options.block_lines, ", ", options.max_block_bytes, " and ",
        options.max_line_bytes));
  }
  std::unique_ptr<CsvStream> stream(new CsvStream());
  stream->path_ = path;
  stream->size_ = static_cast<int64_t>(std::filesystem::file_size(path, error));
  stream->options_ = options;
  std::ifstream file(path, std::ios::binary);
  char magic[3] = {0, 0, 0};
  file.read(magic, 3);
  if (file.gcount() >= 2 && static_cast<unsigned char>(magic[0]) == 0x1f &&
      static_cast<unsigned char>(magic[1]) == 0x8b) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is gzip-compressed; a stream reads plain text (decompress it first: gunzip -k ", path, ")"));
  }
  // A UTF-8 byte-order mark is not part of the first cell.
  const bool bom = file.gcount() == 3 && magic[0] == '\xEF' && magic[1] == '\xBB' && magic[2] == '\xBF';
  file.close();
  try {
    return Scan(std::move(stream), bom ? 3 : 0);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(e.what_without_backtrace());
  }
}

absl::StatusOr<std::unique_ptr<CsvStream>> CsvStream::Scan(std::unique_ptr<CsvStream> stream, int64_t start) {
  const std::string& path = stream->path_;
  const CsvStreamOptions& options = stream->options_;
  LineReader reader(path, options.max_line_bytes);
  reader.Seek(start, 1);
  // The header: the file's first two non-blank lines, as ParseCsv reads them.
  std::string line;
  std::vector<std::string> first_lines;
  int64_t first_line = 0;
  int64_t after_first = start;
  while (first_lines.size() < 2 && reader.Next(line)) {
    if (Blank(line)) continue;
    if (first_lines.empty()) {
      first_line = reader.next_line() - 1;
      after_first = reader.offset();
    }
    first_lines.push_back(line);
  }
  if (first_lines.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is empty; a CSV file needs data rows"));
  }
  std::string head;
  for (const std::string& text : first_lines) absl::StrAppend(&head, text, "\n");
  absl::StatusOr<CsvTable> shape = ParseCsv(
      head, path, {.label_column = options.label_column, .task = options.task, .allow_single_class = true});
  if (!shape.ok()) return shape.status();
  stream->feature_names_ = shape->feature_names;
  stream->label_name_ = shape->label_name;
  if (shape->has_header) {
    stream->header_line_ = first_lines[0];
    stream->data_offset_ = after_first;
    stream->data_line_ = first_line + 1;
  } else {
    stream->data_offset_ = start;
    stream->data_line_ = 1;
  }

  // The first pass: every row once, a block at a time, for the classes and the statistics.
  reader.Seek(stream->data_offset_, stream->data_line_);
  const int64_t features = static_cast<int64_t>(stream->feature_names_.size());
  at::Tensor sum = at::zeros({features}, at::kDouble);
  at::Tensor squares = at::zeros({features}, at::kDouble);
  double target_sum = 0;
  double target_squares = 0;
  std::set<std::string> labels;
  bool numeric_blocks = false;
  bool text_blocks = false;
  std::vector<std::string> block;
  std::vector<int64_t> numbers;
  bool more = true;
  while (more) {
    block.clear();
    numbers.clear();
    int64_t block_bytes = 0;
    while (static_cast<int64_t>(block.size()) < options.block_lines && block_bytes < options.max_block_bytes &&
           (more = reader.Next(line))) {
      if (Blank(line)) continue;
      block_bytes += static_cast<int64_t>(line.size()) + 1;
      block.push_back(line);
      numbers.push_back(reader.next_line() - 1);
    }
    if (block.empty()) break;
    absl::StatusOr<CsvTable> table = stream->ParseBlock(block, numbers);
    if (!table.ok()) return table.status();
    stream->num_rows_ += table->num_rows();
    const at::Tensor x = table->features.to(at::kDouble);
    sum += x.sum(0);
    squares += (x * x).sum(0);
    if (options.task == Task::kClassification) {
      labels.insert(table->class_names.begin(), table->class_names.end());
      // ParseCsv names a block's classes by their values when every label in it is a number, by their text
      // otherwise: blocks of both kinds would name one class two ways.
      const bool numeric = std::all_of(table->class_names.begin(), table->class_names.end(), [](const std::string& c) {
        double value = 0;
        return NumericLabel(c, &value);
      });
      (numeric ? numeric_blocks : text_blocks) = true;
      if (numeric_blocks && text_blocks) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ":", numbers.front(), ": the label column '", stream->label_name_, "' holds numbers in some parts "
            "of the file and text in others; a stream reads labels of one kind: write every label as text (e.g. "
            "\"c3\") or every label as a number"));
      }
    } else {
      const at::Tensor y = table->labels.to(at::kDouble);
      target_sum += y.sum().item<double>();
      target_squares += (y * y).sum().item<double>();
    }
  }
  if (stream->num_rows_ == 0) return absl::InvalidArgumentError(absl::StrCat(path, " has a header but no data rows"));
  if (options.task == Task::kClassification) {
    // csv_table.h's order: numeric when every label is a number, text order otherwise.
    std::vector<std::pair<double, std::string>> numeric;
    for (const std::string& label : labels) {
      double value = 0;
      if (!NumericLabel(label, &value)) {
        numeric.clear();
        break;
      }
      numeric.emplace_back(value, label);
    }
    if (!numeric.empty()) {
      std::sort(numeric.begin(), numeric.end());
      for (auto& [value, label] : numeric) stream->class_names_.push_back(label);
    } else {
      stream->class_names_.assign(labels.begin(), labels.end());
    }
    if (stream->class_names_.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": the label column '", stream->label_name_,
                                                     "' has a single class; classification needs at least two (or "
                                                     "use ", OptionFix("Task::kRegression", "--task=regression"),
                                                     ")"));
    }
  }
  if (options.normalize) {
    const double n = static_cast<double>(stream->num_rows_);
    const at::Tensor mean = sum / n;
    const at::Tensor variance =
        n > 1 ? ((squares - n * mean * mean) / (n - 1)).clamp_min(0) : at::zeros_like(mean);
    const at::Tensor std = variance.sqrt();
    stream->statistics_.feature_mean = mean.to(at::kFloat);
    stream->statistics_.feature_std = at::where(std > 0, std, at::ones_like(std)).to(at::kFloat);
    if (options.task == Task::kRegression) {
      stream->statistics_.target_mean = target_sum / n;
      const double mean_y = stream->statistics_.target_mean;
      const double target_variance = n > 1 ? std::max(0.0, (target_squares - n * mean_y * mean_y) / (n - 1)) : 0.0;
      stream->statistics_.target_std = target_variance > 0 ? std::sqrt(target_variance) : 1.0;
    }
  }
  stream->reader_ = std::make_unique<LineReader>(path, options.max_line_bytes);
  stream->set_epoch(0);
  return stream;
}

CsvStream::~CsvStream() = default;

void CsvStream::set_epoch(int64_t epoch) {
  (void)epoch;
  reader_->Seek(data_offset_, data_line_);
  offset_ = data_offset_;
  line_ = data_line_;
  row_ = 0;
}

absl::Status CsvStream::set_shard(int rank, int world_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("set_shard(rank=", rank, ", world_size=", world_size,
                                                   "): need 0 <= rank < world_size"));
  }
  rank_ = rank;
  world_size_ = world_size;
  return absl::OkStatus();
}

std::optional<Batch> CsvStream::next_batch() {
  std::vector<std::string> lines;
  std::vector<int64_t> numbers;
  std::string line;
  while (static_cast<int64_t>(lines.size()) < options_.batch_size && reader_->Next(line)) {
    if (Blank(line)) continue;
    if (row_++ % world_size_ != rank_) continue;  // Another process's row.
    lines.push_back(std::move(line));
    numbers.push_back(reader_->next_line() - 1);
  }
  offset_ = reader_->offset();
  line_ = reader_->next_line();
  if (lines.empty()) return std::nullopt;
  max_block_lines_ = std::max<int64_t>(max_block_lines_, static_cast<int64_t>(lines.size()));
  absl::StatusOr<CsvTable> table = ParseBlock(lines, numbers);
  TORCH_CHECK(table.ok(), table.status().message());
  absl::StatusOr<Batch> batch = AsBatch(*table);
  TORCH_CHECK(batch.ok(), path_, ": ", batch.status().message(), "; the file changed while training read it");
  return *std::move(batch);
}

absl::StatusOr<Batch> CsvStream::AsBatch(const CsvTable& rows) const {
  at::Tensor features = rows.features;
  if (statistics_.feature_mean.defined()) features = (features - statistics_.feature_mean) / statistics_.feature_std;
  at::Tensor labels = rows.labels;
  if (options_.task == Task::kClassification) {
    // The rows' classes are numbered among themselves; the stream's are the whole file's.
    std::vector<int64_t> index(rows.class_names.size());
    for (size_t i = 0; i < rows.class_names.size(); ++i) {
      auto found = std::find(class_names_.begin(), class_names_.end(), rows.class_names[i]);
      if (found == class_names_.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("the class '", rows.class_names[i], "' is not among the file's classes when it was first read"));
      }
      index[i] = found - class_names_.begin();
    }
    labels = at::tensor(index, at::kLong).index_select(0, labels);
  }
  return Batch{features, labels};
}

c10::IValue CsvStream::state_dict() const {
  c10::impl::GenericDict state(c10::StringType::get(), c10::IntType::get());
  state.insert(std::string("offset"), offset_);
  state.insert(std::string("line"), line_);
  state.insert(std::string("row"), row_);
  return state;
}

absl::Status CsvStream::load_state_dict(const c10::IValue& state) {
  if (!state.isGenericDict()) return absl::InvalidArgumentError("a CSV stream's state is a dictionary");
  const c10::impl::GenericDict dict = state.toGenericDict();
  int64_t values[3];
  const char* const names[3] = {"offset", "line", "row"};
  for (int i = 0; i < 3; ++i) {
    auto found = dict.find(std::string(names[i]));
    if (found == dict.end() || !found->value().isInt() || found->value().toInt() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("a CSV stream's state needs '", names[i], "', a count >= 0"));
    }
    values[i] = found->value().toInt();
  }
  std::error_code error;
  const auto size = std::filesystem::file_size(path_, error);
  if (error || values[0] < data_offset_ || static_cast<uintmax_t>(values[0]) > size ||
      static_cast<int64_t>(size) != size_) {
    return absl::InvalidArgumentError(absl::StrCat("the saved position ", values[0], " is outside ", path_,
                                                   "'s rows, or the file changed size; is it the file the run was "
                                                   "trained on?"));
  }
  reader_->Seek(values[0], values[1]);
  offset_ = values[0];
  line_ = values[1];
  row_ = values[2];
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StreamingTableData>> StreamingTableData::Create(const std::string& path,
                                                                               const std::string& val_path,
                                                                               const CsvStreamOptions& options) {
  absl::StatusOr<std::unique_ptr<CsvStream>> stream = CsvStream::Open(path, options);
  if (!stream.ok()) return stream.status();
  std::unique_ptr<StreamingTableData> data(new StreamingTableData());
  data->stream_ = *std::move(stream);
  if (val_path.empty()) return data;
  absl::StatusOr<CsvTable> rows = ReadCsv(val_path, {.label_column = options.label_column, .task = options.task,
                                                     .allow_single_class = true});
  if (!rows.ok()) return rows.status();
  const CsvStream& train = *data->stream_;
  if (rows->feature_names.size() != train.feature_names().size()) {
    return absl::InvalidArgumentError(absl::StrCat(val_path, " has ", rows->feature_names.size(), " feature columns, ",
                                                   path, " has ", train.feature_names().size(),
                                                   "; validation rows need the training file's columns"));
  }
  absl::StatusOr<Batch> val = train.AsBatch(*rows);
  if (!val.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(val_path, ": ", val.status().message(), " (", path,
                                                   "); validation rows need the training file's classes"));
  }
  data->num_val_ = rows->num_rows();
  data->val_ = std::make_shared<TensorDataLoader>(
      val->input, val->target, TensorDataLoaderOptions{.batch_size = options.batch_size, .even_shards = false});
  return data;
}

c10::IValue StreamingTableData::state_dict() const {
  const CsvStream& train = *stream_;
  return TableState(train.task(), train.feature_names(), train.label_name(), train.class_names(), train.statistics());
}

}  // namespace kiln
