// DDPStrategy: distributed data parallel on torch.distributed's own C++ engine (c10d), like Lightning's
// DDPStrategy.
//
// Set-up (ParallelStrategy, parallel_strategy.h): the processes meet through c10d's TCPStore, make a process group on
// the accelerator's own collective backend, check it, and start from rank 0's parameters and buffers. Gradients are
// averaged by PyTorch's own DDP reducer (c10d::Reducer: buckets whose all-reduces start during the backward pass,
// rebuilt in gradient order after the first step; with find_unused_parameters, parameters that take no part in a
// step are found from the loss's graph).
#ifndef KILN_TRAINER_STRATEGIES_DDP_STRATEGY_H_
#define KILN_TRAINER_STRATEGIES_DDP_STRATEGY_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "trainer/strategies/parallel_strategy.h"

namespace c10d {
class Reducer;
}  // namespace c10d

namespace kiln {

struct DDPOptions {
  absl::Duration timeout = absl::Minutes(30);  // PyTorch's default for joining and for each collective.
  std::optional<std::string> process_group_backend;  // Unset: the accelerator's preference.
  int64_t bucket_cap_mb = 25;                  // PyTorch DDP's bucket size.
  // Lightning's and PyTorch's: find the parameters that get no gradient in a step (from the loss's graph) and
  // reduce them as zeros. Without it, a parameter that takes no part in a step stops the next one with c10d's
  // error. Strategy names: "ddp_find_unused_parameters_true" / "_false".
  bool find_unused_parameters = false;
};

class DDPStrategy final : public ParallelStrategy {
 public:
  explicit DDPStrategy(DDPOptions options = {});
  ~DDPStrategy() override;

  std::string name() const override { return "ddp"; }

  absl::Status Setup(const Plan& plan, torch::nn::Module& model) override;
  void Backward(const at::Tensor& loss, bool sync_gradients) override;
  void OptimizerStep(torch::optim::Optimizer& optimizer) override;

  const DDPOptions& options() const { return options_; }

 private:
  std::string FailureHint(const std::string& message) const override;
  void ReleaseState() override;

  DDPOptions options_;
  std::shared_ptr<c10d::Reducer> reducer_;  // Null when no parameter needs a gradient.
};

}  // namespace kiln

#endif  // KILN_TRAINER_STRATEGIES_DDP_STRATEGY_H_
