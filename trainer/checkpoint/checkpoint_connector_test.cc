// The snapshot a checkpoint is written from (SnapshotTrainingState) and the writer that serialises it off the
// training thread (CheckpointWriter::SubmitSnapshot): the file holds the step's state, byte for byte, however the
// loop goes on changing the model and optimizer in place.
#include "trainer/checkpoint/checkpoint_connector.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "gtest/gtest.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/sgd.h"
#include "torch/utils.h"
#include "trainer/checkpoint/checkpoint_io.h"

namespace kiln {
namespace {

class Module final : public LightningModule {
 public:
  Module() : linear_(register_module("linear", torch::nn::Linear(4, 3))) {}
  at::Tensor training_step(const Batch& batch, int64_t) override { return linear_->forward(batch.input).sum(); }
  OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  }
  torch::nn::Linear linear_;
};

class SnapshotTest : public ::testing::Test {
 protected:
  SnapshotTest() {
    torch::manual_seed(0);
    optimizers_ = module_.configure_optimizers();
    precision_ = *MakePrecisionPlugin(Precision::k32True, c10::Device(c10::kCPU));
    Step();  // The momentum buffers exist from here on.
  }
  // One optimizer step: the parameters and momentum buffers change in place, as in the training loop.
  void Step() {
    optimizers_.optimizers[0]->zero_grad();
    module_.training_step(Batch{at::randn({2, 4}), at::Tensor()}, 0).backward();
    optimizers_.optimizers[0]->step();
  }
  TrainingState State() { return TrainingState{module_, optimizers_, scheduler_steps_, callbacks_, *precision_}; }

  Module module_;
  OptimizerConfig optimizers_;
  std::vector<int64_t> scheduler_steps_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  std::shared_ptr<PrecisionPlugin> precision_;
  const LoopProgress progress_{.epoch = 0, .batch_in_epoch = 1, .global_step = 1};
};

std::string ReadAll(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), {});
}

TEST_F(SnapshotTest, HoldsTheStepsStateWhileTheLoopGoesOn) {
  absl::StatusOr<std::string> at_step = DumpTrainingState("x.ckpt", State(), progress_);
  ASSERT_TRUE(at_step.ok()) << at_step.status();
  absl::StatusOr<c10::impl::GenericDict> snapshot = SnapshotTrainingState("x.ckpt", State(), progress_);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  Step();  // Changes every parameter and momentum buffer in place.
  absl::StatusOr<std::string> later = DumpTrainingState("x.ckpt", State(), progress_);
  ASSERT_TRUE(later.ok());
  ASSERT_NE(*later, *at_step);  // Else the test would not see an aliased tensor.
  absl::StatusOr<std::string> from_snapshot = SerializeCheckpoint("x.ckpt", *snapshot);
  ASSERT_TRUE(from_snapshot.ok()) << from_snapshot.status();
  EXPECT_EQ(*from_snapshot, *at_step);
}

TEST_F(SnapshotTest, WriterWritesTheBytesTheTrainingThreadWouldHave) {
  const std::string dir = ::testing::TempDir() + "/snapshot_writer";
  std::filesystem::remove_all(dir);
  const std::string path = dir + "/step=1.ckpt";
  absl::StatusOr<std::string> at_step = DumpTrainingState(path, State(), progress_);
  ASSERT_TRUE(at_step.ok()) << at_step.status();
  CheckpointWriter writer;
  absl::StatusOr<c10::impl::GenericDict> snapshot = SnapshotTrainingState(path, State(), progress_);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  ASSERT_TRUE(writer.SubmitSnapshot(path, *std::move(snapshot)).ok());
  for (int i = 0; i < 3; ++i) Step();  // While the writer may still be serialising.
  ASSERT_TRUE(writer.Flush().ok());
  EXPECT_EQ(ReadAll(path), *at_step);
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->format_version, kCheckpointFormatVersion);
}

TEST(CheckpointWriterTest, SerialisationErrorOfASnapshotIsReturned) {
  const std::string path = ::testing::TempDir() + "/bad_snapshot.ckpt";
  CheckpointWriter writer;
  c10::impl::GenericDict contents(c10::StringType::get(), c10::AnyType::get());
  contents.insert(std::string(kKilnSectionKey), int64_t{1});  // Not a dictionary: SerializeCheckpoint refuses it.
  ASSERT_TRUE(writer.SubmitSnapshot(path, contents).ok());
  const absl::Status flushed = writer.Flush();
  EXPECT_EQ(flushed.code(), absl::StatusCode::kInternal) << flushed;
  EXPECT_NE(flushed.message().find(path), std::string::npos) << flushed;
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(writer.Submit(path, "bytes").code(), absl::StatusCode::kInternal);  // Kept, as for a failed write.
}

}  // namespace
}  // namespace kiln
