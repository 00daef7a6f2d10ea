// Streams of unknown length as training data (issue #35, item 3; DataLoader::kUnknownLength): the same batches as a
// loader of known length train to the same parameters, the last partial accumulation window is stepped, a stream
// resumes mid-epoch exactly from its state in the checkpoint, and what cannot work is refused with the fix.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/sgd.h"
#include "trainer/testing/test_support.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

using ::kiln::testing::Quiet;
using ::kiln::testing::SaveCheckpointAt;
using ::kiln::testing::TempDir;
using ::testing::HasSubstr;

at::Tensor Inputs() { return at::randn({80, 4}, at::detail::createCPUGenerator(5), at::kFloat); }
at::Tensor Targets() { return at::randint(0, 3, {80}, at::detail::createCPUGenerator(6), at::kLong); }

// The rows in order, `batch_size` at a time, as a stream: it does not say how long it is. Its position is its
// state, unless `stateless`.
class RowStream final : public DataLoader {
 public:
  RowStream(int64_t batch_size, bool stateless = false) : batch_size_(batch_size), stateless_(stateless) {}
  int64_t num_batches() const override { return kUnknownLength; }
  void set_epoch(int64_t epoch) override { position_ = 0; }
  std::optional<Batch> next_batch() override {
    if (position_ >= inputs_.size(0)) return std::nullopt;
    const int64_t end = std::min(position_ + batch_size_, inputs_.size(0));
    Batch batch{inputs_.slice(0, position_, end), targets_.slice(0, position_, end)};
    position_ = end;
    return batch;
  }
  c10::IValue state_dict() const override { return stateless_ ? c10::IValue() : c10::IValue(position_); }
  absl::Status load_state_dict(const c10::IValue& state) override {
    if (!state.isInt()) return absl::InvalidArgumentError("a RowStream's state is its position");
    position_ = state.toInt();
    return absl::OkStatus();
  }

 private:
  at::Tensor inputs_ = Inputs();
  at::Tensor targets_ = Targets();
  int64_t batch_size_;
  bool stateless_;
  int64_t position_ = 0;
};

class Data final : public DataModule {
 public:
  explicit Data(bool stream, bool stateless = false) : stream_(stream), stateless_(stateless) {}
  std::shared_ptr<DataLoader> train_dataloader() override {
    if (stream_) return std::make_shared<RowStream>(8, stateless_);
    return std::make_shared<TensorDataLoader>(Inputs(), Targets(), TensorDataLoaderOptions{.batch_size = 8});
  }
  std::shared_ptr<DataLoader> val_dataloader() override {
    return std::make_shared<TensorDataLoader>(Inputs().slice(0, 0, 16), Targets().slice(0, 0, 16),
                                              TensorDataLoaderOptions{.batch_size = 8});
  }

 private:
  bool stream_;
  bool stateless_;
};

class Net final : public LightningModule {
 public:
  Net() {
    torch::manual_seed(3);
    layer_ = register_module("layer", torch::nn::Linear(4, 3));
  }
  at::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    ++steps;
    return torch::nn::functional::cross_entropy(layer_->forward(batch.input), batch.target);
  }
  void validation_step(const Batch& batch, int64_t batch_idx) override {
    log("val_loss", torch::nn::functional::cross_entropy(layer_->forward(batch.input), batch.target));
  }
  OptimizerConfig configure_optimizers() override {
    seen_estimate = estimated_stepping_batches();
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  }
  at::Tensor Flat() { return at::cat({layer_->weight.detach().flatten(), layer_->bias.detach()}); }
  int64_t steps = 0;
  int64_t seen_estimate = 0;

 private:
  torch::nn::Linear layer_{nullptr};
};

TrainerOptions Options(TrainerOptions options) {
  options.enable_checkpointing = false;
  options.logger = false;
  options.enable_model_summary = false;
  return Quiet(options);
}

TEST(StreamTest, AStreamTrainsAsTheSameBatchesOfKnownLengthDo) {
  // 10 batches an epoch, accumulated 3 at a time: the stream's last window (batch 9 alone) is stepped when the
  // stream ends, as the known-length loader's is at its last batch.
  Net known;
  Data indexed(false);
  Trainer first(Options({.max_epochs = 2, .accumulate_grad_batches = 3}));
  ASSERT_TRUE(first.fit(known, indexed).ok());
  Net streamed;
  Data stream(true);
  Trainer second(Options({.max_epochs = 2, .accumulate_grad_batches = 3}));
  absl::Status status = second.fit(streamed, stream);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(streamed.steps, 20);
  EXPECT_EQ(second.global_step(), first.global_step());
  EXPECT_EQ(second.global_step(), 8) << "4 steps an epoch, the last of one batch";
  EXPECT_TRUE(streamed.Flat().equal(known.Flat()));
  EXPECT_EQ(second.callback_metrics().at("val_loss"), first.callback_metrics().at("val_loss"));
  EXPECT_EQ(streamed.seen_estimate, -1) << "no max_steps: the run's length is not known";
}

TEST(StreamTest, ABatchLimitCountsAndAFractionIsRefused) {
  Net limited;
  Data stream(true);
  Trainer trainer(Options({.max_epochs = 2, .limit_train_batches = 3}));
  ASSERT_TRUE(trainer.fit(limited, stream).ok());
  EXPECT_EQ(limited.steps, 6);
  EXPECT_EQ(limited.seen_estimate, 6);

  Net fraction;
  absl::Status status = Trainer(Options({.max_epochs = 1, .limit_train_batches = 0.5})).fit(fraction, stream);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("`limit_train_batches` is 0.5, a fraction of an epoch, but the training "
                                          "loader is a stream of unknown length"));
  status = Trainer(Options({.max_epochs = 1, .val_check_interval = 0.25})).fit(fraction, stream);
  EXPECT_THAT(status.message(), HasSubstr("`val_check_interval` is 0.25"));
}

TEST(StreamTest, AStreamResumesMidEpochFromItsPositionInTheCheckpoint) {
  const std::string path = TempDir() + "/stream.ckpt";
  Net straight;
  Data stream(true);
  auto save = std::make_shared<SaveCheckpointAt>(1, 4, path);
  Trainer first(Options({.max_epochs = 3, .callbacks = {save}}));
  ASSERT_TRUE(first.fit(straight, stream).ok());
  ASSERT_TRUE(save->saved.ok()) << save->saved;
  Net resumed;
  Trainer second(Options({.max_epochs = 3}));
  absl::Status status = second.fit(resumed, stream, path);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(resumed.steps, 5 + 10) << "batches 5-9 of epoch 1, then epoch 2";
  EXPECT_TRUE(resumed.Flat().equal(straight.Flat()));
  EXPECT_EQ(second.global_step(), first.global_step());

  Net stateless_run;
  Data stateless(true, /*stateless=*/true);
  auto stateless_save = std::make_shared<SaveCheckpointAt>(1, 4, path + ".2");
  ASSERT_TRUE(Trainer(Options({.max_epochs = 2, .callbacks = {stateless_save}})).fit(stateless_run, stateless).ok());
  ASSERT_TRUE(stateless_save->saved.ok());
  Net refused;
  status = Trainer(Options({.max_epochs = 2})).fit(refused, stateless, path + ".2");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("the training loader is a stream that keeps no position"));
}

}  // namespace
}  // namespace kiln
