#include "trainer/strategies/model_parallel_options.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kiln {

absl::StatusOr<std::optional<int>> ParseParallelSize(const std::string& name, const std::string& text) {
  const std::string value(absl::StripAsciiWhitespace(text));
  if (absl::AsciiStrToLower(value) == "auto") return std::optional<int>();
  int size = 0;
  if (!absl::SimpleAtoi(value, &size) || size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("invalid ", name, " '", text,
                                                   "': pass \"auto\" or a positive number of devices"));
  }
  return std::optional<int>(size);
}

std::string ParallelSizeText(const std::optional<int>& size) {
  return size.has_value() ? absl::StrCat(*size) : "auto";
}

}  // namespace kiln
