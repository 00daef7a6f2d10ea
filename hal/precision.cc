#include "hal/precision.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln {

const std::vector<Precision>& AllPrecisions() {
  static const auto* const kAll = new std::vector<Precision>{
      Precision::k32True, Precision::k64True, Precision::k16Mixed,
      Precision::kBf16Mixed, Precision::k16True, Precision::kBf16True,
  };
  return *kAll;
}

absl::string_view PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::k32True:
      return "32-true";
    case Precision::k64True:
      return "64-true";
    case Precision::k16Mixed:
      return "16-mixed";
    case Precision::kBf16Mixed:
      return "bf16-mixed";
    case Precision::k16True:
      return "16-true";
    case Precision::kBf16True:
      return "bf16-true";
  }
  return "unknown";
}

c10::ScalarType ComputeDtype(Precision precision) {
  switch (precision) {
    case Precision::k32True:
      return c10::kFloat;
    case Precision::k64True:
      return c10::kDouble;
    case Precision::k16Mixed:
    case Precision::k16True:
      return c10::kHalf;
    case Precision::kBf16Mixed:
    case Precision::kBf16True:
      return c10::kBFloat16;
  }
  return c10::kFloat;
}

std::optional<Precision> PrecisionFromName(absl::string_view name) {
  for (Precision precision : AllPrecisions()) {
    if (PrecisionName(precision) == name) return precision;
  }
  return std::nullopt;
}

std::string PrecisionNames(const std::vector<Precision>& precisions) {
  return absl::StrJoin(precisions, ", ", [](std::string* out, Precision precision) {
    absl::StrAppend(out, PrecisionName(precision));
  });
}

}  // namespace kiln
