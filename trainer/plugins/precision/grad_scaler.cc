#include "trainer/plugins/precision/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"
#include "c10/core/GradMode.h"

namespace kiln {
namespace {

// PyTorch's GradScaler calls these two ATen ops; LibTorch has kernels for them on the CPU and CUDA, and a device
// with a CPU fallback (the virtual NPU) runs them through it. A device with neither fails in LibTorch, naming the op.
//
// at::_amp_foreach_non_finite_check_and_unscale_: for every element x of every tensor, found_inf = 1 when x is inf or
// NaN, and x *= inv_scale. `found_inf` and `inv_scale` are float32 [1] on the tensors' device.
void NonFiniteCheckAndUnscale(std::vector<at::Tensor>& tensors, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  if (tensors.empty()) return;
  at::_amp_foreach_non_finite_check_and_unscale_(tensors, found_inf, inv_scale);
}

// at::_amp_update_scale_: backs the scale off on found_inf, else counts a clean step and grows the scale every
// growth_interval of them (on the scale's device: no host round trip).
void UpdateScale(at::Tensor& scale, at::Tensor& growth_tracker, const at::Tensor& found_inf, double growth_factor,
                 double backoff_factor, int64_t growth_interval) {
  at::_amp_update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval);
}

absl::Status CheckOptions(const GradScalerOptions& options) {
  if (!(std::isfinite(options.init_scale) && options.init_scale > 0 &&
        options.init_scale <= std::numeric_limits<float>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("GradScaler init_scale=", options.init_scale,
                                                   " is not valid; pass a finite float32 value > 0 (default 65536)"));
  }
  if (!(options.growth_factor > 1.0) || !std::isfinite(options.growth_factor)) {
    return absl::InvalidArgumentError(absl::StrCat("GradScaler growth_factor=", options.growth_factor,
                                                   " is not valid; the growth factor must be > 1.0 (default 2)"));
  }
  if (!(options.backoff_factor > 0.0 && options.backoff_factor < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GradScaler backoff_factor=", options.backoff_factor,
                     " is not valid; the backoff factor must be in (0, 1) (default 0.5)"));
  }
  if (options.growth_interval < 1 || options.growth_interval > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("GradScaler growth_interval=", options.growth_interval,
                                                   " is not valid; pass a number of steps >= 1 (default 2000)"));
  }
  return absl::OkStatus();
}

constexpr const char* kStateKeys[] = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"};

bool IsWhole(double value) { return std::isfinite(value) && value == std::floor(value); }

}  // namespace

absl::StatusOr<GradScaler> GradScaler::Create(GradScalerOptions options) {
  if (absl::Status status = CheckOptions(options); !status.ok()) return status;
  return GradScaler(options);
}

at::Tensor GradScaler::scale(const at::Tensor& outputs) {
  if (!scale_.defined()) {
    const at::TensorOptions on_device = at::TensorOptions().device(outputs.device());
    scale_ = at::full({1}, options_.init_scale, on_device.dtype(at::kFloat));
    growth_tracker_ = at::full({1}, init_growth_tracker_, on_device.dtype(at::kInt));
  }
  return outputs * scale_.to(outputs.device()).reshape({});
}

void GradScaler::UnscaleGrads(torch::optim::Optimizer& optimizer, OptimizerState& state) {
  TORCH_CHECK(scale_.defined(),
              "Attempted unscale_ but _scale is None.  This may indicate your script did not use "
              "scaler.scale(loss or outputs) earlier in the iteration.");
  c10::NoGradGuard no_grad;
  // 1 / scale in double, rounded once to float32, as PyTorch computes it.
  const at::Tensor inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  // One fused call per (device, dtype), one found_inf per device, as in PyTorch.
  struct Group {
    c10::Device device;
    at::ScalarType dtype;
    std::vector<at::Tensor> tensors;
  };
  std::vector<Group> groups;
  for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) {
    for (const at::Tensor& parameter : group.params()) {
      const at::Tensor& grad = parameter.grad();
      if (!grad.defined()) continue;
      TORCH_CHECK(grad.scalar_type() != at::kHalf, "Attempting to unscale FP16 gradients.");
      const at::Tensor target = grad.is_sparse() ? grad._values() : grad;
      auto found = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
        return g.device == target.device() && g.dtype == target.scalar_type();
      });
      if (found == groups.end()) {
        groups.push_back({target.device(), target.scalar_type(), {}});
        found = groups.end() - 1;
      }
      found->tensors.push_back(target);
    }
  }
  state.found_inf_per_device.clear();
  for (Group& group : groups) {
    auto found_inf = std::find_if(state.found_inf_per_device.begin(), state.found_inf_per_device.end(),
                                  [&](const auto& entry) { return entry.first == group.device; });
    if (found_inf == state.found_inf_per_device.end()) {
      state.found_inf_per_device.emplace_back(
          group.device, at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(group.device)));
      found_inf = state.found_inf_per_device.end() - 1;
    }
    NonFiniteCheckAndUnscale(group.tensors, found_inf->second, inv_scale.to(group.device));
  }
  if (found_inf_reducer_) {
    // Every rank takes part, also one whose part of the gradients is empty.
    if (state.found_inf_per_device.empty()) {
      state.found_inf_per_device.emplace_back(scale_.device(),
                                              at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(scale_.device())));
    }
    for (auto& [device, found_inf] : state.found_inf_per_device) found_inf_reducer_(found_inf);
  }
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  OptimizerState& state = per_optimizer_[&optimizer];
  TORCH_CHECK(state.stage != Stage::kUnscaled,
              "unscale_() has already been called on this optimizer since the last update().");
  TORCH_CHECK(state.stage != Stage::kStepped, "unscale_() is being called after step().");
  UnscaleGrads(optimizer, state);
  state.stage = Stage::kUnscaled;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer, const std::function<void()>& optimizer_step) {
  OptimizerState& state = per_optimizer_[&optimizer];
  TORCH_CHECK(state.stage != Stage::kStepped, "step() has already been called since the last update().");
  if (state.stage == Stage::kReady) {
    UnscaleGrads(optimizer, state);
    state.stage = Stage::kUnscaled;
  }
  TORCH_CHECK(!state.found_inf_per_device.empty(), "No inf checks were recorded for this optimizer.");
  double found_inf = 0;
  for (const auto& [device, flag] : state.found_inf_per_device) found_inf += flag.item<double>();
  state.stage = Stage::kStepped;
  if (found_inf != 0) return false;
  if (optimizer_step) {
    optimizer_step();
  } else {
    optimizer.step();
  }
  return true;
}

void GradScaler::update() {
  std::vector<at::Tensor> found_infs;
  for (const auto& [optimizer, state] : per_optimizer_) {
    for (const auto& [device, flag] : state.found_inf_per_device) found_infs.push_back(flag);
  }
  TORCH_CHECK(!found_infs.empty(), "No inf checks were recorded prior to update.");
  TORCH_CHECK(scale_.defined(), "Attempted update but _scale is None.");
  c10::NoGradGuard no_grad;
  at::Tensor found_inf_combined = found_infs.front().to(scale_.device());
  for (size_t i = 1; i < found_infs.size(); ++i)
    found_inf_combined = found_inf_combined + found_infs[i].to(scale_.device());
  UpdateScale(scale_, growth_tracker_, found_inf_combined, options_.growth_factor, options_.backoff_factor,
              options_.growth_interval);
  per_optimizer_.clear();
}

double GradScaler::get_scale() const { return scale_.defined() ? scale_.item<double>() : options_.init_scale; }

int64_t GradScaler::growth_tracker() const {
  return growth_tracker_.defined() ? growth_tracker_.item<int64_t>() : static_cast<int64_t>(init_growth_tracker_);
}

GradScalerState GradScaler::state_dict() const {
  return {{"scale", get_scale()},
          {"growth_factor", options_.growth_factor},
          {"backoff_factor", options_.backoff_factor},
          {"growth_interval", static_cast<double>(options_.growth_interval)},
          {"_growth_tracker", static_cast<double>(growth_tracker())}};
}

absl::Status GradScaler::CheckStateDict(const GradScalerState& state) {
  for (const char* key : kStateKeys) {
    if (state.count(key) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("the gradient scaler's state has no '", key,
                                                     "'; it needs scale, growth_factor, backoff_factor, "
                                                     "growth_interval and _growth_tracker"));
    }
  }
  const double interval = state.at("growth_interval");
  if (!IsWhole(interval)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the gradient scaler's growth_interval ", interval, " is not a whole number of steps"));
  }
  GradScalerOptions options{.init_scale = state.at("scale"),
                            .growth_factor = state.at("growth_factor"),
                            .backoff_factor = state.at("backoff_factor"),
                            .growth_interval = static_cast<int64_t>(interval)};
  if (absl::Status status = CheckOptions(options); !status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the gradient scaler's saved state is not valid: ", status.message()));
  }
  const double tracker = state.at("_growth_tracker");
  if (!IsWhole(tracker) || tracker < 0 || tracker >= interval) {
    return absl::InvalidArgumentError(absl::StrCat("the gradient scaler's _growth_tracker ", tracker,
                                                   " is not valid; it counts steps in [0, growth_interval=", interval,
                                                   ")"));
  }
  return absl::OkStatus();
}

absl::Status GradScaler::load_state_dict(const GradScalerState& state) {
  if (absl::Status status = CheckStateDict(state); !status.ok()) return status;
  options_.init_scale = state.at("scale");
  options_.growth_factor = state.at("growth_factor");
  options_.backoff_factor = state.at("backoff_factor");
  options_.growth_interval = static_cast<int64_t>(state.at("growth_interval"));
  init_growth_tracker_ = state.at("_growth_tracker");
  if (scale_.defined()) scale_.fill_(options_.init_scale);
  if (growth_tracker_.defined()) growth_tracker_.fill_(static_cast<int64_t>(init_growth_tracker_));
  return absl::OkStatus();
}

}  // namespace kiln
