// TruePrecision: 64-true, bf16-true and 16-true (Lightning's DoublePrecision and HalfPrecision).
//
// The whole computation runs in one floating type: ConvertModule casts the floating-point parameters and buffers
// (integer buffers stay as they are, as torch.nn.Module.double() leaves them), ConvertInput casts the batch's
// floating-point tensors, and inside the forward context that type is LibTorch's default dtype, so tensors a step
// creates without a dtype match the model. Optimizer state follows the parameters' type.
//
// Whether a device can compute in the type is the accelerator's to declare: on CPU, LibTorch 1.13 has bfloat16
// matrix kernels but no float16 ones ("addmm_impl_cpu_" not implemented for 'Half'), which is why the cpu
// accelerator declares bf16-true and not 16-true.
//
// Thread-safety: see precision_plugin.h (the default dtype is process-wide).
#ifndef KILN_TRAINER_PLUGINS_PRECISION_TRUE_PRECISION_H_
#define KILN_TRAINER_PLUGINS_PRECISION_TRUE_PRECISION_H_

#include <functional>

#include "c10/core/ScalarType.h"
#include "trainer/plugins/precision/precision_plugin.h"

namespace kiln {

class TruePrecision final : public PrecisionPlugin {
 public:
  // `precision` must be k64True, kBf16True or k16True (checked: anything else throws c10::Error).
  explicit TruePrecision(Precision precision);

  Precision precision() const override { return precision_; }
  // float64, bfloat16 or float16.
  at::ScalarType dtype() const { return dtype_; }

  absl::Status ConvertModule(torch::nn::Module& module) override;
  Batch ConvertInput(const Batch& batch) const override;

 protected:
  std::function<void()> EnterForward() override;

 private:
  Precision precision_;
  at::ScalarType dtype_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_PLUGINS_PRECISION_TRUE_PRECISION_H_
