#include "trainer/strategy.h"

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"

namespace kiln {

SingleDeviceStrategy::SingleDeviceStrategy(const Plan& plan)
    : accelerator_(plan.accelerator), device_(plan.root_device()) {}

absl::Status SingleDeviceStrategy::Setup(torch::nn::Module& model) {
  if (absl::Status status = accelerator_->SetupDevice(device_); !status.ok()) {
    return absl::Status(status.code(), absl::StrCat("setting up ", accelerator_->name(), " device ", device_.str(),
                                                    " failed: ", status.message()));
  }
  set_up_ = true;
  try {
    model.to(device_);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("moving the model to ", device_.str(), " failed: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status SingleDeviceStrategy::Teardown() {
  if (!set_up_) return absl::OkStatus();
  set_up_ = false;
  return accelerator_->TeardownDevice(device_);
}

Batch SingleDeviceStrategy::BatchToDevice(const Batch& batch) const {
  if (batch.input.device() == device_ && (!batch.target.defined() || batch.target.device() == device_)) return batch;
  return {batch.input.to(device_), batch.target.defined() ? batch.target.to(device_) : at::Tensor()};
}

void SingleDeviceStrategy::Backward(const at::Tensor& loss) { loss.backward(); }

void SingleDeviceStrategy::OptimizerStep(torch::optim::Optimizer& optimizer) { optimizer.step(); }

}  // namespace kiln
