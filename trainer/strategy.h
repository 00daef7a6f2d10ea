// The strategy seam: how the trainer places the model and data, runs backward and steps optimizers, reduces
// values across processes, and decides who does rank-zero work. The single-device strategy is here; data-parallel
// strategies implement the same interface.
//
// Thread-safety: a strategy belongs to the loop thread.
#ifndef KILN_TRAINER_STRATEGY_H_
#define KILN_TRAINER_STRATEGY_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "connector/plan.h"
#include "torch/nn/module.h"
#include "torch/optim/optimizer.h"
#include "trainer/batch.h"

namespace kiln {

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;

  // Sets up this process's device through the accelerator and moves `model` there. Errors stop the run before
  // training. Called once per fit/validate/test; Teardown follows it, also after a failure.
  virtual absl::Status Setup(torch::nn::Module& model) = 0;
  virtual absl::Status Teardown() = 0;

  virtual c10::Device root_device() const = 0;
  virtual Batch BatchToDevice(const Batch& batch) const = 0;
  virtual void Backward(const at::Tensor& loss) = 0;
  virtual void OptimizerStep(torch::optim::Optimizer& optimizer) = 0;
  // The mean of `value` over all processes (the value itself with one process).
  virtual at::Tensor ReduceMean(const at::Tensor& value) = 0;
  // True in the one process that logs, writes checkpoints and shows progress.
  virtual bool is_global_zero() const = 0;
  virtual void Barrier() = 0;
};

// Everything on one device of the plan's accelerator (which need not be a CPU: for a third-party accelerator, its
// own device, unlike Lightning's fallback to the CPU).
class SingleDeviceStrategy final : public Strategy {
 public:
  explicit SingleDeviceStrategy(const Plan& plan);

  std::string name() const override { return "single_device"; }
  absl::Status Setup(torch::nn::Module& model) override;
  absl::Status Teardown() override;
  c10::Device root_device() const override { return device_; }
  Batch BatchToDevice(const Batch& batch) const override;
  void Backward(const at::Tensor& loss) override;
  void OptimizerStep(torch::optim::Optimizer& optimizer) override;
  at::Tensor ReduceMean(const at::Tensor& value) override { return value; }
  bool is_global_zero() const override { return true; }
  void Barrier() override {}

 private:
  std::shared_ptr<Accelerator> accelerator_;
  c10::Device device_;
  bool set_up_ = false;
};

}  // namespace kiln

#endif  // KILN_TRAINER_STRATEGY_H_
