#include "trainer/flag_parsing.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kiln {

absl::StatusOr<std::variant<int64_t, double>> ParseBatchLimitFlag(absl::string_view flag, absl::string_view value) {
  if (value.find_first_of(".eE") != absl::string_view::npos) {
    double fraction = 0;
    // The comparisons are false for NaN, so "nan" is refused with everything else outside [0, 1].
    if (absl::SimpleAtod(value, &fraction) && fraction >= 0.0 && fraction <= 1.0) return fraction;
  } else {
    int64_t count = 0;
    if (absl::SimpleAtoi(value, &count) && count >= 0) return count;
  }
  return absl::InvalidArgumentError(absl::StrCat("--", flag, "='", value,
                                                 "' is not valid; pass an int number of batches >= 0 (e.g. 10) or ",
                                                 "a fraction in [0.0, 1.0] written with a '.' (e.g. 0.25)"));
}

absl::StatusOr<std::vector<int64_t>> ParseLayerSizesFlag(absl::string_view flag, absl::string_view value) {
  std::vector<int64_t> sizes;
  for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipEmpty())) {
    int64_t size = 0;
    if (!absl::SimpleAtoi(part, &size) || size <= 0 || size > kMaxLayerWidth) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, "='", value, "' is not valid; pass layer widths ",
                                                     "from 1 to ", kMaxLayerWidth, " separated by commas, e.g. 64,64"));
    }
    sizes.push_back(size);
  }
  return sizes;
}

}  // namespace kiln
