// Which LibTorch Kiln was compiled against and which one this process loaded. Kiln builds against Debian's LibTorch
// 1.13 or a LibTorch 2.x (README, "LibTorch versions"); LibTorch keeps no C++ ABI between minor versions, so a
// program whose loaded libraries differ from its headers in major.minor is refused before it trains.
//
// Thread-safe; nothing here throws.
#ifndef KILN_HAL_COMPAT_VERSION_H_
#define KILN_HAL_COMPAT_VERSION_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kiln::compat {

// "1.13.0", "2.11.0": the version in the LibTorch headers this binary was compiled with (torch/version.h).
std::string BuiltLibTorchVersion();

// The version of the LibTorch libraries loaded in this process, as they report it (at::show_config()'s
// TORCH_VERSION), or nullopt when they do not say. Read once.
std::optional<std::string> RuntimeLibTorchVersion();

// The CUDA version this build was compiled for ("13.0"), or nullopt in a build without CUDA (KILN_WITH_CUDA unset).
std::optional<std::string> BuiltCudaVersion();

// The CUDA version the loaded LibTorch was built with (at::show_config()'s CUDA_VERSION), or nullopt when it has none.
std::optional<std::string> RuntimeCudaVersion();

// OK when `runtime` has the same major.minor as `built`; otherwise FailedPrecondition naming both and the fix. A
// runtime that does not say its version passes (nothing to compare). The pure part of CheckLibTorchVersion().
absl::Status CheckLibTorchVersions(absl::string_view built, std::optional<absl::string_view> runtime);

// CheckLibTorchVersions for this process.
absl::Status CheckLibTorchVersion();

}  // namespace kiln::compat

#endif  // KILN_HAL_COMPAT_VERSION_H_
