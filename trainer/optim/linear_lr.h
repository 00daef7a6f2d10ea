// LinearLR: the rate goes linearly from start_factor to end_factor times its base over total_iters steps, then
// stays (PyTorch's LinearLR). With SequentialLR before another schedule, or beside ReduceLROnPlateau, it is the
// linear warm-up.
#ifndef KILN_TRAINER_OPTIM_LINEAR_LR_H_
#define KILN_TRAINER_OPTIM_LINEAR_LR_H_

#include <cstdint>
#include <vector>

#include "trainer/optim/lr_scheduler.h"

namespace kiln {

class LinearLR final : public LRScheduler {
 public:
  // PyTorch's defaults. Throws c10::Error unless 0 < start_factor <= 1, 0 <= end_factor <= 1 and total_iters >= 1
  // (PyTorch allows start_factor 0 but then divides by zero on its second step).
  explicit LinearLR(torch::optim::Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0,
                    int64_t total_iters = 5);

 protected:
  std::vector<double> ComputeLrs(int64_t epoch) override;
  std::vector<double> ClosedFormLrs(int64_t epoch) override;

 private:
  double start_factor_;
  double end_factor_;
  int64_t total_iters_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_OPTIM_LINEAR_LR_H_
