// The `devices` value a user gives the Trainer, and the syntax shared by every accelerator.
//
// Users write `devices` as Lightning accepts it: "auto", an int (`2`, `-1`), a string ("2", "0,1", "3,", "[0, 1]")
// or a list of indices ({0, 1}). `Devices` holds that value exactly as written, so error messages can quote it.
// `ParseDevicesSyntax` turns it into a `DeviceSelection`, which says *what shape* of request it is. What the request
// means (processes on this machine, GPU indices, ...) is each accelerator's decision: see
// `Accelerator::ParseDevices` and the two Lightning rule sets below, which backends may use.
//
// Thread-safety: every type here is a value type; the functions are pure and may be called from any thread.
#ifndef KILN_HAL_DEVICES_H_
#define KILN_HAL_DEVICES_H_

#include <initializer_list>
#include <string>
#include "absl/strings/string_view.h"
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln {

// The user's `devices` value, as written. Implicit constructors let callers write `.devices = "4"`, `.devices = 2`
// or `.devices = {0, 1}` as they would in Lightning.
class Devices {
 public:
  using Value = std::variant<std::string, int, std::vector<int>>;

  Devices() : value_(std::string("auto")) {}
  Devices(const char* text) : value_(std::string(text)) {}  // NOLINT(google-explicit-constructor)
  Devices(std::string text) : value_(std::move(text)) {}    // NOLINT(google-explicit-constructor)
  Devices(int count) : value_(count) {}                     // NOLINT(google-explicit-constructor)
  Devices(std::vector<int> indices) : value_(std::move(indices)) {}  // NOLINT(google-explicit-constructor)
  Devices(std::initializer_list<int> indices)  // NOLINT(google-explicit-constructor)
      : value_(std::vector<int>(indices)) {}

  const Value& value() const { return value_; }

  // The value as the user would have typed it: `auto`, `2`, `'0,1'` (strings quoted), `[0, 1]`.
  std::string ToString() const;

  friend bool operator==(const Devices& a, const Devices& b) { return a.value_ == b.value_; }

 private:
  Value value_;
};

// The shape of a `devices` request, independent of any hardware.
struct DeviceSelection {
  enum class Kind {
    kAuto,     // "auto": as many as the accelerator counts (AutoDeviceCount).
    kCount,    // an int N >= 0, or a string of digits "N": the first N devices (0 is rejected by the connector).
    kAll,      // -1 or "-1": every device the accelerator has.
    kIndices,  // a list, "0,1", "3," or "[0, 1]": exactly these device indices, in this order.
  };
  Kind kind = Kind::kAuto;
  int count = 0;             // Set for kCount.
  std::vector<int> indices;  // Set for kIndices. May be empty (an empty list), which the connector rejects.

  friend bool operator==(const DeviceSelection& a, const DeviceSelection& b) {
    return a.kind == b.kind && a.count == b.count && a.indices == b.indices;
  }
};

// Parses the syntax of `devices`. Errors (InvalidArgument) name the bad value and list the accepted forms: a
// negative count other than -1, a negative index, text that is not "auto", a number or a list of numbers, or a
// number too large for an int. Duplicates are kept: whether they are allowed is the accelerator's rule. Never throws.
absl::StatusOr<DeviceSelection> ParseDevicesSyntax(const Devices& devices);

// True for the values that mean "no devices at all": 0, "0" and an empty list. Lightning's connector rejects these
// for every accelerator before asking about availability, and so does Kiln's.
bool IsZeroDevices(const Devices& devices);

// The most devices ParseDeviceCount gives: more processes than this on one host is a typing error, and honouring it
// would allocate in proportion (a fuzzer found `devices=1629488239` taking 6.5 GB before anything else happened).
inline constexpr int kMaxDeviceCount = 1 << 16;

// Lightning's rule for accelerators whose devices are processes on one host (its CPU accelerator): "auto" is
// `auto_count`, an int or digit string N > 0 means N devices, numbered 0..N-1. -1 and lists are errors that say an
// int > 0 is expected, and so is a count above kMaxDeviceCount. `accelerator_name` appears in error messages.
absl::StatusOr<std::vector<int>> ParseDeviceCount(const Devices& devices, int auto_count,
                                                  absl::string_view accelerator_name);

// Lightning's rule for accelerators with numbered physical devices (its GPU rules): "auto" and -1 select all
// `visible_count` devices, N selects the first N, and a list or "0,2" selects those indices. Duplicates, and
// indices or counts beyond `visible_count`, are errors that say which devices exist; `visibility_hint` (for example
// "CUDA_VISIBLE_DEVICES=0,1") is appended to them when not empty.
absl::StatusOr<std::vector<int>> ParseDeviceIndices(const Devices& devices, int visible_count,
                                                    absl::string_view accelerator_name,
                                                    absl::string_view visibility_hint = "");

}  // namespace kiln

#endif  // KILN_HAL_DEVICES_H_
