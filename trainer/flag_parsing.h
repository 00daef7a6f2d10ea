// Flag values of `//trainer:fit` that are parsed by hand (Abseil parses the rest): `--limit_*_batches` and
// `--hidden_sizes`. They live here, apart from fit_main.cc, so that tests and the fuzzers in fuzz/ can reach them.
//
// Errors are InvalidArgument, with a message that names the flag, quotes the value and says what is accepted; fit
// prints it after "error: " and exits 2. Nothing here throws, allocates in proportion to anything but the value's
// length, or reads global state: every function is pure and may be called from any thread.
#ifndef KILN_TRAINER_FLAG_PARSING_H_
#define KILN_TRAINER_FLAG_PARSING_H_

#include <cstdint>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln {

// The widest layer --hidden_sizes accepts. A wider one cannot be allocated on any machine Kiln runs on (one such
// layer after 16 inputs is already 4 GiB of float32 weights, and Adam keeps two more copies); refusing it here
// gives a clear error instead of an allocation failure deep inside LibTorch.
inline constexpr int64_t kMaxLayerWidth = int64_t{1} << 26;

// A `--limit_*_batches` value, as Lightning reads it: an int number of batches (>= 0), or a fraction of the loader
// in [0.0, 1.0], which must be written with a '.' or an exponent ("0.25", "1.0", "5e-1"). `flag` names the flag in
// errors, without its dashes.
absl::StatusOr<std::variant<int64_t, double>> ParseBatchLimitFlag(absl::string_view flag, absl::string_view value);

// `--hidden_sizes`: layer widths in 1..kMaxLayerWidth separated by commas ("64,64"); empty parts are skipped, so ""
// means no hidden layer.
absl::StatusOr<std::vector<int64_t>> ParseLayerSizesFlag(absl::string_view flag, absl::string_view value);

}  // namespace kiln

#endif  // KILN_TRAINER_FLAG_PARSING_H_
