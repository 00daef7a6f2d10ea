#include "trainer/plugins/precision/true_precision.h"

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"
#include "c10/core/DefaultDtype.h"
#include "c10/core/GradMode.h"

namespace kiln {
namespace {

at::ScalarType DtypeOf(Precision precision) {
  switch (precision) {
    case Precision::k64True:
      return at::kDouble;
    case Precision::kBf16True:
      return at::kBFloat16;
    case Precision::k16True:
      return at::kHalf;
    default:
      break;
  }
  TORCH_CHECK(false, "TruePrecision runs 64-true, bf16-true or 16-true, not ", PrecisionName(precision));
}

at::Tensor CastFloating(const at::Tensor& tensor, at::ScalarType dtype) {
  return tensor.defined() && tensor.is_floating_point() ? tensor.to(dtype) : tensor;
}

}  // namespace

TruePrecision::TruePrecision(Precision precision) : precision_(precision), dtype_(DtypeOf(precision)) {}

absl::Status TruePrecision::ConvertModule(torch::nn::Module& module) {
  try {
    c10::NoGradGuard no_grad;
    // set_data keeps each tensor's identity (and requires_grad), as torch::nn::Module::to does; Module::to itself
    // would also cast integer buffers. An existing gradient is cast too, as torch.nn.Module.double() casts it.
    for (at::Tensor& parameter : module.parameters(/*recurse=*/true)) {
      if (!parameter.is_floating_point()) continue;
      parameter.set_data(parameter.to(dtype_));
      if (parameter.grad().defined()) parameter.mutable_grad() = parameter.grad().to(dtype_);
    }
    for (at::Tensor& buffer : module.buffers(/*recurse=*/true)) {
      if (buffer.is_floating_point()) buffer.set_data(buffer.to(dtype_));
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("converting the model to ", PrecisionName(precision_), " (",
                                            c10::toString(dtype_), ") failed: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

Batch TruePrecision::ConvertInput(const Batch& batch) const {
  if (!batch.structured()) return {CastFloating(batch.input, dtype_), CastFloating(batch.target, dtype_)};
  return MapTensors(batch, [&](const at::Tensor& tensor) { return CastFloating(tensor, dtype_); });
}

std::function<void()> TruePrecision::EnterForward() {
  const caffe2::TypeMeta previous = c10::get_default_dtype();
  c10::set_default_dtype(caffe2::TypeMeta::fromScalarType(dtype_));
  return [previous] { c10::set_default_dtype(previous); };
}

}  // namespace kiln
