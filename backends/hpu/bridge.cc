#include "backends/hpu/bridge.h"

#include "absl/strings/str_cat.h"

namespace kiln::hpu {

absl::StatusOr<std::vector<std::string>> BridgeCandidates(std::optional<absl::string_view> lazy_mode,
                                                          int libtorch_major) {
  bool lazy = libtorch_major < 2;
  if (lazy_mode.has_value() && !lazy_mode->empty()) {
    if (*lazy_mode == "1") {
      lazy = true;
    } else if (*lazy_mode == "0") {
      lazy = false;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(kLazyModeVariable, "='", *lazy_mode,
                                                     "' is not a mode; set it to 1 (lazy) or 0 (eager), or unset it "
                                                     "for the default (",
                                                     libtorch_major < 2 ? "lazy" : "eager", ")"));
    }
  }
  const std::string base = lazy ? "libhabana_pytorch_plugin" : "libhabana_pytorch2_plugin";
  return std::vector<std::string>{base + ".so", base + ".upstream.so"};
}

}  // namespace kiln::hpu
