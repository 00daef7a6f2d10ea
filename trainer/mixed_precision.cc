#include "trainer/mixed_precision.h"

#include <utility>

#include "ATen/autocast_mode.h"
#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

// Autocast's per-device switches in LibTorch 1.13 (ATen/autocast_mode.h).
struct AutocastSwitch {
  bool (*is_enabled)();
  void (*set_enabled)(bool);
  at::ScalarType (*get_dtype)();
  void (*set_dtype)(at::ScalarType);
};

std::optional<AutocastSwitch> AutocastFor(c10::DeviceType device_type) {
  switch (device_type) {
    case c10::DeviceType::CPU:
      return AutocastSwitch{at::autocast::is_cpu_enabled, at::autocast::set_cpu_enabled,
                            at::autocast::get_autocast_cpu_dtype, at::autocast::set_autocast_cpu_dtype};
    case c10::DeviceType::CUDA:
      return AutocastSwitch{at::autocast::is_enabled, at::autocast::set_enabled, at::autocast::get_autocast_gpu_dtype,
                            at::autocast::set_autocast_gpu_dtype};
    case c10::DeviceType::XPU:
      return AutocastSwitch{at::autocast::is_xpu_enabled, at::autocast::set_xpu_enabled,
                            at::autocast::get_autocast_xpu_dtype, at::autocast::set_autocast_xpu_dtype};
    default:
      return std::nullopt;
  }
}

}  // namespace

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
  if (!AutocastFor(options.device_type).has_value()) {
    return absl::UnimplementedError(
        absl::StrCat("precision '", PrecisionName(precision),
                     "' needs LibTorch's autocast, which LibTorch 1.13 has for cpu, cuda "
                     "and xpu devices but not for ",
                     device, " devices; use 32-true or a *-true precision the accelerator declares"));
  }
  if (options.device_type == c10::DeviceType::CPU && dtype != at::kBFloat16) {
    return absl::UnimplementedError(absl::StrCat("precision '", PrecisionName(precision),
                                                 "' needs float16 autocast on cpu devices, which LibTorch 1.13 does "
                                                 "not have (its CPU autocast runs bfloat16 only); use bf16-mixed"));
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
  const AutocastSwitch autocast = *AutocastFor(device_type_);
  const bool previous_enabled = autocast.is_enabled();
  const at::ScalarType previous_dtype = autocast.get_dtype();
  const bool previous_cache = at::autocast::is_autocast_cache_enabled();
  autocast.set_dtype(autocast_dtype_);
  autocast.set_enabled(true);
  at::autocast::set_autocast_cache_enabled(true);
  at::autocast::increment_nesting();
  return [autocast, previous_enabled, previous_dtype, previous_cache] {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    autocast.set_enabled(previous_enabled);
    autocast.set_dtype(previous_dtype);
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
