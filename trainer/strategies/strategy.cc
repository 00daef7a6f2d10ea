#include "trainer/strategies/strategy.h"

#include <cstring>

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"
#include "hal/compat/error_message.h"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"
#include "trainer/core/lightning_module.h"

namespace kiln {

std::vector<std::string> Strategy::ExchangeThroughStore(const std::string&, const std::string& mine) { return {mine}; }

std::vector<at::Tensor> Strategy::AllGather(const at::Tensor& value) {
  TORCH_CHECK(world_size() == 1, "strategy '", name(), "' runs ", world_size(),
              " processes but does not implement Strategy::AllGather, which predicting with several processes needs");
  return {value.cpu()};
}

absl::Status Strategy::ConnectOptimizers(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers) {
  return absl::OkStatus();
}

void Strategy::ClipGradientsNorm(const std::vector<at::Tensor>& parameters, double max_norm) {
  ClipGradNorm(parameters, max_norm);
}

absl::Status Strategy::Finish() { return absl::OkStatus(); }

std::function<void(at::Tensor&)> Strategy::GradientOverflowAgreement() { return nullptr; }

c10::intrusive_ptr<c10d::ProcessGroup> Strategy::LayerSyncProcessGroup() const { return {}; }

absl::Status Strategy::WithFullState(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                                     const OptimizerStateCodec& codec, bool restoring,
                                     absl::FunctionRef<absl::Status()> body) {
  return body();
}

// Copies are queued without waiting (non_blocking, as Lightning's batch transfer does): a blocking host-to-device
// copy synchronises the stream, so the host would wait for the previous step every step. From pageable memory the
// driver stages the bytes before the call returns, so the batch may be freed at once.
absl::Status SetupDeviceAndModel(Accelerator& accelerator, const LogicalDevice& device, torch::nn::Module& model,
                                 bool* device_set_up) {
  if (absl::Status status = accelerator.SetupDevice(device); !status.ok()) {
    return absl::Status(status.code(), absl::StrCat("setting up ", accelerator.name(), " device ", device.ToString(),
                                                    " failed: ", status.message()));
  }
  *device_set_up = true;
  try {
    model.to(device.compute);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("moving the model to ", device.ToString(), " failed: ", compat::ExceptionMessage(e)));
  }
  return absl::OkStatus();
}

absl::Status SingleDeviceStrategy::Setup(const Plan& plan, torch::nn::Module& model) {
  accelerator_ = plan.accelerator;
  logical_device_ = plan.root_logical_device();
  device_ = logical_device_.compute;
  return SetupDeviceAndModel(*accelerator_, logical_device_, model, &set_up_);
}

absl::Status SingleDeviceStrategy::Teardown() {
  if (!set_up_) return absl::OkStatus();
  set_up_ = false;
  return accelerator_->TeardownDevice(logical_device_);
}

Batch SingleDeviceStrategy::BatchToDevice(const Batch& batch) const { return MoveBatch(batch, device_); }

void SingleDeviceStrategy::Backward(const at::Tensor& loss, bool sync_gradients) { loss.backward(); }

void SingleDeviceStrategy::OptimizerStep(torch::optim::Optimizer& optimizer) { optimizer.step(); }

std::vector<std::string> AllGatherText(Strategy& strategy, const std::string& text) {
  at::Tensor bytes = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
  if (!text.empty()) std::memcpy(bytes.data_ptr(), text.data(), text.size());  // An empty tensor has no memory.
  std::vector<std::string> all;
  for (const at::Tensor& theirs : strategy.AllGather(bytes)) {
    const at::Tensor local = theirs.cpu().contiguous();
    all.emplace_back(static_cast<const char*>(local.data_ptr()), static_cast<size_t>(local.numel()));
  }
  return all;
}

absl::Status Strategy::SetupEnvironment(const Plan&) { return absl::OkStatus(); }

}  // namespace kiln
