// CosineAnnealingLR (cosine_annealing_lr.h).
#include "trainer/optim/cosine_annealing_lr.h"

#include <cmath>
#include <cstddef>
#include <vector>

#include "c10/util/Exception.h"

namespace kiln {
namespace {

constexpr double kPi = 3.14159265358979323846;

}  // namespace

CosineAnnealingLR::CosineAnnealingLR(torch::optim::Optimizer& optimizer, int64_t T_max, double eta_min)  // NOLINT
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  TORCH_CHECK(T_max >= 1, "CosineAnnealingLR: T_max must be >= 1, got ", T_max);
  TORCH_CHECK(eta_min >= 0, "CosineAnnealingLR: eta_min must be >= 0, got ", eta_min);
  InitialStep();
}

// Recursive, as PyTorch's get_lr, so that the rates match PyTorch's to rounding: each step scales the distance to
// eta_min by the ratio of consecutive cosine values. At the bottom of a period (where that ratio would divide by
// zero) it adds the first step of the climb back instead.
std::vector<double> CosineAnnealingLR::ComputeLrs(int64_t epoch) {
  std::vector<double> lrs = get_current_lrs();
  if (epoch == 0) return lrs;
  const double t = static_cast<double>(epoch);
  const double period = static_cast<double>(t_max_);
  if ((epoch - 1 - t_max_) % (2 * t_max_) == 0) {
    for (size_t i = 0; i < lrs.size(); ++i) {
      lrs[i] += (base_lrs()[i] - eta_min_) * (1 - std::cos(kPi / period)) / 2;
    }
    return lrs;
  }
  const double ratio = (1 + std::cos(kPi * t / period)) / (1 + std::cos(kPi * (t - 1) / period));
  for (double& lr : lrs) lr = ratio * (lr - eta_min_) + eta_min_;
  return lrs;
}

std::vector<double> CosineAnnealingLR::ClosedFormLrs(int64_t epoch) {
  std::vector<double> lrs = base_lrs();
  const double t = static_cast<double>(epoch);
  for (double& lr : lrs) lr = eta_min_ + (lr - eta_min_) * (1 + std::cos(kPi * t / static_cast<double>(t_max_))) / 2;
  return lrs;
}

}  // namespace kiln
