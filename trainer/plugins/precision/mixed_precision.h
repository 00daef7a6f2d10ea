// MixedPrecision: bf16-mixed and 16-mixed (Lightning's MixedPrecision).
//
// The parameters, their gradients and the optimizer state stay float32 (the module is not converted); the steps
// run under LibTorch's autocast for the device type, which computes matrix multiplications, linear layers and
// convolutions in the low-precision type and keeps reductions and losses in float32. bf16-mixed autocasts to
// bfloat16; 16-mixed autocasts to float16 and scales the loss with a GradScaler (grad_scaler.h), since float16
// gradients underflow where bfloat16 ones (with float32's exponent range) do not.
//
// LibTorch's autocast exists for the device types compat::AutocastDeviceTypes() lists (cpu, cuda, xpu, hpu, the
// out-of-tree device and more), in bfloat16 and float16. The forward context enters autocast as
// torch.autocast does (saving and restoring the enabled flag, the dtype and the cache flag, nesting counted) and
// clears autocast's cache of cast weights when the outermost context leaves, so a weight updated by the optimizer is
// never served from a stale low-precision copy.
//
// Thread-safety: see precision_plugin.h (autocast state is thread-local: the context affects its own thread only).
#ifndef KILN_TRAINER_PLUGINS_PRECISION_MIXED_PRECISION_H_
#define KILN_TRAINER_PLUGINS_PRECISION_MIXED_PRECISION_H_

#include <functional>
#include <memory>
#include <optional>

#include "c10/core/DeviceType.h"
#include "c10/core/ScalarType.h"
#include "trainer/plugins/precision/grad_scaler.h"
#include "trainer/plugins/precision/precision_plugin.h"

namespace kiln {

struct MixedPrecisionOptions {
  Precision precision = Precision::kBf16Mixed;  // kBf16Mixed or k16Mixed.
  c10::DeviceType device_type = c10::DeviceType::CPU;
  // The autocast type; unset: bfloat16 for bf16-mixed, float16 for 16-mixed. Setting bfloat16 for 16-mixed runs
  // 16-mixed's loss scaling over bfloat16 autocast: no accelerator needs that, but it is how 16-mixed's whole path
  // (scaled backward, unscale, skipped steps, checkpointed scale) runs on a CPU, which has no float16 autocast.
  std::optional<at::ScalarType> autocast_dtype;
  GradScalerOptions scaler;  // 16-mixed only.
};

class MixedPrecision final : public PrecisionPlugin {
 public:
  // InvalidArgument for a precision that is not mixed or an autocast type that is neither bfloat16 nor float16;
  // Unimplemented, naming the alternative, for a device type or autocast type this LibTorch has no autocast for;
  // the GradScaler's own option errors.
  static absl::StatusOr<std::unique_ptr<MixedPrecision>> Create(const MixedPrecisionOptions& options);

  Precision precision() const override { return precision_; }
  c10::DeviceType device_type() const { return device_type_; }
  at::ScalarType autocast_dtype() const { return autocast_dtype_; }
  // The loss scaler (16-mixed), or null (bf16-mixed).
  GradScaler* scaler() { return scaler_ ? &*scaler_ : nullptr; }

  // FailedPrecondition unless `device` has this plugin's device type.
  absl::Status CheckDevice(const c10::Device& device) const override;
  at::Tensor PreBackward(const at::Tensor& loss) override;
  void UnscaleGradients(torch::optim::Optimizer& optimizer) override;
  bool OptimizerStep(torch::optim::Optimizer& optimizer, const std::function<void()>& step) override;
  void Update() override;
  void SetOverflowAgreement(std::function<void(at::Tensor&)> agree) override {
    if (scaler_) scaler_->set_found_inf_reducer(std::move(agree));
  }
  // The GradScaler's state (16-mixed), else empty.
  PrecisionState state_dict() const override;
  absl::Status CheckStateDict(const PrecisionState& state) const override;
  absl::Status load_state_dict(const PrecisionState& state) override;

 protected:
  std::function<void()> EnterForward() override;

 private:
  MixedPrecision(Precision precision, c10::DeviceType device_type, at::ScalarType autocast_dtype,
                 std::optional<GradScaler> scaler)
      : precision_(precision), device_type_(device_type), autocast_dtype_(autocast_dtype), scaler_(std::move(scaler)) {}

  Precision precision_;
  c10::DeviceType device_type_;
  at::ScalarType autocast_dtype_;
  std::optional<GradScaler> scaler_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_PLUGINS_PRECISION_MIXED_PRECISION_H_
