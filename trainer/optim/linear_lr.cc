// LinearLR (linear_lr.h).
#include "trainer/optim/linear_lr.h"

#include <algorithm>
#include <vector>

#include "c10/util/Exception.h"

namespace kiln {

LinearLR::LinearLR(torch::optim::Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer), start_factor_(start_factor), end_factor_(end_factor), total_iters_(total_iters) {
  TORCH_CHECK(start_factor > 0 && start_factor <= 1, "LinearLR: start_factor must be in (0, 1], got ", start_factor);
  TORCH_CHECK(end_factor >= 0 && end_factor <= 1, "LinearLR: end_factor must be in [0, 1], got ", end_factor);
  TORCH_CHECK(total_iters >= 1, "LinearLR: total_iters must be >= 1, got ", total_iters);
  InitialStep();
}

// Recursive, as PyTorch's get_lr: step 0 scales by start_factor; each later step within total_iters multiplies by
// the ratio of consecutive factors.
std::vector<double> LinearLR::ComputeLrs(int64_t epoch) {
  std::vector<double> lrs = get_current_lrs();
  if (epoch == 0) {
    for (double& lr : lrs) lr *= start_factor_;
    return lrs;
  }
  if (epoch > total_iters_) return lrs;
  const double change = end_factor_ - start_factor_;
  const double ratio =
      1.0 + change / (static_cast<double>(total_iters_) * start_factor_ + static_cast<double>(epoch - 1) * change);
  for (double& lr : lrs) lr *= ratio;
  return lrs;
}

std::vector<double> LinearLR::ClosedFormLrs(int64_t epoch) {
  std::vector<double> lrs = base_lrs();
  const double done = static_cast<double>(std::min(total_iters_, epoch)) / static_cast<double>(total_iters_);
  for (double& lr : lrs) lr *= start_factor_ + (end_factor_ - start_factor_) * done;
  return lrs;
}

}  // namespace kiln
