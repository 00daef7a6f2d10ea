// The trainer's precision seam, after Lightning's precision plugins: how the module and the batches are cast, the
// context the steps run in, how the loss is prepared for backward and how an optimizer steps.
//
// The trainer chooses the plugin from the plan's precision (MakePrecisionPlugin below), or takes the instance in
// TrainerOptions::precision_plugin, and calls it in this order:
//   ConvertModule(model)            once per fit/validate/test/predict, before the strategy sets the model up
//                                   (Lightning's order: a strategy that wraps the model sees converted parameters)
//                                   and before configure_optimizers (the optimizers hold the converted tensors)
//   ConvertInput(batch)             every batch, after the strategy has moved it to the device
//   ForwardContext guard(plugin)    around training_step, validation_step, test_step and predict_step (not around
//                                   backward: autocast must not see it)
//   PreBackward(loss)               returns the tensor the strategy runs backward on
//   UnscaleGradients(optimizer)     every optimizer, before gradient clipping and on_before_optimizer_step, so that
//                                   both see true gradients
//   OptimizerStep(optimizer, step)  runs `step` (the strategy's optimizer step) unless the plugin skips it
//   Update()                        once per optimizer step of the loop, after every optimizer has stepped
//   state_dict()/load_state_dict()  the checkpoint record "precision_plugin" (see trainer.h)
//
// The plugins:
//   32-true                  PrecisionPlugin itself: changes nothing (Lightning's `Precision`).
//   64-true, bf16-true,      TruePrecision (true_precision.h): floating parameters, buffers and batch tensors cast
//   16-true                  to float64 / bfloat16 / float16, and that type is LibTorch's default dtype in the steps.
//   bf16-mixed, 16-mixed     MixedPrecision (mixed_precision.h): LibTorch autocast around the steps, float32
//                            parameters; 16-mixed adds a GradScaler (grad_scaler.h).
//
// Errors: set-up (MakePrecisionPlugin, CheckDevice, ConvertModule, load_state_dict) returns absl::Status. The
// per-step methods run inside the trainer's exception boundary and may throw c10::Error (LibTorch's own errors,
// and GradScaler misuse).
//
// Thread-safety: a plugin belongs to the loop's thread. Autocast state is thread-local in LibTorch; LibTorch's
// default dtype is process-wide, so TruePrecision's forward context affects other threads while it is entered.
#ifndef KILN_TRAINER_PLUGINS_PRECISION_PRECISION_PLUGIN_H_
#define KILN_TRAINER_PLUGINS_PRECISION_PRECISION_PLUGIN_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "c10/core/Device.h"
#include "hal/precision.h"
#include "torch/nn/module.h"
#include "torch/optim/optimizer.h"
#include "trainer/core/batch.h"

namespace kiln {

// A plugin's checkpointed state: name -> value (every value exact as a double). Empty when it has none.
using PrecisionState = std::map<std::string, double>;

// The 32-true plugin, and the base of the others: every method is optional and defaults to "change nothing".
class PrecisionPlugin {
 public:
  // Enters the plugin's forward context on construction and leaves it on destruction (also by an exception).
  // Guards nest. Must be destroyed on the thread that created it.
  class ForwardContext {
   public:
    explicit ForwardContext(PrecisionPlugin& plugin) : exit_(plugin.EnterForward()) {}
    ~ForwardContext() {
      if (exit_) exit_();
    }
    ForwardContext(const ForwardContext&) = delete;
    ForwardContext& operator=(const ForwardContext&) = delete;

   private:
    std::function<void()> exit_;
  };

  virtual ~PrecisionPlugin() = default;

  virtual Precision precision() const { return Precision::k32True; }

  // OK when this plugin can run on `device` (the strategy's root device); otherwise an error saying why. Called
  // once before training. Must not throw.
  virtual absl::Status CheckDevice(const c10::Device& device) const { return absl::OkStatus(); }

  // Casts `module`'s floating-point parameters and buffers (never integer ones) in place, keeping their identity,
  // so optimizers built afterwards hold the converted tensors. Errors are LibTorch's, returned; must not throw.
  virtual absl::Status ConvertModule(torch::nn::Module& module) { return absl::OkStatus(); }

  // `batch` with its floating-point tensors cast (integer class targets are never touched).
  virtual Batch ConvertInput(const Batch& batch) const { return batch; }

  // The tensor to run backward on for `loss` (16-mixed: the scaled loss).
  virtual at::Tensor PreBackward(const at::Tensor& loss) { return loss; }

  // Turns `optimizer`'s gradients into true gradients (16-mixed: divides by the scale) and notes inf/NaN.
  virtual void UnscaleGradients(torch::optim::Optimizer& optimizer) {}

  // Runs `step` (which steps `optimizer`) unless this plugin skips the step; returns whether it ran. 16-mixed
  // skips it when a gradient of `optimizer` was inf or NaN.
  virtual bool OptimizerStep(torch::optim::Optimizer& optimizer, const std::function<void()>& step) {
    step();
    return true;
  }

  // Ends an optimizer step of the loop (16-mixed: updates the loss scale).
  virtual void Update() {}
  // A strategy whose ranks hold different parts of the gradients (FSDP) makes the inf/NaN check of a loss scaler count
  // on every rank: `agree` is called on its found_inf flag after unscaling (GradScaler::set_found_inf_reducer). Null
  // clears it. The default: nothing (no scaler).
  virtual void SetOverflowAgreement(std::function<void(at::Tensor&)> agree) {}

  virtual PrecisionState state_dict() const { return {}; }
  // OK when `state` (non-empty, from a checkpoint) can be loaded; otherwise InvalidArgument naming the entry. A
  // plugin without state accepts and ignores any state, as Lightning does when the precision changes on resume.
  virtual absl::Status CheckStateDict(const PrecisionState& state) const { return absl::OkStatus(); }
  // Checks, then loads; on error nothing changes.
  virtual absl::Status load_state_dict(const PrecisionState& state) { return CheckStateDict(state); }

 protected:
  // Enters the forward context and returns what leaves it (null when there is nothing to undo). May throw.
  virtual std::function<void()> EnterForward() { return nullptr; }
};

// The plugin for `precision` on `device`. Unimplemented, naming the precision, the device and the alternative,
// where LibTorch cannot run it there (autocast exists for cpu, cuda and xpu devices only; CPU autocast runs
// bfloat16 only, so 16-mixed on a CPU device is refused).
absl::StatusOr<std::shared_ptr<PrecisionPlugin>> MakePrecisionPlugin(Precision precision, const c10::Device& device);

// The precision value to give the connector: `flag`, or the precision of `given` (TrainerOptions::precision_plugin)
// when there is one. InvalidArgument when both name different precisions (`flag` left at its default "32-true"
// counts as not given).
absl::StatusOr<std::string> PrecisionFlag(absl::string_view flag, const PrecisionPlugin* given);

// The plugin for the plan: `given` when set (it must run the planned precision, i.e. the accelerator did not
// substitute another, and accept `device`), else MakePrecisionPlugin(planned, device).
absl::StatusOr<std::shared_ptr<PrecisionPlugin>> SelectPrecisionPlugin(Precision planned, const c10::Device& device,
                                                                       std::shared_ptr<PrecisionPlugin> given);

}  // namespace kiln

#endif  // KILN_TRAINER_PLUGINS_PRECISION_PRECISION_PLUGIN_H_
