// bf16-mixed on the virtual NPU: LibTorch has autocast for out-of-tree devices (the AutocastPrivateUse1
// dispatch key), and leaves the casting policy to the device. This registers autocast's own op lists, the ones
// LibTorch's accelerators share (ATen/autocast_mode.h): matrix products and convolutions in the lower precision,
// reductions, losses and other precision-sensitive ops in float32, and mixed-type ops promoted to the widest input.
#include "ATen/autocast_mode.h"
#include "torch/library.h"

namespace virtual_npu {
namespace {

using at::autocast::CastPolicy;

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define VIRTUAL_NPU_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define VIRTUAL_NPU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define VIRTUAL_NPU_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define VIRTUAL_NPU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(VIRTUAL_NPU_LOWER)
  AT_FORALL_FP32(VIRTUAL_NPU_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(VIRTUAL_NPU_FP32_SET_OPT_DTYPE)
  AT_FORALL_PROMOTE(VIRTUAL_NPU_PROMOTE)
#undef VIRTUAL_NPU_LOWER
#undef VIRTUAL_NPU_FP32
#undef VIRTUAL_NPU_FP32_SET_OPT_DTYPE
#undef VIRTUAL_NPU_PROMOTE
}

}  // namespace
}  // namespace virtual_npu
