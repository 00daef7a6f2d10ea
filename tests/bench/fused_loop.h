// The fused hand-written loop's optimizer step, shared by the benchmarks (step_bench, step_instructions): LibTorch's
// fused kernel called directly over every parameter (at::_fused_sgd_ or at::_fused_adam_), no optimizer object, the
// state (Adam's moments and step counts) in plain tensors. The fastest this step can be on the CPU: issue #41's
// baseline. SGD is lr 1e-2 without momentum, Adam lr 1e-3 with PyTorch's betas and eps (the settings the benchmarks'
// torch::optim loops use).
#ifndef KILN_TESTS_BENCH_FUSED_LOOP_H_
#define KILN_TESTS_BENCH_FUSED_LOOP_H_

#include <vector>

#include "ATen/ATen.h"
#include "torch/csrc/autograd/grad_mode.h"

namespace kiln::bench {

class FusedHandWrittenStep {
 public:
  FusedHandWrittenStep(std::vector<at::Tensor> params, bool adam) : params_(std::move(params)), adam_(adam) {
    grads_.resize(params_.size());
    for (const at::Tensor& param : params_) {
      if (!adam_) break;
      exp_avgs_.push_back(at::zeros_like(param));
      exp_avg_sqs_.push_back(at::zeros_like(param));
      steps_.push_back(at::zeros({}, at::kFloat));
    }
  }
  // zero_grad as set_to_none, before the forward.
  void ZeroGrad() {
    for (const at::Tensor& param : params_) param.mutable_grad().reset();
  }
  // After backward: one fused kernel over every parameter.
  void Step() {
    for (size_t i = 0; i < params_.size(); ++i) grads_[i] = params_[i].grad();
    torch::NoGradGuard no_grad;
    if (adam_) {
      at::_foreach_add_(steps_, 1);
      at::_fused_adam_(params_, grads_, exp_avgs_, exp_avg_sqs_, /*max_exp_avg_sqs=*/{}, steps_, /*lr=*/1e-3,
                       /*beta1=*/0.9, /*beta2=*/0.999, /*weight_decay=*/0, /*eps=*/1e-8, /*amsgrad=*/false,
                       /*maximize=*/false);
    } else {
      at::_fused_sgd_(params_, grads_, /*momentum_buffer_list=*/{}, /*weight_decay=*/0, /*momentum=*/0, /*lr=*/1e-2,
                      /*dampening=*/0, /*nesterov=*/false, /*maximize=*/false, first_step_);
    }
    first_step_ = false;
  }

 private:
  std::vector<at::Tensor> params_;
  bool adam_;
  std::vector<at::Tensor> grads_;
  std::vector<at::Tensor> exp_avgs_;
  std::vector<at::Tensor> exp_avg_sqs_;
  std::vector<at::Tensor> steps_;
  bool first_step_ = true;
};

}  // namespace kiln::bench

#endif  // KILN_TESTS_BENCH_FUSED_LOOP_H_
