#include "hal/compat/fused_optimizer.h"

#include <optional>

#include "ATen/core/dispatch/Dispatcher.h"
#include "c10/core/DispatchKey.h"
#include "c10/core/TensorOptions.h"
#include "c10/util/Exception.h"
#include "torch/version.h"

#if TORCH_VERSION_MAJOR >= 2
#include "ATen/ops/_foreach_add.h"
#include "ATen/ops/_fused_adam.h"
#include "ATen/ops/_fused_adamw.h"
#include "ATen/ops/_fused_sgd.h"
#include "ATen/ops/rsub.h"
#endif

namespace kiln::compat {
namespace {

#if TORCH_VERSION_MAJOR >= 2
std::optional<at::Tensor> Optional(const at::Tensor& tensor) {
  return tensor.defined() ? std::optional<at::Tensor>(tensor) : std::nullopt;
}
#endif

}  // namespace

bool HasFusedOptimizerKernels() { return TORCH_VERSION_MAJOR >= 2; }

bool FusedOptimizerRunsOn(const c10::Device& device) {
#if TORCH_VERSION_MAJOR >= 2
  const c10::DispatchKey key = c10::computeDispatchKey(std::nullopt, std::nullopt, device);
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  for (const char* name : {"aten::_fused_adam_", "aten::_fused_adamw_", "aten::_fused_sgd_"}) {
    const std::optional<c10::OperatorHandle> op = dispatcher.findSchema({name, ""});
    if (!op.has_value()) return false;
    if (!op->hasKernelForDispatchKey(key) && !dispatcher.hasBackendFallbackForDispatchKey(key)) return false;
  }
  return true;
#else
  return false;
#endif
}

void FusedAdamStep(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                   const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                   const std::vector<at::Tensor>& max_exp_avg_sqs, const std::vector<at::Tensor>& steps,
                   const FusedAdamArgs& args, const at::Tensor& found_inf) {
#if TORCH_VERSION_MAJOR >= 2
  if (found_inf.defined()) {
    at::_foreach_add_(steps, at::rsub(found_inf, 1));
  } else {
    at::_foreach_add_(steps, 1);
  }
  const auto kernel = args.decoupled_weight_decay ? &at::_ops::_fused_adamw_::call : &at::_ops::_fused_adam_::call;
  kernel(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, args.lr, args.beta1, args.beta2,
         args.weight_decay, args.eps, args.amsgrad, /*maximize=*/false, /*grad_scale=*/std::nullopt,
         Optional(found_inf));
#else
  TORCH_CHECK(false, "this LibTorch (", TORCH_VERSION,
              ") has no fused Adam kernel for the CPU; use torch::optim::Adam");
#endif
}

void FusedSgdStep(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                  const std::vector<at::Tensor>& momentum_buffers, const FusedSgdArgs& args,
                  const at::Tensor& found_inf) {
#if TORCH_VERSION_MAJOR >= 2
  at::_ops::_fused_sgd_::call(params, grads, momentum_buffers, args.weight_decay, args.momentum, args.lr,
                              args.dampening, args.nesterov, /*maximize=*/false, args.is_first_step,
                              /*grad_scale=*/std::nullopt, Optional(found_inf));
#else
  TORCH_CHECK(false, "this LibTorch (", TORCH_VERSION, ") has no fused SGD kernel; use torch::optim::SGD");
#endif
}

}  // namespace kiln::compat
