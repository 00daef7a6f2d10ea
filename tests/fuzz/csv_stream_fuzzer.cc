// Fuzz target: the CSV stream (CsvStream), as `fit --data=FILE.csv --streaming` reads a user's file, a block of
// lines at a time.
//
// Input: a byte choosing the task (even: classification, odd: regression), a byte choosing the label column (as
// csv_table_fuzzer's), a byte for the batch size (1 + b % 8), one for the first pass's block (1 + b % 5 lines), one
// for the shard (even: one process; odd: rank b / 2 % 2 of 2), one for the longest line (0: the default, else
// 8 + b bytes), then the CSV text, written to a file.
//
// What must hold: no crash; an error opening it is NotFound or InvalidArgument and names the file; reading it is
// batches no larger than the batch size, of finite features as wide as its feature names and labels within its
// classes, until the end, twice alike (set_epoch starts over), and the same again from any saved position; and when
// the whole file also parses as a table (ParseCsv), with "\n" line ends and no shard or line limit, the stream's
// classes, feature names, features and labels are the table's.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "tests/fuzz/fuzz_support.h"
#include "trainer/data/csv_stream.h"
#include "trainer/data/csv_table.h"

namespace kiln {
namespace {

// Every batch of an epoch, catching what the stream throws (a line too long, a block it cannot parse).
std::optional<std::vector<Batch>> Epoch(CsvStream& stream, int64_t batch_size, std::string* error) {
  std::vector<Batch> batches;
  try {
    while (std::optional<Batch> batch = stream.next_batch()) {
      KILN_FUZZ_CHECK(batch->size() >= 1 && batch->size() <= batch_size, "a batch of the wrong size");
      batches.push_back(*std::move(batch));
    }
  } catch (const c10::Error& e) {
    *error = e.what_without_backtrace();
    return std::nullopt;
  }
  return batches;
}

bool SameBatches(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].input.equal(b[i].input) || !a[i].target.equal(b[i].target)) return false;
  }
  return true;
}

}  // namespace
}  // namespace kiln

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kiln::fuzzing::FuzzInput;
  FuzzInput input(data, size);
  kiln::CsvStreamOptions options;
  options.task = input.Byte() % 2 == 0 ? kiln::Task::kClassification : kiln::Task::kRegression;
  options.label_column = kiln::fuzzing::CsvLabelColumn(input.Byte());
  options.batch_size = 1 + input.Byte() % 8;
  options.block_lines = 1 + input.Byte() % 5;
  const uint8_t shard = input.Byte();
  const uint8_t line_limit = input.Byte();
  if (line_limit != 0) options.max_line_bytes = 8 + line_limit;
  options.normalize = false;  // The table comparison below reads raw features.
  const std::string text = input.Rest();
  if (text.size() > 16 * 1024) return 0;  // Keep each input fast.
  const char* root = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(root != nullptr ? root : "/tmp") + "/fuzz-stream-" +
                           std::to_string(reinterpret_cast<uintptr_t>(data) % 100000) + ".csv";
  std::ofstream(path, std::ios::binary) << text;

  absl::StatusOr<std::unique_ptr<kiln::CsvStream>> opened = kiln::CsvStream::Open(path, options);
  if (!opened.ok()) {
    KILN_FUZZ_CHECK(opened.status().code() == absl::StatusCode::kInvalidArgument ||
                        opened.status().code() == absl::StatusCode::kNotFound,
                    opened.status().ToString());
    KILN_FUZZ_CHECK(absl::StrContains(opened.status().message(), path), opened.status().ToString());
    std::remove(path.c_str());
    return 0;
  }
  kiln::CsvStream& stream = **opened;
  if (shard % 2 == 1) KILN_FUZZ_CHECK(stream.set_shard(shard / 2 % 2, 2).ok(), "set_shard refused a valid shard");
  const int64_t classes = stream.num_outputs();
  std::string error;
  stream.set_epoch(0);
  const std::optional<std::vector<kiln::Batch>> first = kiln::Epoch(stream, options.batch_size, &error);
  if (!first.has_value()) {
    KILN_FUZZ_CHECK(absl::StrContains(error, path), "an error reading a batch does not name the file: " + error);
    std::remove(path.c_str());
    return 0;
  }
  for (const kiln::Batch& batch : *first) {
    KILN_FUZZ_CHECK(batch.input.dim() == 2 &&
                        batch.input.size(1) == static_cast<int64_t>(stream.feature_names().size()),
                    "features width");
    KILN_FUZZ_CHECK(batch.input.isfinite().all().item<bool>(), "a non-finite feature was accepted");
    KILN_FUZZ_CHECK(batch.target.size(0) == batch.input.size(0), "one label per row");
    if (options.task == kiln::Task::kClassification) {
      KILN_FUZZ_CHECK(batch.target.min().item<int64_t>() >= 0 && batch.target.max().item<int64_t>() < classes,
                      "a class index outside the classes");
    }
  }
  // Again from the start, and from a position saved after the first batch.
  stream.set_epoch(1);
  const std::optional<std::vector<kiln::Batch>> second = kiln::Epoch(stream, options.batch_size, &error);
  KILN_FUZZ_CHECK(second.has_value() && kiln::SameBatches(*first, *second), "a second epoch read other batches");
  if (!first->empty()) {
    stream.set_epoch(2);
    stream.next_batch();
    const c10::IValue state = stream.state_dict();
    const std::optional<std::vector<kiln::Batch>> rest = kiln::Epoch(stream, options.batch_size, &error);
    stream.set_epoch(3);
    KILN_FUZZ_CHECK(stream.load_state_dict(state).ok(), "the stream refused its own state");
    const std::optional<std::vector<kiln::Batch>> resumed = kiln::Epoch(stream, options.batch_size, &error);
    KILN_FUZZ_CHECK(rest.has_value() && resumed.has_value() && kiln::SameBatches(*rest, *resumed),
                    "resuming from a saved position read other batches");
  }
  // The whole file as a table, where the two read the same text the same way.
  if (shard % 2 == 0 && line_limit == 0 && text.find('\r') == std::string::npos) {
    const absl::StatusOr<kiln::CsvTable> table =
        kiln::ParseCsv(text, path, {.label_column = options.label_column, .task = options.task});
    if (table.ok() && !first->empty()) {
      std::vector<at::Tensor> features;
      std::vector<at::Tensor> labels;
      for (const kiln::Batch& batch : *first) {
        features.push_back(batch.input);
        labels.push_back(batch.target);
      }
      KILN_FUZZ_CHECK(stream.feature_names() == table->feature_names,
                      "the stream's feature names are not the table's");
      KILN_FUZZ_CHECK(at::cat(features).equal(table->features), "the stream's features are not the table's");
      if (options.task == kiln::Task::kClassification) {
        KILN_FUZZ_CHECK(stream.class_names() == table->class_names, "the stream's classes are not the table's");
      }
      KILN_FUZZ_CHECK(at::cat(labels).equal(table->labels), "the stream's labels are not the table's");
    }
  }
  std::remove(path.c_str());
  return 0;
}
