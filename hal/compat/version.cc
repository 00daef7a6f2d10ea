#include "hal/compat/version.h"

#include <vector>

#include "ATen/Version.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#ifdef KILN_WITH_CUDA
#include "cuda_runtime_api.h"  // CUDART_VERSION: 13000 for CUDA 13.0
#endif

namespace kiln::compat {
namespace {

// The value of `key=` in show_config()'s "Build settings" line (comma-separated key=value pairs).
std::optional<std::string> BuildSetting(absl::string_view key) {
  static const std::string* const config = [] {
    try {
      return new std::string(at::show_config());
    } catch (...) {
      return new std::string();
    }
  }();
  const std::string needle = absl::StrCat(key, "=");
  for (absl::string_view item : absl::StrSplit(*config, absl::ByAnyChar(",\n"))) {
    item = absl::StripLeadingAsciiWhitespace(item);
    const size_t at = item.find(needle);
    if (at == 0 || (at != absl::string_view::npos && item[at - 1] == ' ')) {
      absl::string_view value = absl::StripAsciiWhitespace(item.substr(at + needle.size()));
      if (!value.empty()) return std::string(value);
    }
  }
  return std::nullopt;
}

// "2.11" of "2.11.0+cu130".
std::string MajorMinor(absl::string_view version) {
  std::vector<absl::string_view> parts = absl::StrSplit(version, absl::MaxSplits('.', 2));
  if (parts.size() < 2) return std::string(version);
  return absl::StrCat(parts[0], ".", parts[1]);
}

}  // namespace

std::string BuiltLibTorchVersion() {
  return absl::StrCat(TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, ".", TORCH_VERSION_PATCH);
}

std::string MinimumLibTorchVersion() { return absl::StrCat(kMinimumLibTorchMajor, ".", kMinimumLibTorchMinor); }

std::optional<std::string> RuntimeLibTorchVersion() { return BuildSetting("TORCH_VERSION"); }

std::optional<std::string> BuiltCudaVersion() {
#ifdef KILN_WITH_CUDA
  return absl::StrCat(CUDART_VERSION / 1000, ".", CUDART_VERSION % 1000 / 10);
#else
  return std::nullopt;
#endif
}

std::optional<std::string> RuntimeCudaVersion() { return BuildSetting("CUDA_VERSION"); }

absl::Status CheckLibTorchVersions(absl::string_view built, std::optional<absl::string_view> runtime) {
  if (!runtime.has_value() || MajorMinor(built) == MajorMinor(*runtime)) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("this program was built against LibTorch ", built, " but runs with LibTorch ", *runtime,
                   ", whose C++ ABI differs; run it with the LibTorch ", MajorMinor(built),
                   " libraries (LD_LIBRARY_PATH), or rebuild against ", *runtime,
                   " (KILN_LIBTORCH=/path/to/libtorch bazel build ...; docs/libtorch.md)"));
}

absl::Status CheckLibTorchVersion() { return CheckLibTorchVersions(BuiltLibTorchVersion(), RuntimeLibTorchVersion()); }

}  // namespace kiln::compat
