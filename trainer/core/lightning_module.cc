#include "trainer/core/lightning_module.h"

#include "ATen/ATen.h"
#include "c10/util/Exception.h"

namespace kiln {

void LightningModule::log(std::string_view name, const at::Tensor& value, LogOptions options) {
  TORCH_CHECK(sink_ != nullptr, "You are trying to `log('", name,
              "')` outside a step or epoch hook; log from training_step, validation_step or test_step.");
  sink_->Log(name, value, options, batch_size_);
}

void LightningModule::log(std::string_view name, double value, LogOptions options) {
  TORCH_CHECK(sink_ != nullptr, "You are trying to `log('", name,
              "')` outside a step or epoch hook; log from training_step, validation_step or test_step.");
  sink_->Log(name, value, options, batch_size_);
}

at::Tensor LightningModule::predict_forward(const at::Tensor& input) {
  TORCH_CHECK(false, "predict_step is not implemented: override predict_step (or predict_forward) in your module");
}

}  // namespace kiln
