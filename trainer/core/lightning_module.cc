#include "trainer/core/lightning_module.h"

#include "ATen/ATen.h"
#include "c10/util/Exception.h"

namespace kiln {

namespace {

int64_t BatchSize(std::string_view name, const LogOptions& options, int64_t batch_size) {
  if (!options.batch_size.has_value()) return batch_size;
  TORCH_CHECK_VALUE(*options.batch_size >= 1, "log('", name, "', batch_size=", *options.batch_size,
                    "): batch_size is the examples the value stands for, at least 1; leave it unset for the batch's");
  return *options.batch_size;
}

}  // namespace

void LightningModule::log(std::string_view name, const at::Tensor& value, LogOptions options) {
  TORCH_CHECK(sink_ != nullptr, "You are trying to `log('", name,
              "')` outside a step or epoch hook; log from training_step, validation_step or test_step.");
  sink_->Log(name, value, options, BatchSize(name, options, batch_size_));
}

void LightningModule::log(std::string_view name, double value, LogOptions options) {
  TORCH_CHECK(sink_ != nullptr, "You are trying to `log('", name,
              "')` outside a step or epoch hook; log from training_step, validation_step or test_step.");
  sink_->Log(name, value, options, BatchSize(name, options, batch_size_));
}

void LightningModule::log_dict(const std::map<std::string, at::Tensor>& metrics, const LogOptions& options) {
  for (const auto& [name, value] : metrics) log(name, value, options);
}

void LightningModule::log_dict(const std::map<std::string, double>& metrics, const LogOptions& options) {
  for (const auto& [name, value] : metrics) log(name, value, options);
}

at::Tensor LightningModule::predict_forward(const at::Tensor& input) {
  TORCH_CHECK(false, "predict_step is not implemented: override predict_step (or predict_forward) in your module");
}

}  // namespace kiln
