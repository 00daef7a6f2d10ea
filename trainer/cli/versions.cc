#include "trainer/cli/versions.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "hal/compat/version.h"
#include "hal/plugin/kiln_plugin_c_api.h"
#include "hal/version.h"

namespace kiln {

bool WantsVersion(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") return false;
    if (arg == "--version" || arg == "-version") return true;
  }
  return false;
}

std::string VersionText() {
  const std::optional<std::string> runtime = compat::RuntimeLibTorchVersion();
  std::string text =
      absl::StrCat("Kiln: ", std::string(Version()), "\nLibTorch: built against ", compat::BuiltLibTorchVersion(),
                   ", running with ", runtime.value_or("(a LibTorch that does not say its version)"), "\n");
  absl::StrAppend(&text, "Plugin C API: ", KILN_PLUGIN_API_MAJOR, ".", KILN_PLUGIN_API_MINOR,
                  " (hal/plugin/kiln_plugin_c_api.h; plugins of major version ", KILN_PLUGIN_API_MAJOR, " load)\n");
  absl::StrAppend(&text, "LibTorch: Kiln needs ", compat::MinimumLibTorchVersion(),
                  " or newer (PyTorch's DDP reducer and per-device c10d backends, fused optimizer kernels, autocast "
                  "and names for out-of-tree devices; docs/libtorch.md)\n");
  const absl::Status agree = compat::CheckLibTorchVersion();
  if (!agree.ok()) absl::StrAppend(&text, "error: ", agree.message(), "\n");
  const std::optional<std::string> cuda = compat::BuiltCudaVersion();
  absl::StrAppend(&text, "CUDA: ",
                  cuda.has_value() ? absl::StrCat("built for CUDA ", *cuda, " (LibTorch's CUDA ",
                                                  compat::RuntimeCudaVersion().value_or("unknown"), ")")
                                   : std::string("none (this build links LibTorch's CPU libraries only)"),
                  "\n");
  return text;
}

void AddVersions(JsonObject& json) {
  json.AddString("libtorch_version", compat::RuntimeLibTorchVersion().value_or(compat::BuiltLibTorchVersion()))
      .AddString("libtorch_build_version", compat::BuiltLibTorchVersion())
      .AddString("libtorch_minimum_version", compat::MinimumLibTorchVersion());
  if (const std::optional<std::string> cuda = compat::BuiltCudaVersion(); cuda.has_value()) {
    json.AddString("cuda_version", *cuda);
  }
}

}  // namespace kiln
