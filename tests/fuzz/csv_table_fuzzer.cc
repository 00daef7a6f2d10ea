// Fuzz target: the CSV loader (ParseCsv), as `fit --data=FILE.csv` reads a user's file.
//
// Input: a byte choosing the task (even: classification, odd: regression), a byte choosing the label column
// (0: the default "-1", 1: the first column "0", 2: the header name "label", 3: "-2", else "7"), a byte choosing
// the parser threads (odd: also parse with 2 threads and compare), a byte choosing predict mode (0: a training file;
// n > 0: a file to predict on with a model of n % 8 features, as `fit --mode=predict --predict_data=FILE`), then
// the CSV text.
//
// What must hold: no crash; an error is InvalidArgument and names the source; a table has finite float32 features
// as wide as its feature names (the model's width in predict mode, and then no labels), as many label entries as
// rows, and for classification class indices below the number of class names (for regression, finite values). The
// result must not depend on the number of threads, nor on the line ends ("\r\n" and a lone "\r" read as "\n") or a
// UTF-8 byte-order mark.
#include <string>

#include "ATen/ATen.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "tests/fuzz/fuzz_support.h"
#include "trainer/data/csv_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kiln::fuzzing::FuzzInput;
  FuzzInput input(data, size);
  kiln::CsvReadOptions options;
  options.task = input.Byte() % 2 == 0 ? kiln::Task::kClassification : kiln::Task::kRegression;
  options.label_column = kiln::fuzzing::CsvLabelColumn(input.Byte());
  const uint8_t threads = input.Byte();
  if (const uint8_t predict = input.Byte(); predict != 0) options.num_features = predict % 8;
  const std::string text = input.Rest();
  if (text.size() > 64 * 1024) return 0;  // Keep each input fast; size is not what this target explores.

  options.num_threads = 1;
  const absl::StatusOr<kiln::CsvTable> one = kiln::ParseCsv(text, "fuzz.csv", options);
  if (!one.ok()) {
    KILN_FUZZ_CHECK(one.status().code() == absl::StatusCode::kInvalidArgument, one.status().ToString());
    KILN_FUZZ_CHECK(absl::StrContains(one.status().message(), "fuzz.csv"), one.status().ToString());
  } else {
    const kiln::CsvTable& table = *one;
    KILN_FUZZ_CHECK(table.features.defined() && table.features.dim() == 2, "features shape");
    KILN_FUZZ_CHECK(table.features.scalar_type() == at::kFloat, "features dtype");
    KILN_FUZZ_CHECK(table.features.isfinite().all().item<bool>(), "a non-finite feature was accepted");
    KILN_FUZZ_CHECK(table.features.size(1) == table.num_features(), "features width");
    if (options.num_features.has_value()) {
      KILN_FUZZ_CHECK(table.num_features() == *options.num_features, "predict mode: not the model's width");
      KILN_FUZZ_CHECK(!table.labels.defined(), "predict mode: labels read");
    }
    if (table.labels.defined()) {
      KILN_FUZZ_CHECK(table.labels.size(0) == table.num_rows(), "one label per row");
      if (options.task == kiln::Task::kClassification && table.num_rows() > 0) {
        KILN_FUZZ_CHECK(table.labels.min().item<int64_t>() >= 0, "class index below 0");
        KILN_FUZZ_CHECK(table.labels.max().item<int64_t>() < static_cast<int64_t>(table.class_names.size()),
                        "class index beyond the class names");
      }
      if (options.task == kiln::Task::kRegression) {
        KILN_FUZZ_CHECK(table.labels.isfinite().all().item<bool>(), "a non-finite label was accepted");
      }
    }
  }
  // The same text with Unix line ends, and without a byte-order mark, gives the same table.
  std::string unix_text;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\r') {
      unix_text.push_back(text[i]);
    } else if (i + 1 >= text.size() || text[i + 1] != '\n') {
      unix_text.push_back('\n');
    }
  }
  if (unix_text.rfind("\xEF\xBB\xBF", 0) == 0) unix_text.erase(0, 3);
  if (unix_text != text) {
    const absl::StatusOr<kiln::CsvTable> plain = kiln::ParseCsv(unix_text, "fuzz.csv", options);
    KILN_FUZZ_CHECK(plain.ok() == one.ok(), "line ends or a byte-order mark changed whether the file parses");
    if (one.ok()) {
      KILN_FUZZ_CHECK(plain->features.equal(one->features) && plain->class_names == one->class_names &&
                          plain->feature_names == one->feature_names,
                      "line ends or a byte-order mark changed the table");
    }
  }
  if (threads % 2 == 1) {
    options.num_threads = 2;
    const absl::StatusOr<kiln::CsvTable> two = kiln::ParseCsv(text, "fuzz.csv", options);
    KILN_FUZZ_CHECK(two.ok() == one.ok(), "the thread count changed whether the file parses");
    if (one.ok()) {
      KILN_FUZZ_CHECK(two->features.equal(one->features), "the thread count changed the features");
      KILN_FUZZ_CHECK(two->labels.defined() == one->labels.defined() &&
                          (!one->labels.defined() || two->labels.equal(one->labels)),
                      "the thread count changed the labels");
    } else {
      KILN_FUZZ_CHECK(two.status().message() == one.status().message(), "the thread count changed the error");
    }
  }
  return 0;
}
