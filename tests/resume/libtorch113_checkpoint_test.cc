// Checkpoints that Kiln wrote while it built against LibTorch 1.13 (until 2026-12) still load and resume under the
// LibTorch 2.x Kiln builds against now. The file is tests/fuzz/corpus/checkpoint_reader/raw-right less its first
// byte (the fuzzer's 'r', "the rest is a file"): a format-1 checkpoint (LibTorch's archive) written by the 1.13 build for checkpoint_reader_fuzzer's model (an MLP 4 -> 8 -> 2,
// Adam, StepLR every step), whose optimizer state is keyed by the parameters' addresses in hex, as 1.13 wrote them.
//
// What must hold: the file reads as format 1; resuming restores every parameter and Adam's moments bit for bit from
// the file (before the first step of the resumed run), and the resumed run trains from there.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "gtest/gtest.h"
#include "torch/optim/adam.h"
#include "torch/optim/schedulers/step_lr.h"
#include "torch/serialize/input-archive.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/core/callback.h"
#include "trainer/synthetic_data.h"
#include "trainer/testing/test_support.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

const char kCorpusFile[] = "tests/fuzz/corpus/checkpoint_reader/raw-right";

// The checkpoint file inside the corpus entry, written to a fresh folder.
std::string CheckpointFile() {
  const std::string entry = testing::FileBytes(kCorpusFile);
  EXPECT_EQ(entry.substr(0, 1), "r") << kCorpusFile << " is not a raw corpus entry";
  const std::string path = testing::TempDir() + "/libtorch113.ckpt";
  testing::Overwrite(path, entry.substr(1));
  return path;
}

// What the file holds, read from its archive directly (not through the trainer).
struct Saved {
  int64_t global_step = -1;
  std::vector<std::string> names;         // The model's parameter names, in order.
  std::vector<at::Tensor> parameters;     // The model's tensors, in that order.
  std::vector<at::Tensor> adam_exp_avgs;  // Adam's first moments, by the optimizer's parameter order.
};

Saved ReadSaved(torch::serialize::InputArchive& archive) {
  Saved saved;
  c10::IValue step;
  archive.read("loop_global_step", step);
  saved.global_step = step.toInt();
  torch::serialize::InputArchive model;
  archive.read("model", model);
  c10::IValue names;
  model.read("names", names);
  for (const c10::IValue& name : names.toListRef()) saved.names.push_back(name.toStringRef());
  for (size_t i = 0; i < saved.names.size(); ++i) {
    at::Tensor tensor;
    model.read("t" + std::to_string(i), tensor);
    saved.parameters.push_back(tensor);
  }
  torch::serialize::InputArchive optimizer;
  archive.read("optimizer_0", optimizer);
  torch::serialize::InputArchive groups;
  optimizer.read("param_groups", groups);
  torch::serialize::InputArchive group;
  groups.read("param_groups/0", group);
  torch::serialize::InputArchive state;
  optimizer.read("state", state);
  for (size_t i = 0; i < saved.names.size(); ++i) {
    c10::IValue key;
    group.read("params/" + std::to_string(i), key);
    EXPECT_EQ(key.toStringRef().substr(0, 2), "0x") << "1.13 keyed the optimizer state by hex addresses";
    torch::serialize::InputArchive one;
    state.read(key.toStringRef(), one);
    at::Tensor exp_avg;
    one.read("exp_avg", exp_avg);
    saved.adam_exp_avgs.push_back(exp_avg);
  }
  return saved;
}

// Copies the parameters and Adam's moments when the resumed run's first epoch starts, after the restore and before
// any step.
class SeeRestore : public Callback {
 public:
  std::string state_key() const override { return "SeeRestore"; }
  void on_train_epoch_start(Trainer& trainer, LightningModule& module) override {
    if (seen) return;
    seen = true;
    step = trainer.global_step();
    for (const auto& named : module.named_parameters()) {
      names.push_back(named.key());
      parameters.push_back(named.value().detach().clone());
    }
    auto& adam = dynamic_cast<torch::optim::Adam&>(*trainer.optimizers().at(0));
    for (const at::Tensor& param : adam.param_groups().at(0).params()) {
      auto found = adam.state().find(param.unsafeGetTensorImpl());
      exp_avgs.push_back(found == adam.state().end()
                             ? at::Tensor()
                             : static_cast<torch::optim::AdamParamState&>(*found->second).exp_avg().clone());
    }
  }
  bool seen = false;
  int64_t step = -1;
  std::vector<std::string> names;
  std::vector<at::Tensor> parameters;
  std::vector<at::Tensor> exp_avgs;
};

TEST(LibTorch113CheckpointTest, ReadsAndResumes) {
  const std::string file = CheckpointFile();
  absl::StatusOr<Checkpoint> checkpoint = ReadCheckpoint(file);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  ASSERT_EQ(checkpoint->format_version, 1) << "the file is 1.13's LibTorch archive (format 1)";
  ASSERT_NE(checkpoint->archive, nullptr);
  const Saved saved = ReadSaved(*checkpoint->archive);
  ASSERT_EQ(saved.names.size(), 4u);
  ASSERT_EQ(saved.adam_exp_avgs.size(), 4u);
  // The moments are not all zero: a restore that dropped them (or put one parameter's on another) would show.
  bool nonzero = false;
  for (const at::Tensor& m : saved.adam_exp_avgs) nonzero = nonzero || m.abs().sum().item<double>() > 0;
  ASSERT_TRUE(nonzero) << "the file's Adam moments are all zero; pick a checkpoint that trained: "
                       << saved.adam_exp_avgs[0];

  // The fuzzer's model, optimizer and scheduler (checkpoint_reader_fuzzer.cc), from another seed: every value the
  // run starts from must come from the file.
  torch::manual_seed(123);
  MlpOptions model_options;
  model_options.input_size = 4;
  model_options.hidden_sizes = {8};
  model_options.num_classes = 2;
  testing::RecordingClassifier model(model_options);
  model.make_scheduler = [](torch::optim::Optimizer& optimizer) {
    return std::vector<SchedulerConfig>{{.scheduler = std::make_shared<torch::optim::StepLR>(optimizer, 1, 0.5),
                                         .interval = SchedulerConfig::Interval::kStep}};
  };
  SyntheticOptions data_options;
  data_options.num_train = 16;
  data_options.num_val = 8;
  data_options.num_features = 4;
  data_options.num_classes = 2;
  data_options.batch_size = 8;
  SyntheticClusters data(data_options);
  auto seen = std::make_shared<SeeRestore>();
  Trainer trainer(testing::Quiet(
      {.max_epochs = 100, .max_steps = saved.global_step + 2, .callbacks = {seen}, .enable_checkpointing = false}));
  const absl::Status status = trainer.fit(model, data, file);
  ASSERT_TRUE(status.ok()) << status;

  ASSERT_TRUE(seen->seen) << "the resumed run never started an epoch";
  EXPECT_EQ(seen->step, saved.global_step);
  ASSERT_EQ(seen->names.size(), saved.names.size());
  for (size_t i = 0; i < saved.names.size(); ++i) {
    EXPECT_EQ(seen->names[i], saved.names[i]);
    EXPECT_TRUE(seen->parameters[i].equal(saved.parameters[i])) << saved.names[i] << " was not restored from the file";
    ASSERT_TRUE(seen->exp_avgs[i].defined()) << "no Adam state for " << saved.names[i];
    EXPECT_TRUE(seen->exp_avgs[i].equal(saved.adam_exp_avgs[i]))
        << "Adam's exp_avg of " << saved.names[i] << " is not the file's (a 1.13 hex key read as another parameter's?)";
  }
  EXPECT_EQ(trainer.global_step(), saved.global_step + 2) << "the resumed run trained its two steps";
  EXPECT_FALSE(testing::FlatParameters(model).equal(at::cat({saved.parameters[0].flatten(), saved.parameters[1],
                                                              saved.parameters[2].flatten(), saved.parameters[3]})))
      << "training from the restored state changed nothing";
}

}  // namespace
}  // namespace kiln
