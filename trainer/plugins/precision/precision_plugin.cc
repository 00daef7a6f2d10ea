#include "trainer/plugins/precision/precision_plugin.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "connector/connector.h"
#include "trainer/plugins/precision/mixed_precision.h"
#include "trainer/plugins/precision/true_precision.h"

namespace kiln {

absl::StatusOr<std::shared_ptr<PrecisionPlugin>> MakePrecisionPlugin(Precision precision, const c10::Device& device) {
  switch (precision) {
    case Precision::k32True:
      return std::make_shared<PrecisionPlugin>();
    case Precision::k64True:
    case Precision::kBf16True:
    case Precision::k16True:
      return std::make_shared<TruePrecision>(precision);
    case Precision::kBf16Mixed:
    case Precision::k16Mixed: {
      absl::StatusOr<std::unique_ptr<MixedPrecision>> mixed =
          MixedPrecision::Create({.precision = precision, .device_type = device.type()});
      if (!mixed.ok()) return mixed.status();
      return std::shared_ptr<PrecisionPlugin>(std::move(mixed).value());
    }
  }
  return absl::InternalError(absl::StrCat("no precision plugin for precision ", static_cast<int>(precision)));
}

absl::StatusOr<std::string> PrecisionFlag(absl::string_view flag, const PrecisionPlugin* given) {
  if (given == nullptr) return std::string(flag);
  const absl::string_view plugin_precision = PrecisionName(given->precision());
  if (flag != PrecisionName(Precision::k32True)) {
    std::vector<std::string> ignored_warnings;
    absl::StatusOr<Precision> parsed = ParsePrecisionFlag(flag, &ignored_warnings);
    if (!parsed.ok() || *parsed != given->precision()) {
      return absl::InvalidArgumentError(absl::StrCat("Received both `precision='", flag,
                                                     "'` and a precision plugin for '", plugin_precision,
                                                     "'. Choose one: leave `precision` unset or pass the same value"));
    }
  }
  return std::string(plugin_precision);
}

absl::StatusOr<std::shared_ptr<PrecisionPlugin>> SelectPrecisionPlugin(Precision planned, const c10::Device& device,
                                                                       std::shared_ptr<PrecisionPlugin> given) {
  if (given == nullptr) return MakePrecisionPlugin(planned, device);
  if (given->precision() != planned) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the precision plugin runs '", PrecisionName(given->precision()), "' but the accelerator runs that as '",
        PrecisionName(planned), "'; pass a plugin for '", PrecisionName(planned), "', or use another accelerator"));
  }
  if (absl::Status status = given->CheckDevice(device); !status.ok()) return status;
  return given;
}

}  // namespace kiln
