// StepLR: the rate times gamma every step_size steps (PyTorch's StepLR, counted as PyTorch counts; see
// lr_scheduler.h for how this differs from LibTorch's torch::optim::StepLR).
#ifndef KILN_TRAINER_OPTIM_STEP_LR_H_
#define KILN_TRAINER_OPTIM_STEP_LR_H_

#include <cstdint>
#include <vector>

#include "trainer/optim/lr_scheduler.h"

namespace kiln {

class StepLR final : public LRScheduler {
 public:
  // Throws c10::Error unless step_size >= 1 and gamma > 0.
  StepLR(torch::optim::Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

  // The first decay (the later ones repeat it).
  std::vector<Milestone> milestones() const override;

 protected:
  std::vector<double> ComputeLrs(int64_t epoch) override;
  std::vector<double> ClosedFormLrs(int64_t epoch) override;

 private:
  int64_t step_size_;
  double gamma_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_OPTIM_STEP_LR_H_
