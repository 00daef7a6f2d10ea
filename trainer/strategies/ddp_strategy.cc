#include "trainer/strategies/ddp_strategy.h"

#include <exception>
#include <vector>

#include "ATen/ATen.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "hal/compat/c10d.h"
#include "hal/compat/error_message.h"
#include "torch/csrc/distributed/c10d/reducer.hpp"
#include "trainer/core/option_fix.h"

namespace kiln {
namespace {

constexpr size_t kFirstBucketBytes = 1024 * 1024;  // PyTorch DDP's _DEFAULT_FIRST_BUCKET_BYTES.

}  // namespace

DDPStrategy::DDPStrategy(DDPOptions options)
    : ParallelStrategy(options.timeout, options.process_group_backend), options_(std::move(options)) {}

DDPStrategy::~DDPStrategy() = default;

std::string DDPStrategy::FailureHint(const std::string& message) const {
  // c10d::Reducer's own error for a parameter that got no gradient names PyTorch's flag; Kiln's is a strategy name.
  if (absl::StrContains(message, "find_unused_parameters")) {
    return absl::StrCat("; if the model has parameters that take no part in a step, use ",
                        OptionFix("the strategy \"ddp_find_unused_parameters_true\" (TrainerOptions: .strategy = "
                                  "\"ddp_find_unused_parameters_true\"; a DDPStrategy instance: "
                                  "DDPOptions{.find_unused_parameters = true})",
                                  "--strategy=ddp_find_unused_parameters_true"));
  }
  return ParallelStrategy::FailureHint(message);
}

absl::Status DDPStrategy::Setup(const Plan& plan, torch::nn::Module& model) {
  if (absl::Status joined = JoinProcessGroup(plan, model); !joined.ok()) return joined;
  try {
    // PyTorch's own DDP reducer: bucketed gradient all-reduces that start during backward.
    std::vector<at::Tensor> parameters;
    for (const at::Tensor& parameter : model.parameters()) {
      if (parameter.requires_grad()) parameters.push_back(parameter);
    }
    if (!parameters.empty()) {
      compat::ReducerOptions reducer_options;
      reducer_options.first_bucket_bytes = kFirstBucketBytes;
      reducer_options.bucket_bytes = static_cast<size_t>(options_.bucket_cap_mb) * 1024 * 1024;
      reducer_options.find_unused_parameters = options_.find_unused_parameters;
      reducer_ = compat::MakeReducer(parameters, process_group(), reducer_options);
    }
  } catch (const std::exception& e) {
    return NotMet(absl::StrCat("setting up the gradient reducer failed: ", compat::ExceptionMessage(e)));
  }
  return absl::OkStatus();
}

void DDPStrategy::ReleaseState() { reducer_.reset(); }

void DDPStrategy::Backward(const at::Tensor& loss, bool sync_gradients) {
  Collective("the backward pass's gradient all-reduce", [&] {
    if (reducer_ != nullptr) {
      // What DistributedDataParallel's forward does before the model runs: agree on the buckets' order after the
      // first iteration (a collective, on every rank), then arm the reducer for this backward. Without it (a
      // no_sync window) the reducer's hooks do nothing and gradients accumulate locally.
      reducer_->rebuild_buckets();
      if (sync_gradients) {
        reducer_->prepare_for_forward();
        reducer_->prepare_for_backward({loss});
      }
    }
    loss.backward();  // The reducer finishes its all-reduces in autograd's final callback, before this returns.
  });
}

void DDPStrategy::OptimizerStep(torch::optim::Optimizer& optimizer) { optimizer.step(); }

}  // namespace kiln
