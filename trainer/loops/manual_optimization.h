// Manual optimization (Lightning's loops/optimization/manual.py): what the module's manual_backward, optimizers()
// and lr_schedulers() do while its training_step runs, with automatic_optimization() false. A room of the training
// epoch loop, internal to //trainer.
#ifndef KILN_TRAINER_LOOPS_MANUAL_OPTIMIZATION_H_
#define KILN_TRAINER_LOOPS_MANUAL_OPTIMIZATION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/status.h"
#include "trainer/core/lightning_module.h"
#include "trainer/loops/progress.h"

namespace kiln {

struct LoopContext;

class ManualOptimization final : public ManualOptimizationDriver {
 public:
  // Counts the steps in `optim_progress` and `scheduler_progress`, the training epoch loop's. All three outlive it.
  ManualOptimization(LoopContext& context, OptimizerProgress& optim_progress, SchedulerProgress& scheduler_progress)
      : context_(context), optim_progress_(optim_progress), scheduler_progress_(scheduler_progress) {}

  // Before each training_step of `model`: nothing stepped or skipped yet.
  void StartBatch(LightningModule& model, int64_t batch_idx);
  // What the batch's step did: optimizer steps taken, and whether a non-finite loss skipped it (on_nonfinite_loss
  // "skip"). failure(): the error of a non-finite loss under "stop" (the exception that ended training_step).
  int64_t steps() const { return steps_; }
  bool skipped() const { return skipped_; }
  const absl::Status& failure() const { return failure_; }

  std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers() const override;
  std::vector<at::Tensor> optimizer_parameters(size_t index) const override;
  size_t num_schedulers() const override;
  void Backward(const at::Tensor& loss) override;
  void UnscaleGradients(size_t index) override;
  void Step(size_t index) override;
  void StepScheduler(size_t index, std::optional<double> metric) override;
  LightningModule& module() const override { return *model_; }
  bool SetGradientSync(bool sync) override { return std::exchange(sync_gradients_, sync); }

 private:
  LoopContext& context_;
  OptimizerProgress& optim_progress_;
  SchedulerProgress& scheduler_progress_;
  LightningModule* model_ = nullptr;
  int64_t batch_idx_ = 0;
  int64_t steps_ = 0;
  bool skipped_ = false;
  bool sync_gradients_ = true;  // manual_backward all-reduces (toggle_model(sync_grad=false) turns it off).
  absl::Status failure_;
  std::set<size_t> unscaled_;  // Optimizers whose gradients the precision plugin unscaled since their last step.
};

}  // namespace kiln

#endif  // KILN_TRAINER_LOOPS_MANUAL_OPTIMIZATION_H_
