#include "trainer/loops/loss_check.h"

#include <cmath>
#include <utility>

#include "ATen/ATen.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace kiln {

namespace {
constexpr char kNonFiniteLossPayload[] = "type.kiln/NonFiniteLoss";
}  // namespace

absl::Status NonFiniteLossError(const std::string& loss, int64_t epoch, int64_t batch, int64_t global_step) {
  absl::Status error = absl::AbortedError(absl::StrCat(
      "the training loss is ", loss, " at epoch ", epoch, ", batch ", batch, " (global step ", global_step,
      "); training stopped before applying it. Lower the learning rate, clip gradients "
      "(gradient_clip_val), or pass on_nonfinite_loss=\"skip\" to skip such batches"));
  error.SetPayload(kNonFiniteLossPayload, absl::Cord(loss));
  return error;
}

bool IsNonFiniteLossError(const absl::Status& status) {
  return status.GetPayload(kNonFiniteLossPayload).has_value();
}

void DeviceLossCheck::Start(bool on_device, const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers) {
  on_device_ = on_device;
  optimizers_.clear();
  for (const auto& optimizer : optimizers) {
    auto* skipping = dynamic_cast<DeviceSkipOptimizer*>(optimizer.get());
    if (skipping == nullptr) continue;
    skipping->set_found_inf(at::Tensor());
    if (on_device_) optimizers_.push_back(skipping);
  }
  failure_ = absl::OkStatus();
  pending_.clear();
  found_inf_ = at::Tensor();  // Made on the loss's device at the epoch's first step, then updated in place.
}

void DeviceLossCheck::Add(const at::Tensor& loss, int64_t epoch, int64_t batch, int64_t global_step) {
  const at::Tensor value = loss.detach();
  if (!found_inf_.defined() || found_inf_.device() != value.device()) {
    found_inf_ = found_inf_.defined() ? found_inf_.to(value.device()) : at::zeros({}, value.options().dtype(at::kFloat));
    for (DeviceSkipOptimizer* optimizer : optimizers_) optimizer->set_found_inf(found_inf_);
  }
  // x - x is 0 when x is finite, else NaN, which is true: one subtraction and one in-place or.
  found_inf_.logical_or_(value - value);
  pending_.push_back({epoch, batch, global_step, value});
}

absl::Status DeviceLossCheck::Check(std::optional<Loss>* failed) {
  if (pending_.empty()) return failure_;
  std::vector<Loss> pending;
  pending.swap(pending_);
  if (found_inf_.item<float>() == 0) return absl::OkStatus();
  for (Loss& entry : pending) {
    const double value = entry.loss.item<double>();
    if (std::isfinite(value)) continue;
    // The device skipped this batch's update and every one after it: the run stands where it stood before it.
    failure_ = NonFiniteLossError(absl::StrCat(value), entry.epoch, entry.batch, entry.global_step);
    *failed = std::move(entry);
    return failure_;
  }
  failure_ = absl::InternalError(
      "the device flagged a non-finite training loss that none of the losses since the last check has; training "
      "stopped");
  return failure_;
}

}  // namespace kiln
