// SequentialLR (sequential_lr.h).
#include "trainer/optim/sequential_lr.h"

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "c10/util/Exception.h"

namespace kiln {

SequentialLR::SequentialLR(torch::optim::Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  TORCH_CHECK(!schedulers_.empty() && milestones_.size() + 1 == schedulers_.size(),
              "SequentialLR needs one more scheduler than milestones, got ", schedulers_.size(), " and ",
              milestones_.size());
  TORCH_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()) && milestones_.front() >= 1,
              "SequentialLR's milestones must be increasing and >= 1");
  for (const auto& scheduler : schedulers_) {
    TORCH_CHECK(scheduler != nullptr && &scheduler->optimizer_ == &optimizer,
                "SequentialLR's schedulers must all drive its optimizer");
    TORCH_CHECK(scheduler->last_epoch() == 0, "SequentialLR's schedulers must not have stepped yet");
  }
  // Building each schedule took its initial step; SequentialLR takes only the first one's, from the base rates.
  const std::vector<double> base = schedulers_.front()->base_lrs();
  SetLrs(base);
  for (const auto& scheduler : schedulers_) {
    scheduler->base_lrs_ = base;
    scheduler->step_count_ = 0;
  }
  schedulers_.front()->InitialStep();
  base_lrs_ = base;
  step_count_ = 1;  // This scheduler's own initial step, whose rates the first schedule set.
}

std::vector<LRScheduler::Milestone> SequentialLR::milestones() const {
  std::vector<Milestone> found;
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    const int64_t start = i == 0 ? 0 : milestones_[i - 1];
    if (i > 0) {
      found.push_back({start, "SequentialLR(milestones[" + std::to_string(i - 1) + "]=" + std::to_string(start) + ")"});
    }
    for (const Milestone& inner : schedulers_[i]->milestones()) {
      if (i + 1 < schedulers_.size() && start + inner.step >= milestones_[i]) break;  // Cut off by the next switch.
      found.push_back({start + inner.step, "SequentialLR's schedule " + std::to_string(i) + ", " + inner.setting});
    }
  }
  return found;
}

std::vector<double> SequentialLR::ComputeLrs(int64_t epoch) {
  const size_t index = std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin();
  LRScheduler& scheduler = *schedulers_[index];
  if (index > 0 && milestones_[index - 1] == epoch) {
    scheduler.Restart();
  } else {
    scheduler.step();
  }
  return scheduler.get_last_lr();
}

}  // namespace kiln
