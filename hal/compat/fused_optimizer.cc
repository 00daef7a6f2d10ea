#include "hal/compat/fused_optimizer.h"

#include <optional>

#include "ATen/core/dispatch/Dispatcher.h"
#include "c10/core/DispatchKey.h"
#include "c10/core/TensorOptions.h"
#include "ATen/ops/_foreach_add.h"
#include "ATen/ops/_fused_adam.h"
#include "ATen/ops/_fused_adamw.h"
#include "ATen/ops/_fused_sgd.h"
#include "ATen/ops/rsub.h"
#include "c10/util/Exception.h"

namespace kiln::compat {
namespace {

std::optional<at::Tensor> Optional(const at::Tensor& tensor) {
  return tensor.defined() ? std::optional<at::Tensor>(tensor) : std::nullopt;
}

}  // namespace

bool HasFusedOptimizerKernels() { return true; }

bool FusedOptimizerRunsOn(const c10::Device& device) {
  const c10::DispatchKey key = c10::computeDispatchKey(std::nullopt, std::nullopt, device);
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  for (const char* name : {"aten::_fused_adam_", "aten::_fused_adamw_", "aten::_fused_sgd_"}) {
    const std::optional<c10::OperatorHandle> op = dispatcher.findSchema({name, ""});
    if (!op.has_value()) return false;
    if (!op->hasKernelForDispatchKey(key) && !dispatcher.hasBackendFallbackForDispatchKey(key)) return false;
  }
  return true;
}

void FusedAdamStep(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                   const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                   const std::vector<at::Tensor>& max_exp_avg_sqs, const std::vector<at::Tensor>& steps,
                   const FusedAdamArgs& args, const at::Tensor& found_inf) {
  if (found_inf.defined()) {
    at::_foreach_add_(steps, at::rsub(found_inf, 1));
  } else {
    at::_foreach_add_(steps, 1);
  }
  const auto kernel = args.decoupled_weight_decay ? &at::_ops::_fused_adamw_::call : &at::_ops::_fused_adam_::call;
  kernel(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, args.lr, args.beta1, args.beta2,
         args.weight_decay, args.eps, args.amsgrad, /*maximize=*/false, /*grad_scale=*/std::nullopt,
         Optional(found_inf));
}

void FusedSgdStep(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                  const std::vector<at::Tensor>& momentum_buffers, const FusedSgdArgs& args,
                  const at::Tensor& found_inf) {
  at::_ops::_fused_sgd_::call(params, grads, momentum_buffers, args.weight_decay, args.momentum, args.lr,
                              args.dampening, args.nesterov, /*maximize=*/false, args.is_first_step,
                              /*grad_scale=*/std::nullopt, Optional(found_inf));
}

}  // namespace kiln::compat
