// SequentialLR: runs schedules one after another on one optimizer, switching at the milestones (PyTorch's
// SequentialLR). At milestone i schedule i+1 restarts at its step 0 from the base rates, so a warm-up followed by a
// cosine is SequentialLR({LinearLR, CosineAnnealingLR}, {warmup_steps}).
#ifndef KILN_TRAINER_OPTIM_SEQUENTIAL_LR_H_
#define KILN_TRAINER_OPTIM_SEQUENTIAL_LR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "trainer/optim/lr_scheduler.h"

namespace kiln {

class SequentialLR final : public LRScheduler {
 public:
  // `schedulers` must all drive `optimizer`, built in order just before (none stepped yet), one more than the
  // increasing `milestones`. Every schedule starts from the first one's base rates (PyTorch's shared initial_lr).
  // Throws c10::Error otherwise.
  SequentialLR(torch::optim::Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);

  // Each switch, and the milestones of each schedule it runs that fall before the next switch, counted from the
  // start of this schedule.
  std::vector<Milestone> milestones() const override;

 protected:
  std::vector<double> ComputeLrs(int64_t epoch) override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_OPTIM_SEQUENTIAL_LR_H_
