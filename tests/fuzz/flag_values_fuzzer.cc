// Fuzz target: `//trainer:fit`'s flag values that are parsed by hand (trainer/flag_parsing.h: --limit_*_batches,
// --hidden_sizes) and the precision flag (connector.h: ParsePrecisionFlag, shared by fit, resolve and the Trainer).
// `--devices` has a target of its own (devices_fuzzer.cc).
//
// Input: the whole input is the flag's value, given to every parser.
#include <cmath>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "connector/connector.h"
#include "hal/precision.h"
#include "tests/fuzz/fuzz_support.h"
#include "trainer/flag_parsing.h"

namespace kiln {
namespace {

void CheckBatchLimit(const std::string& value) {
  const auto limit = ParseBatchLimitFlag("limit_train_batches", value);
  if (!limit.ok()) {
    KILN_FUZZ_CHECK(limit.status().code() == absl::StatusCode::kInvalidArgument, value);
    // Every error quotes the value, so the user sees what was refused.
    KILN_FUZZ_CHECK(absl::StrContains(limit.status().message(), "--limit_train_batches='" + value + "'"), value);
    return;
  }
  if (const int64_t* count = std::get_if<int64_t>(&*limit)) KILN_FUZZ_CHECK(*count >= 0, value);
  if (const double* fraction = std::get_if<double>(&*limit)) {
    KILN_FUZZ_CHECK(std::isfinite(*fraction) && *fraction >= 0.0 && *fraction <= 1.0, value);
  }
}

void CheckLayerSizes(const std::string& value) {
  const auto sizes = ParseLayerSizesFlag("hidden_sizes", value);
  if (!sizes.ok()) {
    KILN_FUZZ_CHECK(sizes.status().code() == absl::StatusCode::kInvalidArgument, value);
    KILN_FUZZ_CHECK(absl::StrContains(sizes.status().message(), "--hidden_sizes='" + value + "'"), value);
    return;
  }
  KILN_FUZZ_CHECK(sizes->size() <= value.size(), value);
  for (int64_t size : *sizes) KILN_FUZZ_CHECK(size >= 1 && size <= kMaxLayerWidth, value);
}

void CheckPrecision(const std::string& value) {
  std::vector<std::string> warnings;
  const absl::StatusOr<Precision> precision = ParsePrecisionFlag(value, &warnings);
  if (!precision.ok()) {
    KILN_FUZZ_CHECK(precision.status().code() == absl::StatusCode::kInvalidArgument, value);
    KILN_FUZZ_CHECK(warnings.empty(), value);
    return;
  }
  // The canonical name reads back as itself, silently.
  const std::string canonical(PrecisionName(*precision));
  std::vector<std::string> none;
  const absl::StatusOr<Precision> again = ParsePrecisionFlag(canonical, &none);
  KILN_FUZZ_CHECK(again.ok() && *again == *precision && none.empty(), canonical);
  KILN_FUZZ_CHECK(PrecisionFromName(canonical) == *precision, canonical);
}

}  // namespace
}  // namespace kiln

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string value(reinterpret_cast<const char*>(data), size);
  kiln::CheckBatchLimit(value);
  kiln::CheckLayerSizes(value);
  kiln::CheckPrecision(value);
  return 0;
}
