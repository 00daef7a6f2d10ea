// Which LibTorch Kiln was compiled against and which one this process loaded. Kiln builds against LibTorch 2.x,
// 2.8 or newer (docs/libtorch.md says why 2.8), by default the pinned PyPI wheel; LibTorch keeps no C++ ABI between
// minor versions, so a program whose loaded libraries differ from its headers in major.minor is refused before it
// trains. An older LibTorch is refused at build time: by the repository rule (tools/libtorch.bzl, naming the version
// it found) and, for builds that bypass it, by the static_assert below.
//
// Thread-safe; nothing here throws.
#ifndef KILN_HAL_COMPAT_VERSION_H_
#define KILN_HAL_COMPAT_VERSION_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "torch/version.h"

namespace kiln::compat {

// The oldest LibTorch Kiln builds against: 2.8 is the first with every API Kiln calls without a version check
// (autocast's list of device types, PrivateUse1HooksInterface's isBuilt/isAvailable, a c10d::ProcessGroup made from a
// store, rank and size with a default backend; checked by compiling hal/compat against 2.4, 2.6 and 2.8's headers).
inline constexpr int kMinimumLibTorchMajor = 2;
inline constexpr int kMinimumLibTorchMinor = 8;
static_assert(TORCH_VERSION_MAJOR > kMinimumLibTorchMajor ||
                  (TORCH_VERSION_MAJOR == kMinimumLibTorchMajor && TORCH_VERSION_MINOR >= kMinimumLibTorchMinor),
              "Kiln needs LibTorch 2.8 or newer (torch/version.h says older): run tools/setup.sh for the pinned 2.x "
              "wheel, or point KILN_LIBTORCH at a LibTorch 2.8+ folder");

// "2.8": the minimum above, for messages.
std::string MinimumLibTorchVersion();

// "2.11.0": the version in the LibTorch headers this binary was compiled with (torch/version.h).
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
