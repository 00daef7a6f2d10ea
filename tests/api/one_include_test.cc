// trainer/kiln.h alone names what a training program uses: the test includes nothing else of Kiln's.
#include "gtest/gtest.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/sgd.h"
#include "trainer/kiln.h"

namespace {

class Model : public kiln::LightningModule {
 public:
  Model() { net_ = register_module("net", torch::nn::Linear(4, 2)); }
  at::Tensor training_step(const kiln::Batch& batch, int64_t) override {
    return torch::nn::functional::cross_entropy(net_->forward(batch.input), batch.target);
  }
  kiln::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
  }
  torch::nn::Linear net_{nullptr};
};

class Data : public kiln::DataModule {
 public:
  std::shared_ptr<kiln::DataLoader> train_dataloader() override {
    const at::Tensor inputs = torch::ones({8, 4});
    return std::make_shared<kiln::TensorDataLoader>(inputs, torch::zeros({8}, at::kLong),
                                                    kiln::TensorDataLoaderOptions{.batch_size = 4});
  }
};

TEST(OneIncludeTest, TrainsWithCallbacksAndLoggersFromOneHeader) {
  Model model;
  Data data;
  kiln::Trainer trainer({.accelerator = "cpu",
                         .max_epochs = 2,
                         .default_root_dir = ::testing::TempDir() + "/one_include",
                         .callbacks = {std::make_shared<kiln::Timer>(), std::make_shared<kiln::LearningRateMonitor>()},
                         .enable_progress_bar = false});
  ASSERT_TRUE(trainer.fit(model, data).ok());
  EXPECT_EQ(trainer.global_step(), 4);
}

}  // namespace
