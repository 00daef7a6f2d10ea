// Which of Habana's PyTorch bridge libraries gives LibTorch's `hpu` device its kernels, as Habana's own Python
// loader (habana_frameworks.torch) picks it: a library per execution mode, each in a build for Habana's PyTorch and
// one for upstream PyTorch (".upstream"), all in the habana_frameworks/torch/lib folder of Gaudi's PyTorch
// installation.
//
//   PT_HPU_LAZY_MODE=1   lazy mode:  libhabana_pytorch_plugin.so, then libhabana_pytorch_plugin.upstream.so
//   PT_HPU_LAZY_MODE=0   eager mode: libhabana_pytorch2_plugin.so, then libhabana_pytorch2_plugin.upstream.so
//   unset                lazy under LibTorch 1.13 (the only mode the bridges for it had), eager under LibTorch 2.x
//                        (the default of the Gaudi releases for PyTorch 2.x, per Habana's documentation)
//
// Pure; thread-safe.
#ifndef KILN_BACKENDS_HPU_BRIDGE_H_
#define KILN_BACKENDS_HPU_BRIDGE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln::hpu {

inline constexpr char kLazyModeVariable[] = "PT_HPU_LAZY_MODE";

// The bridge libraries to try, in order, for a PT_HPU_LAZY_MODE value (nullopt: unset) and the LibTorch major
// version. InvalidArgument for a value that is neither 0 nor 1, naming it.
absl::StatusOr<std::vector<std::string>> BridgeCandidates(std::optional<absl::string_view> lazy_mode,
                                                          int libtorch_major);

}  // namespace kiln::hpu

#endif  // KILN_BACKENDS_HPU_BRIDGE_H_
