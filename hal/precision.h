// Numeric precisions, named as Lightning names them. Accelerators declare which they support
// (`Accelerator::SupportedPrecisions`); the connector maps the user's spelling onto one of these.
//
// Thread-safety: pure functions on value types.
#ifndef KILN_HAL_PRECISION_H_
#define KILN_HAL_PRECISION_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "c10/core/ScalarType.h"

namespace kiln {

enum class Precision {
  k32True,    // "32-true": float32 everywhere.
  k64True,    // "64-true": the model and inputs in float64.
  k16Mixed,   // "16-mixed": float16 autocast in the forward pass, float32 parameters, a gradient scaler.
  kBf16Mixed, // "bf16-mixed": bfloat16 autocast in the forward pass, float32 parameters.
  k16True,    // "16-true": the model and inputs in float16.
  kBf16True,  // "bf16-true": the model and inputs in bfloat16.
};

// Every precision, in the order above (for listings and messages).
const std::vector<Precision>& AllPrecisions();

// Lightning's canonical name, e.g. "bf16-mixed".
absl::string_view PrecisionName(Precision precision);

// The inverse of PrecisionName for canonical names only (legacy spellings are the connector's business).
std::optional<Precision> PrecisionFromName(absl::string_view name);

// The dtype the dense matrix products of a run at `precision` compute in, as Lightning's ThroughputMonitor takes it
// (_plugin_to_compute_dtype): float32 for 32-true, float64 for 64-true, float16 for 16-mixed and 16-true, bfloat16
// for bf16-mixed and bf16-true. What Accelerator::PeakFlops is asked for.
c10::ScalarType ComputeDtype(Precision precision);

// Comma-separated canonical names, for error messages: "32-true, bf16-mixed".
std::string PrecisionNames(const std::vector<Precision>& precisions);

}  // namespace kiln

#endif  // KILN_HAL_PRECISION_H_
