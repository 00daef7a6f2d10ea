// CosineAnnealingLR: the rate follows half a cosine from its base down to eta_min over T_max steps (PyTorch's
// CosineAnnealingLR, without restarts). Past T_max it climbs back, as PyTorch's does: pass the run's length.
#ifndef KILN_TRAINER_OPTIM_COSINE_ANNEALING_LR_H_
#define KILN_TRAINER_OPTIM_COSINE_ANNEALING_LR_H_

#include <cstdint>
#include <vector>

#include "trainer/optim/lr_scheduler.h"

namespace kiln {

class CosineAnnealingLR final : public LRScheduler {
 public:
  // Throws c10::Error unless T_max >= 1 and eta_min >= 0.
  CosineAnnealingLR(torch::optim::Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);  // NOLINT

 protected:
  std::vector<double> ComputeLrs(int64_t epoch) override;
  std::vector<double> ClosedFormLrs(int64_t epoch) override;

 private:
  int64_t t_max_;
  double eta_min_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_OPTIM_COSINE_ANNEALING_LR_H_
