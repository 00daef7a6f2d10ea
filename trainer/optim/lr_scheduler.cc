// Kiln's scheduler base (lr_scheduler.h).
#include "trainer/optim/lr_scheduler.h"

#include <cstddef>
#include <vector>

#include "c10/util/Exception.h"

namespace kiln {

LRScheduler::LRScheduler(torch::optim::Optimizer& optimizer)
    : torch::optim::LRScheduler(optimizer), optimizer_(optimizer), base_lrs_(get_current_lrs()) {}

void LRScheduler::SetLrs(const std::vector<double>& lrs) {
  auto& groups = optimizer_.param_groups();
  TORCH_CHECK(lrs.size() == groups.size(), "a learning-rate schedule gave ", lrs.size(), " rates for ", groups.size(),
              " parameter groups");
  for (size_t i = 0; i < groups.size(); ++i) groups[i].options().set_lr(lrs[i]);
}

// LibTorch's step() asks for the rates before it counts the step, so step_count_ here is the epoch being entered.
std::vector<double> LRScheduler::get_lrs() {
  if (restarting_) {
    restarting_ = false;
    return ClosedFormLrs(0);
  }
  return ComputeLrs(static_cast<int64_t>(step_count_));
}

void LRScheduler::Restart() {
  step_count_ = 0;
  restarting_ = true;
  step();
}

}  // namespace kiln
