// The UCI handwritten digits (1797 images of 8x8 pixels, values 0..16, ten classes), as Debian's python3-sklearn
// ships them: a gzip CSV of 64 pixel columns, row by row, then the label.
#ifndef KILN_TRAINER_DATA_DIGITS_H_
#define KILN_TRAINER_DATA_DIGITS_H_

#include <string>

#include "absl/status/statusor.h"
#include "trainer/data/csv_table.h"

namespace kiln {

// Where python3-sklearn installs the file.
inline constexpr char kDigitsPath[] = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";
inline constexpr int64_t kDigitsImageSize = 8;

// The digits as a classification table with features named "pixel_<row>_<column>". When the file is missing, the
// NotFound error says how to install it (python3-sklearn) or where to point `path`.
absl::StatusOr<CsvTable> LoadDigits(const std::string& path = kDigitsPath, int num_threads = 1);

}  // namespace kiln

#endif  // KILN_TRAINER_DATA_DIGITS_H_
