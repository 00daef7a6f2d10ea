// Built-in models for `//trainer:fit`: a multi-layer perceptron classifier, as a LightningModule.
#ifndef KILN_TRAINER_CLASSIFIER_H_
#define KILN_TRAINER_CLASSIFIER_H_

#include <cstdint>
#include <vector>

#include "torch/nn/modules/container/sequential.h"
#include "trainer/core/lightning_module.h"

namespace kiln {

struct MlpOptions {
  int64_t input_size = 16;
  std::vector<int64_t> hidden_sizes = {64, 64};
  int64_t num_classes = 4;
  double learning_rate = 1e-3;  // Adam.
};

// Linear -> ReLU -> ... -> Linear (the layers of trainer/models/mlp.h), trained with cross-entropy; logs train_loss and train_acc per step (train_loss
// in the progress bar), val_loss and val_acc per epoch.
class MlpClassifier final : public LightningModule {
 public:
  explicit MlpClassifier(const MlpOptions& options);

  at::Tensor forward(const at::Tensor& input);
  at::Tensor training_step(const Batch& batch, int64_t batch_idx) override;
  void validation_step(const Batch& batch, int64_t batch_idx) override;
  void test_step(const Batch& batch, int64_t batch_idx) override;
  OptimizerConfig configure_optimizers() override;

 protected:
  at::Tensor predict_forward(const at::Tensor& input) override { return forward(input); }

 private:
  MlpOptions options_;
  torch::nn::Sequential net_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_CLASSIFIER_H_
