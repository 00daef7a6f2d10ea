// GradScaler: PyTorch's torch.cuda.amp.GradScaler for LibTorch, which has the ATen ops but no C++ class.
//
// 16-mixed computes the forward pass in float16, whose smallest normal number is about 6e-5: small gradients
// underflow to zero. The scaler multiplies the loss by a large factor S before backward, so every gradient is S
// times larger, then divides the gradients by S before the optimizer sees them. When a gradient is inf or NaN (S
// was too large), the optimizer step is skipped and S shrinks; after `growth_interval` clean steps in a row S grows.
// The sequence per iteration, exactly as in PyTorch:
//
//   scaler.scale(loss).backward();
//   scaler.unscale_(optimizer);   // optional: only needed to look at (clip) true gradients before the step
//   clip_grad_norm_(...);
//   scaler.step(optimizer);       // unscales if unscale_ was not called; skips the step on inf/NaN gradients
//   scaler.update();              // backs S off (inf/NaN seen) or counts a clean step and grows S on schedule
//
// Kernels: LibTorch's own `_amp_foreach_non_finite_check_and_unscale_` and `_amp_update_scale_` (CPU and CUDA
// kernels; a device with a CPU fallback runs them through it), as PyTorch's scaler calls them.
//
// Misuse (unscale_ twice before update, step twice, update without an inf check, float16 gradients given to
// unscale_) throws c10::Error with PyTorch's message, as PyTorch raises RuntimeError; the trainer turns that into
// a Status. Options and saved state, which come from users and files, are checked and reported as absl::Status.
//
// Thread-safety: none; a scaler belongs to the training loop's thread. It keeps a per-optimizer state keyed by the
// optimizer's address, so an optimizer must outlive the iteration it is used in (update() forgets them all).
#ifndef KILN_TRAINER_PLUGINS_PRECISION_GRAD_SCALER_H_
#define KILN_TRAINER_PLUGINS_PRECISION_GRAD_SCALER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "c10/core/Device.h"
#include "torch/optim/optimizer.h"

namespace kiln {

// PyTorch's defaults.
struct GradScalerOptions {
  double init_scale = 65536.0;     // 2^16.
  double growth_factor = 2.0;      // > 1.
  double backoff_factor = 0.5;     // In (0, 1).
  int64_t growth_interval = 2000;  // Clean steps in a row before the scale grows; >= 1.
};

// The scaler's state, with PyTorch's keys: "scale", "growth_factor", "backoff_factor", "growth_interval",
// "_growth_tracker" (clean steps since the scale last changed). Every value is exact as a double: the scale is a
// float32, the others are the options and a count.
using GradScalerState = std::map<std::string, double>;

class GradScaler final {
 public:
  // InvalidArgument, naming the option, unless init_scale is finite and > 0, growth_factor > 1, backoff_factor is
  // in (0, 1) and growth_interval >= 1.
  static absl::StatusOr<GradScaler> Create(GradScalerOptions options = {});

  // `outputs` (the loss) multiplied by the current scale. The first call creates the scale (init_scale, float32)
  // and the growth tracker (0, int32) on `outputs`' device, as PyTorch does lazily. The result has `outputs`'
  // shape and at least float32 precision.
  at::Tensor scale(const at::Tensor& outputs);

  // Divides `optimizer`'s gradients by the scale, in place, and records per device whether any was inf or NaN.
  // Throws c10::Error when called again before update(), after step(), before any scale(), or for float16
  // gradients (scaled gradients must be float32 or wider: the parameters stay float32 under autocast).
  void unscale_(torch::optim::Optimizer& optimizer);

  // Unscales (unless unscale_ already did) and runs `optimizer_step` (default: optimizer.step()) when every
  // gradient was finite. Returns whether the step ran. Throws c10::Error when called twice before update().
  bool step(torch::optim::Optimizer& optimizer, const std::function<void()>& optimizer_step = nullptr);

  // Ends the iteration: if any optimizer saw inf/NaN since the last update, scale *= backoff_factor and the
  // tracker restarts at 0; otherwise the tracker counts the clean step, and on reaching growth_interval the scale
  // *= growth_factor (unless that overflows float32) and the tracker restarts. Throws c10::Error when no optimizer
  // was unscaled since the last update ("No inf checks were recorded prior to update.").
  void update();

  // Called on each found_inf flag (float32 [1], on its device; non-zero when an inf/NaN was seen) after unscaling,
  // before step() decides: a strategy whose ranks hold different parts of the gradients (FSDP's shards) makes every
  // rank's flag count on all of them, as PyTorch's ShardedGradScaler all-reduces it. Null: none (the default).
  void set_found_inf_reducer(std::function<void(at::Tensor&)> reducer) { found_inf_reducer_ = std::move(reducer); }

  // The current scale and growth tracker (init_scale and 0 before the first scale()). Reading them waits for the
  // device.
  double get_scale() const;
  int64_t growth_tracker() const;
  const GradScalerOptions& options() const { return options_; }

  GradScalerState state_dict() const;
  // OK when `state` has every key of GradScalerState with values Create would accept (a scale that is finite and
  // > 0, a tracker in [0, growth_interval)); otherwise InvalidArgument naming the key.
  static absl::Status CheckStateDict(const GradScalerState& state);
  // Replaces the scale, the tracker and the options with `state`'s (as PyTorch's load_state_dict does). Checks
  // first; on error nothing changes.
  absl::Status load_state_dict(const GradScalerState& state);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct OptimizerState {
    Stage stage = Stage::kReady;
    std::vector<std::pair<c10::Device, at::Tensor>> found_inf_per_device;  // float32 [1]: 1 when inf/NaN was seen.
  };

  explicit GradScaler(GradScalerOptions options) : options_(options) {}
  void UnscaleGrads(torch::optim::Optimizer& optimizer, OptimizerState& state);

  GradScalerOptions options_;
  double init_growth_tracker_ = 0;  // The tracker's value when it is created lazily (a loaded state may set it).
  at::Tensor scale_;                // float32 [1], undefined until the first scale().
  at::Tensor growth_tracker_;       // int32 [1], on scale_'s device.
  std::unordered_map<const torch::optim::Optimizer*, OptimizerState> per_optimizer_;
  std::function<void(at::Tensor&)> found_inf_reducer_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_PLUGINS_PRECISION_GRAD_SCALER_H_
