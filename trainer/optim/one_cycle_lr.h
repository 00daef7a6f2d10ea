// OneCycleLR: the 1cycle policy (PyTorch's OneCycleLR). The rate climbs from max_lr / div_factor to max_lr over the
// first pct_start of total_steps, then anneals to max_lr / div_factor / final_div_factor at the last step; with
// three_phase it first comes back down to max_lr / div_factor and anneals to the minimum in a third phase. The rate
// at each step depends only on the step, not on the optimizer's rate before it.
//
// Unlike PyTorch's (cycle_momentum=True by default), it does not cycle the momentum (SGD's momentum, Adam's beta1):
// the optimizer's momentum stays as configured.
#ifndef KILN_TRAINER_OPTIM_ONE_CYCLE_LR_H_
#define KILN_TRAINER_OPTIM_ONE_CYCLE_LR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/optim/lr_scheduler.h"

namespace kiln {

// PyTorch's names and defaults.
struct OneCycleLROptions {
  double max_lr = 0;        // The peak rate; required (> 0).
  int64_t total_steps = 0;  // Steps in the cycle; required (>= 1). Stepping past it throws, as PyTorch raises.
  double pct_start = 0.3;   // The share of the cycle spent climbing, in [0, 1].
  std::string anneal_strategy = "cos";  // "cos" or "linear".
  double div_factor = 25.0;             // The first rate is max_lr / div_factor.
  double final_div_factor = 1e4;        // The last rate is the first / final_div_factor.
  bool three_phase = false;
};

class OneCycleLR final : public LRScheduler {
 public:
  // Throws c10::Error naming the setting that is out of range.
  OneCycleLR(torch::optim::Optimizer& optimizer, OneCycleLROptions options);

 protected:
  std::vector<double> ComputeLrs(int64_t epoch) override;

 private:
  struct Phase {
    double end_step;
    double start_lr;
    double end_lr;
  };
  double Anneal(double start, double end, double pct) const;

  OneCycleLROptions options_;
  std::vector<Phase> phases_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_OPTIM_ONE_CYCLE_LR_H_
