// ModelSummaryCallback: prints the model summary (model_summary.h) to standard error when fit starts, on rank zero
// only, like Lightning's ModelSummary callback (which Trainer(enable_model_summary=True) adds).
#ifndef KILN_TRAINER_CALLBACKS_MODEL_SUMMARY_CALLBACK_H_
#define KILN_TRAINER_CALLBACKS_MODEL_SUMMARY_CALLBACK_H_

#include <string>

#include "trainer/core/callback.h"

namespace kiln {

class ModelSummaryCallback final : public Callback {
 public:
  explicit ModelSummaryCallback(int max_depth = 1) : max_depth_(max_depth) {}
  std::string state_key() const override { return "ModelSummary"; }
  void on_fit_start(Trainer& trainer, LightningModule& module) override;

 private:
  const int max_depth_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_CALLBACKS_MODEL_SUMMARY_CALLBACK_H_
