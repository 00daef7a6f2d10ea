#include "trainer/data/digits.h"

#include "absl/strings/str_cat.h"
#include "trainer/core/option_fix.h"

namespace kiln {

absl::StatusOr<CsvTable> LoadDigits(const std::string& path, int num_threads) {
  absl::StatusOr<CsvTable> table =
      ReadCsv(path, {.label_column = "-1", .task = Task::kClassification, .num_threads = num_threads});
  if (absl::IsNotFound(table.status())) {
    return absl::NotFoundError(absl::StrCat(
        "the handwritten digits are not installed (no ", path, "); they come with Debian's python3-sklearn: install ",
        "it with `sudo apt-get install python3-sklearn` (tools/setup.sh does), ",
        OptionFix("or pass LoadDigits the path of a digits.csv.gz", "or pass --digits_path=<digits.csv.gz>")));
  }
  if (!table.ok()) return table.status();
  if (table->num_features() != kDigitsImageSize * kDigitsImageSize || table->class_names.size() != 10) {
    return absl::InvalidArgumentError(absl::StrCat(path, " does not hold the digits: ", table->num_features(),
                                                   " feature columns and ", table->class_names.size(),
                                                   " classes, expected 64 and 10"));
  }
  for (int64_t i = 0; i < table->num_features(); ++i) {
    table->feature_names[i] = absl::StrCat("pixel_", i / kDigitsImageSize, "_", i % kDigitsImageSize);
  }
  table->label_name = "digit";
  return table;
}

}  // namespace kiln
