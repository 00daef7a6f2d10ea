// OneCycleLR (one_cycle_lr.h).
#include "trainer/optim/one_cycle_lr.h"

#include <cmath>
#include <cstddef>
#include <utility>
#include <vector>

#include "c10/util/Exception.h"

namespace kiln {
namespace {

constexpr double kPi = 3.14159265358979323846;

}  // namespace

OneCycleLR::OneCycleLR(torch::optim::Optimizer& optimizer, OneCycleLROptions options)
    : LRScheduler(optimizer), options_(std::move(options)) {
  const OneCycleLROptions& o = options_;
  TORCH_CHECK(o.max_lr > 0 && std::isfinite(o.max_lr), "OneCycleLR: max_lr must be > 0, got ", o.max_lr);
  TORCH_CHECK(o.total_steps >= 1, "OneCycleLR: total_steps must be >= 1, got ", o.total_steps);
  TORCH_CHECK(o.pct_start >= 0 && o.pct_start <= 1, "OneCycleLR: pct_start must be in [0, 1], got ", o.pct_start);
  TORCH_CHECK(o.anneal_strategy == "cos" || o.anneal_strategy == "linear",
              "OneCycleLR: anneal_strategy must be \"cos\" or \"linear\", got \"", o.anneal_strategy, "\"");
  TORCH_CHECK(o.div_factor > 0, "OneCycleLR: div_factor must be > 0, got ", o.div_factor);
  TORCH_CHECK(o.final_div_factor > 0, "OneCycleLR: final_div_factor must be > 0, got ", o.final_div_factor);
  const double initial_lr = o.max_lr / o.div_factor;
  const double min_lr = initial_lr / o.final_div_factor;
  const double total = static_cast<double>(o.total_steps);
  // Phase boundaries are fractional steps, as PyTorch computes them.
  if (o.three_phase) {
    phases_ = {{o.pct_start * total - 1, initial_lr, o.max_lr},
               {2 * o.pct_start * total - 2, o.max_lr, initial_lr},
               {total - 1, initial_lr, min_lr}};
  } else {
    phases_ = {{o.pct_start * total - 1, initial_lr, o.max_lr}, {total - 1, o.max_lr, min_lr}};
  }
  InitialStep();
}

double OneCycleLR::Anneal(double start, double end, double pct) const {
  if (options_.anneal_strategy == "linear") return (end - start) * pct + start;
  return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1);
}

std::vector<double> OneCycleLR::ComputeLrs(int64_t epoch) {
  TORCH_CHECK(epoch <= options_.total_steps, "OneCycleLR was stepped ", epoch + 1, " times but its total_steps is ",
              options_.total_steps,
              "; make total_steps cover every step of the run (Lightning's "
              "trainer.estimated_stepping_batches)");
  const double step = static_cast<double>(epoch);
  double start_step = 0;
  double lr = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& phase = phases_[i];
    if (step <= phase.end_step || i + 1 == phases_.size()) {
      lr = Anneal(phase.start_lr, phase.end_lr, (step - start_step) / (phase.end_step - start_step));
      break;
    }
    start_step = phase.end_step;
  }
  return std::vector<double>(get_current_lrs().size(), lr);
}

}  // namespace kiln
