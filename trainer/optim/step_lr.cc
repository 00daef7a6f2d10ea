// StepLR (step_lr.h).
#include "trainer/optim/step_lr.h"

#include <cmath>
#include <string>
#include <vector>

#include "c10/util/Exception.h"

namespace kiln {

StepLR::StepLR(torch::optim::Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  TORCH_CHECK(step_size >= 1, "StepLR: step_size must be >= 1, got ", step_size);
  TORCH_CHECK(gamma > 0, "StepLR: gamma must be > 0, got ", gamma);
  InitialStep();
}

// Recursive, as PyTorch's get_lr: the current rate, times gamma on every step_size-th step.
std::vector<LRScheduler::Milestone> StepLR::milestones() const {
  return {{step_size_, "StepLR(step_size=" + std::to_string(step_size_) + ")"}};
}

std::vector<double> StepLR::ComputeLrs(int64_t epoch) {
  std::vector<double> lrs = get_current_lrs();
  if (epoch == 0 || epoch % step_size_ != 0) return lrs;
  for (double& lr : lrs) lr *= gamma_;
  return lrs;
}

std::vector<double> StepLR::ClosedFormLrs(int64_t epoch) {
  std::vector<double> lrs = base_lrs();
  for (double& lr : lrs) lr *= std::pow(gamma_, static_cast<double>(epoch / step_size_));
  return lrs;
}

}  // namespace kiln
