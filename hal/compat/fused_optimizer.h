// LibTorch's fused optimizer kernels: aten::_fused_adam_, _fused_adamw_ and _fused_sgd_ for the CPU and CUDA (and any
// device with a kernel or a fallback for them): one call updates every parameter of a list in one pass over its
// memory, and skips the update on the device when a `found_inf` flag tensor holds 1.
//
// The lists are parallel (one entry per parameter) and must share one device and one dtype; `found_inf`, when
// defined, is a one-element float32 tensor on that device (1: skip, 0: apply), read by the kernel, never by the host.
// Thread-compatible; throws c10::Error as LibTorch's kernels do.
#ifndef KILN_HAL_COMPAT_FUSED_OPTIMIZER_H_
#define KILN_HAL_COMPAT_FUSED_OPTIMIZER_H_

#include <vector>

#include "ATen/core/Tensor.h"
#include "c10/core/Device.h"

namespace kiln::compat {

// Whether this LibTorch has the fused kernels at all: always, since Kiln needs LibTorch 2.8 or newer. Kept for callers
// written when Kiln also built against LibTorch 1.13, which had none.
[[deprecated("always true: every LibTorch Kiln builds against has the fused kernels")]] bool
HasFusedOptimizerKernels();

// Whether they can run for tensors on `device`: a kernel for its dispatch key, or a backend fallback (as a
// third-party device that runs unknown operators through the CPU has).
bool FusedOptimizerRunsOn(const c10::Device& device);

struct FusedAdamArgs {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, weight_decay = 0, eps = 1e-8;
  bool amsgrad = false;
  bool decoupled_weight_decay = false;  // AdamW.
};

// One Adam or AdamW step. `steps` are the float32 step counts on the device; this call counts the step in them
// (adds 1 - found_inf, one operator for the whole list), so that a skipped step leaves them.
void FusedAdamStep(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                   const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                   const std::vector<at::Tensor>& max_exp_avg_sqs, const std::vector<at::Tensor>& steps,
                   const FusedAdamArgs& args, const at::Tensor& found_inf);

struct FusedSgdArgs {
  double lr = 1e-2, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool is_first_step = false;  // The momentum buffers are new: they take the gradient as it is.
};

// One SGD step. `momentum_buffers` is empty when momentum is 0.
void FusedSgdStep(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                  const std::vector<at::Tensor>& momentum_buffers, const FusedSgdArgs& args,
                  const at::Tensor& found_inf);

}  // namespace kiln::compat

#endif  // KILN_HAL_COMPAT_FUSED_OPTIMIZER_H_
