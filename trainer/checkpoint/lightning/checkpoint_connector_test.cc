// The snapshot a checkpoint is written from (TakeCheckpointSnapshot, SnapshotTrainingState) and the writer that builds
// and serialises it off the training thread (CheckpointWriter::SubmitSnapshot): the file holds the step's state, byte
// for byte, however the loop goes on changing the model, optimizer and callbacks in place.
#include "trainer/checkpoint/lightning/checkpoint_connector.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ATen/ATen.h"
#include "gtest/gtest.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/sgd.h"
#include "torch/utils.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/checkpoint/format/pickle_writer.h"
#include "trainer/checkpoint/format/snapshot_dict.h"
#include "trainer/checkpoint/format/torch_file.h"
#include "trainer/core/metric_scheduler.h"

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

// A callback whose state the test changes, as a ModelCheckpoint's changes when it saves; it counts its state_dict()
// calls and the threads they came from.
class CountingCallback final : public Callback {
 public:
  std::string state_key() const override { return "ModelCheckpoint{'monitor': 'loss', 'train_time_interval': None}"; }
  CallbackState state_dict() const override {
    ++calls;
    thread = std::this_thread::get_id();
    return state;
  }
  CallbackState state{{"best_model_score", "0.5"}, {"best_k_models", "/a.ckpt\t0.5\n"}, {"last_saved_step", "1"}};
  mutable int calls = 0;
  mutable std::thread::id thread;
};

// Data whose state holds typed containers (a List<int64_t>, a Dict<string, double>) and a tensor.
class TypedData final : public DataModule {
 public:
  std::shared_ptr<DataLoader> train_dataloader() override { return nullptr; }
  std::string state_key() const override { return "TabularData"; }
  c10::IValue state_dict() const override {
    c10::Dict<std::string, double> means;
    means.insert("x", 1.5);
    c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
    state.insert(std::string("classes"), c10::List<int64_t>({0, 1, 2}));
    state.insert(std::string("means"), means);
    state.insert(std::string("scale"), scale);
    return state;
  }
  at::Tensor scale = at::ones({3});
};

// A plateau-like scheduler whose state holds a typed list and a tensor.
class TypedMetricScheduler final : public MetricScheduler {
 public:
  using MetricScheduler::MetricScheduler;
  void step(double) override {}
  c10::impl::GenericDict state_dict() const override {
    c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
    state.insert(std::string("best"), at::scalar_tensor(0.25, at::kDouble));
    state.insert(std::string("_last_lr"), c10::List<double>({0.1}));
    state.insert(std::string("last_epoch"), int64_t{3});
    return state;
  }
  absl::Status CheckStateDict(const c10::impl::GenericDict&) const override { return absl::OkStatus(); }
  void load_state_dict(const c10::impl::GenericDict&) override {}
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
  // With a callback, a plateau scheduler and the data, whose states hold typed containers.
  TrainingState FullState() {
    if (callbacks_.empty()) {
      callbacks_.push_back(callback_);
      optimizers_.schedulers.push_back(
          {.scheduler = std::make_shared<TypedMetricScheduler>(*optimizers_.optimizers[0]), .monitor = "loss"});
      scheduler_steps_.push_back(3);
      module_.save_hyperparameters({{"lr", "0.1"}, {"name", "tiny"}});
    }
    return TrainingState{module_, optimizers_, scheduler_steps_, callbacks_, *precision_, &data_};
  }
  // The file FullState() makes at this step (`at_step`), and a snapshot taken of it.
  void TakeAtStep(const std::string& path, std::string& at_step, absl::StatusOr<CheckpointSnapshot>& snapshot) {
    const TrainingState state = FullState();
    absl::StatusOr<std::string> bytes = DumpTrainingState(path, state, progress_);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    at_step = *std::move(bytes);
    snapshot = TakeCheckpointSnapshot(path, state, progress_);
    ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  }

  Module module_;
  OptimizerConfig optimizers_;
  std::vector<int64_t> scheduler_steps_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  std::shared_ptr<PrecisionPlugin> precision_;
  std::shared_ptr<CountingCallback> callback_ = std::make_shared<CountingCallback>();
  TypedData data_;
  const LoopProgress progress_{.epoch = 0, .batch_in_epoch = 1, .global_step = 1};
};

// The lists and dictionaries in `value`, at any depth, that are not Any-typed (a list whose element type, or a
// dictionary whose key or value type, is narrower): each is one torch_file.cc copies before pickling.
int NarrowContainers(const c10::IValue& value) {
  int narrow = 0;
  value.visit([&](const c10::IValue& item) {
    if (item.isList()) {
      narrow += item.toList().elementType()->kind() != c10::TypeKind::AnyType;
    } else if (item.isGenericDict()) {
      const c10::impl::GenericDict dict = item.toGenericDict();
      narrow += dict.keyType()->kind() != c10::TypeKind::AnyType || dict.valueType()->kind() != c10::TypeKind::AnyType;
    }
    return false;  // Go on into it.
  });
  return narrow;
}

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

TEST_F(SnapshotTest, EveryContainerIsAnyTyped) {
  absl::StatusOr<c10::impl::GenericDict> snapshot = SnapshotTrainingState("x.ckpt", FullState(), progress_);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  // What the test gave typed reached the snapshot (else the count below would prove nothing about it).
  ASSERT_TRUE(snapshot->contains(std::string("TabularData")));
  EXPECT_EQ(snapshot->at(std::string("lr_schedulers")).toListRef().size(), 1u);
  EXPECT_EQ(NarrowContainers(*snapshot), 0);
}

TEST_F(SnapshotTest, ATakenSnapshotBuildsTheStepsStateLater) {
  const TrainingState state = FullState();
  absl::StatusOr<std::string> at_step = DumpTrainingState("x.ckpt", state, progress_);
  ASSERT_TRUE(at_step.ok()) << at_step.status();
  const int calls = callback_->calls;
  absl::StatusOr<CheckpointSnapshot> snapshot = TakeCheckpointSnapshot("x.ckpt", state, progress_);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ(callback_->calls, calls + 1) << "the callbacks' state_dict() runs when the snapshot is taken";
  // The snapshot's tensors: the parameters, the momentum buffers, the generator's state, the data's scale and the
  // scheduler's best score, each a copy.
  EXPECT_GE(snapshot->tensor_bytes, (12 + 3) * 2 * sizeof(float) + 3 * sizeof(float) + sizeof(double));
  // The loop goes on: the parameters, momentum buffers, the callback's and the data's states change in place.
  Step();
  callback_->state["last_saved_step"] = "2";
  data_.scale.mul_(2);
  module_.save_hyperparameters({{"lr", "0.2"}});
  absl::StatusOr<c10::impl::GenericDict> built = snapshot->build();
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(callback_->calls, calls + 1) << "building read a callback";
  absl::StatusOr<std::string> from_snapshot = SerializeCheckpoint("x.ckpt", *built);
  ASSERT_TRUE(from_snapshot.ok()) << from_snapshot.status();
  EXPECT_TRUE(*from_snapshot == *at_step) << "the file differs from the one written at the step";
  // Pickled straight from the snapshot, with no dictionary made: the same file, byte for byte.
  ASSERT_NE(snapshot->pickle, nullptr);
  PickleWriter pickled;
  ASSERT_TRUE(snapshot->pickle(pickled).ok());
  absl::StatusOr<TorchFilePieces> pieces = SerializeTorchFilePieces(std::move(pickled));
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  std::string streamed;
  for (absl::string_view piece : pieces->pieces()) streamed.append(piece.data(), piece.size());
  EXPECT_EQ(streamed.size(), at_step->size());
  EXPECT_TRUE(streamed == *at_step) << "the pickled snapshot differs from the dictionary's file";
  EXPECT_EQ(callback_->calls, calls + 1) << "pickling read a callback";
}

// A path in a fresh folder of the test's own.
std::string FreshPath(const std::string& folder) {
  const std::string dir = ::testing::TempDir() + "/" + folder;
  std::filesystem::remove_all(dir);
  return dir + "/step=1.ckpt";
}

TEST_F(SnapshotTest, TheWriterBuildsOnItsThreadWhatTheTrainingThreadWouldHave) {
  const std::string path = FreshPath("snapshot_built_by_writer");
  std::string at_step;
  absl::StatusOr<CheckpointSnapshot> snapshot;
  ASSERT_NO_FATAL_FAILURE(TakeAtStep(path, at_step, snapshot));
  EXPECT_EQ(callback_->thread, std::this_thread::get_id());
  std::atomic<bool> built_here{true};
  const std::thread::id training_thread = std::this_thread::get_id();
  CheckpointSnapshot submitted{.tensor_bytes = snapshot->tensor_bytes,
                               .build = [&, build = std::move(snapshot->build)] {
                                 built_here = std::this_thread::get_id() == training_thread;
                                 return build();
                               }};
  CheckpointWriter writer;
  ASSERT_TRUE(writer.SubmitSnapshot(path, std::move(submitted)).ok());
  for (int i = 0; i < 3; ++i) Step();  // While the writer may still be building.
  callback_->state["last_saved_step"] = "4";
  ASSERT_TRUE(writer.Flush().ok());
  EXPECT_FALSE(built_here) << "the dictionary was built on the training thread";
  EXPECT_TRUE(ReadAll(path) == at_step) << "the file differs from the one written at the step";
}

TEST_F(SnapshotTest, TheWriterPicklesOnItsThreadWhatTheTrainingThreadWouldHave) {
  const std::string path = FreshPath("snapshot_pickled_by_writer");
  std::string at_step;
  absl::StatusOr<CheckpointSnapshot> snapshot;
  ASSERT_NO_FATAL_FAILURE(TakeAtStep(path, at_step, snapshot));
  std::atomic<int> pickled_here{-1};
  std::atomic<bool> built{false};
  const std::thread::id training_thread = std::this_thread::get_id();
  CheckpointSnapshot submitted{.tensor_bytes = snapshot->tensor_bytes,
                               .build =
                                   [&, build = std::move(snapshot->build)] {
                                     built = true;
                                     return build();
                                   },
                               .pickle = [&, pickle = std::move(snapshot->pickle)](PickleWriter& out) {
                                 pickled_here = std::this_thread::get_id() == training_thread ? 1 : 0;
                                 return pickle(out);
                               }};
  CheckpointWriter writer;
  ASSERT_TRUE(writer.SubmitSnapshot(path, std::move(submitted)).ok());
  for (int i = 0; i < 3; ++i) Step();  // While the writer may still be pickling.
  callback_->state["last_saved_step"] = "4";
  ASSERT_TRUE(writer.Flush().ok());
  EXPECT_EQ(pickled_here, 0) << "-1: never pickled; 1: pickled on the training thread";
  EXPECT_FALSE(built) << "the writer made the dictionary although it could pickle without it";
  EXPECT_TRUE(ReadAll(path) == at_step) << "the file differs from the one written at the step";
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

TEST(CheckpointWriterTest, ASnapshotsBuildErrorsAreReturned) {
  const std::string dir = ::testing::TempDir() + "/snapshot_build_errors";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    CheckpointWriter writer;
    const absl::Status refused = writer.SubmitSnapshot(dir + "/none.ckpt", CheckpointSnapshot{});
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
    EXPECT_TRUE(writer.Flush().ok()) << "a refused submission is not a write error";
  }
  {
    CheckpointWriter writer;
    const auto returns_error = []() -> absl::StatusOr<c10::impl::GenericDict> {
      return absl::DataLossError("the builder's own error");
    };
    ASSERT_TRUE(writer.SubmitSnapshot(dir + "/returned.ckpt", {.build = returns_error}).ok());
    const absl::Status flushed = writer.Flush();
    EXPECT_EQ(flushed.code(), absl::StatusCode::kDataLoss) << flushed;
  }
  {
    CheckpointWriter writer;
    const std::string path = dir + "/thrown.ckpt";
    const auto throws = []() -> absl::StatusOr<c10::impl::GenericDict> { TORCH_CHECK(false, "a builder that throws"); };
    ASSERT_TRUE(writer.SubmitSnapshot(path, {.build = throws}).ok());
    const absl::Status flushed = writer.Flush();
    EXPECT_EQ(flushed.code(), absl::StatusCode::kInternal) << flushed;
    EXPECT_NE(flushed.message().find(path), std::string::npos) << flushed;
    EXPECT_NE(flushed.message().find("a builder that throws"), std::string::npos) << flushed;
    EXPECT_FALSE(std::filesystem::exists(path));
  }
}

TEST(CheckpointWriterTest, ASnapshotsTensorBytesCountAgainstTheBound) {
  const std::string dir = ::testing::TempDir() + "/snapshot_bound";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  CheckpointWriter writer(/*max_pending_bytes=*/100);
  const auto slow = [](int64_t value) {
    return CheckpointSnapshot{.tensor_bytes = 80, .build = [value] {
                                // Slow enough that a Submit that did not wait would return long before it ends.
                                std::this_thread::sleep_for(std::chrono::milliseconds(100));
                                c10::impl::GenericDict contents = NewDict();
                                Put(contents, "value", value);
                                return absl::StatusOr<c10::impl::GenericDict>(contents);
                              }};
  };
  ASSERT_TRUE(writer.SubmitSnapshot(dir + "/first.ckpt", slow(1)).ok());
  // 80 + 80 bytes pass the bound of 100: this waits until the first file is on disk.
  ASSERT_TRUE(writer.SubmitSnapshot(dir + "/second.ckpt", slow(2)).ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/first.ckpt"))
      << "SubmitSnapshot returned before the earlier write finished";
  ASSERT_TRUE(writer.Flush().ok());
  absl::StatusOr<Checkpoint> second = ReadCheckpoint(dir + "/second.ckpt");
  ASSERT_FALSE(second.ok()) << "a dictionary without state_dict is not a checkpoint";  // But it was written.
  EXPECT_TRUE(std::filesystem::exists(dir + "/second.ckpt"));
}

// Lightning's counters at the three places its own checkpoints are written (loops/fit_loop.py, training_epoch_loop.py):
// an epoch loop tracker {ready, started, processed, completed} and the batch tracker's current counts.
struct LightningPoint {
  int64_t epoch;  // The checkpoint's "epoch".
  int64_t epochs_started, epochs_processed, epochs_completed;
  int64_t batches_processed, batches_completed;
  bool is_last_batch;
};

c10::impl::GenericDict Tracker(int64_t ready, int64_t started, int64_t processed, int64_t completed) {
  c10::impl::GenericDict counts = NewDict();
  Put(counts, "ready", ready);
  Put(counts, "completed", completed);
  Put(counts, "started", started);
  Put(counts, "processed", processed);
  return counts;
}

// A checkpoint Lightning would write at `point`, with this test's module and optimizer state, written to `path`.
void WriteLightningFile(const std::string& path, c10::impl::GenericDict contents, const LightningPoint& point) {
  (void)contents.erase(std::string(kKilnSectionKey));  // Lightning writes no "kiln" section.
  Put(contents, "epoch", point.epoch);
  c10::impl::GenericDict epochs = NewDict();
  const auto epoch_tracker = [&] {
    return Tracker(point.epochs_started, point.epochs_started, point.epochs_processed, point.epochs_completed);
  };
  Put(epochs, "total", epoch_tracker());
  Put(epochs, "current", epoch_tracker());
  c10::impl::GenericDict batches = NewDict();
  const auto batch_tracker = [&] {
    return Tracker(point.batches_processed, point.batches_processed, point.batches_processed, point.batches_completed);
  };
  Put(batches, "total", batch_tracker());
  Put(batches, "current", batch_tracker());
  Put(batches, "is_last_batch", point.is_last_batch);
  c10::impl::GenericDict fit_loop = NewDict();
  Put(fit_loop, "epoch_progress", epochs);
  Put(fit_loop, "epoch_loop.batch_progress", batches);
  c10::impl::GenericDict loops = NewDict();
  Put(loops, "fit_loop", fit_loop);
  Put(contents, "loops", loops);
  absl::StatusOr<std::string> bytes = SerializeTorchFile(contents);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  std::ofstream(path, std::ios::binary) << *bytes;
}

TEST_F(SnapshotTest, ResumesLightningsFilesWhereLightningWould) {
  absl::StatusOr<c10::impl::GenericDict> contents = SnapshotTrainingState("x.ckpt", State(), progress_);
  ASSERT_TRUE(contents.ok()) << contents.status();
  struct Case {
    const char* where;
    LightningPoint point;
    int64_t epoch, batch_in_epoch;  // Where Lightning goes on.
  };
  const Case cases[] = {
      // on_train_epoch_end of epoch 1 (4 batches): epoch 1 processed, not completed; epoch 2 starts.
      {"the end of an epoch", {1, 2, 2, 1, 4, 4, true}, 2, 0},
      // After fit: "epoch" is already the next one, not begun.
      {"the end of a fit", {2, 2, 2, 2, 4, 4, true}, 2, 0},
      // on_train_batch_end of batch 2 of epoch 1: that batch ran (processed) but is not completed; batch 3 is next.
      {"a batch's end hooks", {1, 2, 1, 1, 3, 2, false}, 1, 3},
      // on_validation_end after the epoch's last batch: its batches ran, its end has not.
      {"validation after the last batch", {1, 2, 1, 1, 4, 4, true}, 1, 4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.where);
    const std::string path = ::testing::TempDir() + "/lightning_point.ckpt";
    WriteLightningFile(path, contents->copy(), c.point);
    absl::StatusOr<LoopProgress> progress = RestoreTrainingState(path, State(), c10::Device(c10::kCPU), true);
    ASSERT_TRUE(progress.ok()) << progress.status();
    EXPECT_EQ(progress->epoch, c.epoch);
    EXPECT_EQ(progress->batch_in_epoch, c.batch_in_epoch);
  }
}

TEST_F(SnapshotTest, LightningsCountersComeBackFromKilnsOwnFile) {
  const std::string path = ::testing::TempDir() + "/counters.ckpt";
  LoopProgress progress{.epoch = 1, .batch_in_epoch = 3, .global_step = 7, .current_epoch = 1, .batches_done = 3};
  progress.lightning = {.batches_total = 7, .batches_completed = 2, .batches_that_stepped = 6, .steps_in_epoch = 3,
                        .scheduler_steps_in_epoch = 0, .val_batches_in_epoch = 2, .val_batches_last_run = 2};
  absl::StatusOr<std::string> bytes = DumpTrainingState(path, State(), progress);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  std::ofstream(path, std::ios::binary) << *bytes;
  absl::StatusOr<LoopProgress> read = RestoreTrainingState(path, State(), c10::Device(c10::kCPU), true);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->epoch, 1);
  EXPECT_EQ(read->batch_in_epoch, 3);
  EXPECT_EQ(read->lightning.batches_total, 7);
  EXPECT_EQ(read->lightning.batches_completed, 3);  // The batch being completed when it was written is done now.
  EXPECT_EQ(read->lightning.steps_in_epoch, 3);
  EXPECT_EQ(read->lightning.val_batches_in_epoch, 2);
}

}  // namespace
}  // namespace kiln
