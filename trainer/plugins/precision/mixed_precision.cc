#include "trainer/plugins/precision/mixed_precision.h"

#include <utility>

#include "ATen/autocast_mode.h"
#include "absl/strings/str_cat.h"
#include "hal/compat/autocast.h"
#include "hal/compat/version.h"

namespace kiln {

absl::StatusOr<std::unique_ptr<MixedPrecision>> MixedPrecision::Create(const MixedPrecisionOptions& options) {
  const Precision precision = options.precision;
  if (precision != Precision::kBf16Mixed && precision != Precision::k16Mixed) {
    return absl::InvalidArgumentError(absl::StrCat("MixedPrecision runs bf16-mixed or 16-mixed, not '",
                                                   PrecisionName(precision), "'; use TruePrecision for *-true"));
  }
  const at::ScalarType dtype =
      options.autocast_dtype.value_or(precision == Precision::kBf16Mixed ? at::kBFloat16 : at::kHalf);
  if (dtype != at::kBFloat16 && dtype != at::kHalf) {
    return absl::InvalidArgumentError(absl::StrCat("autocast type ", c10::toString(dtype), " for ",
                                                   PrecisionName(precision),
                                                   " is not valid; autocast runs BFloat16 or Half"));
  }
  const std::string device = c10::DeviceTypeName(options.device_type, /*lower_case=*/true);
  if (!compat::HasAutocast(options.device_type)) {
    return absl::UnimplementedError(absl::StrCat(
        "precision '", PrecisionName(precision), "' needs LibTorch's autocast, which LibTorch ",
        compat::BuiltLibTorchVersion(), " has for ", compat::AutocastDeviceTypes(), " devices but not for ", device,
        " devices; use 32-true or a *-true precision the accelerator declares"));
  }
  if (!compat::HasAutocastType(options.device_type, dtype)) {
    return absl::UnimplementedError(
        absl::StrCat("precision '", PrecisionName(precision), "' needs ", dtype == at::kHalf ? "float16" : "bfloat16",
                     " autocast on ", device, " devices, which LibTorch ", compat::BuiltLibTorchVersion(),
                     " does not have (its CPU autocast runs bfloat16 only); use bf16-mixed"));
  }
  std::optional<GradScaler> scaler;
  if (precision == Precision::k16Mixed) {
    absl::StatusOr<GradScaler> created = GradScaler::Create(options.scaler);
    if (!created.ok()) return created.status();
    scaler.emplace(std::move(created).value());
  }
  return std::unique_ptr<MixedPrecision>(new MixedPrecision(precision, options.device_type, dtype, std::move(scaler)));
}

absl::Status MixedPrecision::CheckDevice(const c10::Device& device) const {
  if (device.type() == device_type_) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the ", PrecisionName(precision_), " plugin autocasts for ", c10::DeviceTypeName(device_type_, true),
      " devices but the model runs on ", device.str(), "; create it with device_type matching the accelerator's"));
}

std::function<void()> MixedPrecision::EnterForward() {
  // As torch.autocast's __enter__ and __exit__.
  const c10::DeviceType device_type = device_type_;
  const compat::AutocastState previous = compat::GetAutocast(device_type);
  const bool previous_cache = at::autocast::is_autocast_cache_enabled();
  compat::SetAutocast(device_type, {.enabled = true, .dtype = autocast_dtype_});
  at::autocast::set_autocast_cache_enabled(true);
  at::autocast::increment_nesting();
  return [device_type, previous, previous_cache] {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    compat::SetAutocast(device_type, previous);
    at::autocast::set_autocast_cache_enabled(previous_cache);
  };
}

at::Tensor MixedPrecision::PreBackward(const at::Tensor& loss) { return scaler_ ? scaler_->scale(loss) : loss; }

void MixedPrecision::UnscaleGradients(torch::optim::Optimizer& optimizer) {
  if (scaler_) scaler_->unscale_(optimizer);
}

bool MixedPrecision::OptimizerStep(torch::optim::Optimizer& optimizer, const std::function<void()>& step) {
  if (!scaler_) return PrecisionPlugin::OptimizerStep(optimizer, step);
  return scaler_->step(optimizer, step);
}

void MixedPrecision::Update() {
  if (scaler_) scaler_->update();
}

PrecisionState MixedPrecision::state_dict() const { return scaler_ ? scaler_->state_dict() : PrecisionState{}; }

absl::Status MixedPrecision::CheckStateDict(const PrecisionState& state) const {
  return scaler_ ? GradScaler::CheckStateDict(state) : absl::OkStatus();
}

absl::Status MixedPrecision::load_state_dict(const PrecisionState& state) {
  return scaler_ ? scaler_->load_state_dict(state) : absl::OkStatus();
}

}  // namespace kiln
