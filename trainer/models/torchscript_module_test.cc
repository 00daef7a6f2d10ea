// A TorchScript module made here, in C++ (the Python-made case is tests/cli/torchscript_test.sh), trained by Kiln.
#include "trainer/models/torchscript_module.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "ATen/ATen.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torch/utils.h"
#include "trainer/io/peak_memory.h"
#include "trainer/models/model_summary.h"
#include "trainer/synthetic_data.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

std::string TempPath(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  return std::string(root != nullptr ? root : "/tmp") + "/" + name;
}

// Five epochs on the CPU, quietly, without checkpoints or a sanity check.
TrainerOptions FiveEpochs() {
  TrainerOptions options;
  options.accelerator = "cpu";
  options.max_epochs = 5;
  options.enable_checkpointing = false;
  options.enable_progress_bar = false;
  options.num_sanity_val_steps = 0;
  return options;
}

// A script class "Linear" with weight and bias.
torch::jit::Module ScriptLinear(int64_t in, int64_t out) {
  torch::jit::Module linear("Linear");
  linear.register_attribute("training", c10::BoolType::get(), true);  // What Python's nn.Module gives every module.
  linear.register_parameter("weight", (at::randn({out, in}) * (1.0 / std::sqrt(in))).requires_grad_(),
                            /*is_buffer=*/false);
  linear.register_parameter("bias", at::zeros({out}).requires_grad_(), /*is_buffer=*/false);
  linear.define(R"(
def forward(self, x):
    return torch.matmul(x, self.weight.t()) + self.bias
)");
  return linear;
}

// fc1 -> relu -> dropout (active in training only) -> fc2, with a step counter buffer bumped in training.
torch::jit::Module ScriptMlp() {
  torch::manual_seed(5);
  torch::jit::Module net("Net");
  net.register_attribute("training", c10::BoolType::get(), true);
  net.register_module("fc1", ScriptLinear(16, 32));
  net.register_module("fc2", ScriptLinear(32, 4));
  net.register_buffer("steps", at::zeros({1}, at::kLong));
  net.define(R"(
def forward(self, x):
    if self.training:
        self.steps.add_(1)
    h = torch.relu(self.fc1.forward(x))
    h = torch.dropout(h, 0.1, self.training)
    return self.fc2.forward(h)
)");
  return net;
}

TEST(TorchScriptModuleTest, TrainsTheScriptsOwnParameters) {
  const std::string path = TempPath("net.pt");
  ScriptMlp().save(path);
  absl::StatusOr<std::shared_ptr<TorchScriptModule>> model = TorchScriptModule::Load(path, {.learning_rate = 1e-2});
  ASSERT_TRUE(model.ok()) << model.status();
  TorchScriptModule& module = **model;

  // The LightningModule's parameters are the script's own tensors, under the script's names.
  const auto named = module.named_parameters();
  ASSERT_EQ(named.size(), 4u);
  EXPECT_TRUE(named.contains("fc1.weight") && named.contains("fc2.bias"));
  EXPECT_TRUE(named["fc1.weight"].is_same(module.script().attr("fc1").toModule().attr("weight").toTensor()));
  EXPECT_EQ(module.named_buffers().size(), 1u);
  const at::Tensor before = named["fc1.weight"].detach().clone();

  ModelSummary summary = Summarize(module);
  ASSERT_EQ(summary.layers.size(), 2u);
  EXPECT_EQ(summary.layers[0].name, "fc1");
  EXPECT_EQ(summary.layers[0].type, "Linear");
  EXPECT_EQ(summary.total_parameters(), 16 * 32 + 32 + 32 * 4 + 4);
  ASSERT_TRUE(module.CheckOutputShape(16, 4).ok());

  SyntheticOptions synthetic;
  synthetic.num_train = 2048;
  synthetic.num_val = 512;
  SyntheticClusters data(synthetic);
  Trainer trainer(FiveEpochs());
  absl::Status fitted = trainer.fit(module, data);
  ASSERT_TRUE(fitted.ok()) << fitted;

  // Trained: the script's tensor changed in place, the buffer counted every training forward, accuracy is high.
  EXPECT_FALSE(module.script().attr("fc1").toModule().attr("weight").toTensor().equal(before));
  EXPECT_EQ(module.script().attr("steps").toTensor().item<int64_t>(), 5 * (2048 / 64));
  EXPECT_GT(trainer.callback_metrics().at("val_acc"), 0.7);  // Chance: 0.25.
  // eval() reached the script module: a forward in eval mode is deterministic (no dropout) and counts nothing.
  module.eval();
  torch::NoGradGuard no_grad;
  at::Tensor x = at::randn({3, 16});
  EXPECT_TRUE(module.forward(x).equal(module.forward(x)));
  EXPECT_EQ(module.script().attr("steps").toTensor().item<int64_t>(), 5 * (2048 / 64));
}

TEST(TorchScriptModuleTest, LoadErrorsSayWhatToDo) {
  absl::StatusOr<std::shared_ptr<TorchScriptModule>> missing = TorchScriptModule::Load(TempPath("none.pt"), {});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  const std::string garbage = TempPath("garbage.pt");
  std::ofstream(garbage) << "not a zip archive";
  absl::StatusOr<std::shared_ptr<TorchScriptModule>> bad = TorchScriptModule::Load(garbage, {});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("torch.jit.script(model).save(path)"), std::string::npos) << bad.status();

  torch::jit::Module frozen = ScriptLinear(2, 2);
  for (const auto& parameter : frozen.parameters()) parameter.detach_().set_requires_grad(false);
  const std::string frozen_path = TempPath("frozen.pt");
  frozen.save(frozen_path);
  absl::StatusOr<std::shared_ptr<TorchScriptModule>> untrainable = TorchScriptModule::Load(frozen_path, {});
  EXPECT_NE(untrainable.status().message().find("has no parameter that requires gradients"), std::string::npos)
      << untrainable.status();
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Two towers: each half of the features through its own Linear, the sums through a head, from a dictionary batch.
torch::jit::Module ScriptTwoTower() {
  torch::manual_seed(5);
  torch::jit::Module net("TwoTower");
  net.register_attribute("training", c10::BoolType::get(), true);
  net.register_module("left", ScriptLinear(8, 16));
  net.register_module("right", ScriptLinear(8, 16));
  net.register_module("head", ScriptLinear(16, 4));
  net.define(R"(
def forward(self, batch: Dict[str, Tensor]):
    h = torch.relu(self.left.forward(batch["left"]) + self.right.forward(batch["right"]))
    return self.head.forward(h)
)");
  return net;
}

// The synthetic clusters' 16 features as two named halves, with the classes under "target".
class TwoInputs final : public DataModule {
 public:
  explicit TwoInputs(SyntheticClusters& clusters) : clusters_(clusters) {}
  void setup(Stage stage) override { clusters_.setup(stage); }
  std::shared_ptr<DataLoader> train_dataloader() override { return Split(clusters_.train_dataloader(), true); }
  std::shared_ptr<DataLoader> val_dataloader() override { return Split(clusters_.val_dataloader(), false); }
  std::shared_ptr<DataLoader> predict_dataloader() override { return val_dataloader(); }

 private:
  static std::shared_ptr<DataLoader> Split(const std::shared_ptr<DataLoader>& loader, bool shuffle) {
    std::vector<at::Tensor> inputs;
    std::vector<at::Tensor> targets;
    for (int64_t i = 0; i < loader->num_batches(); ++i) {
      Batch batch = loader->get_batch(i);
      inputs.push_back(batch.input);
      targets.push_back(batch.target);
    }
    const at::Tensor x = at::cat(inputs);
    return std::make_shared<TensorDataLoader>(
        std::vector<std::pair<std::string, at::Tensor>>{
            {"left", x.slice(1, 0, 8)}, {"right", x.slice(1, 8, 16)}, {"target", at::cat(targets)}},
        TensorDataLoaderOptions{.batch_size = 64, .shuffle = shuffle, .seed = 3});
  }
  SyntheticClusters& clusters_;
};

TEST(TorchScriptModuleTest, AScriptWhoseForwardTakesADictionaryTrainsOnNamedTensors) {
  TorchScriptModule module(ScriptTwoTower(), {.learning_rate = 1e-2});
  SyntheticOptions synthetic;
  synthetic.num_train = 2048;
  synthetic.num_val = 512;
  SyntheticClusters clusters(synthetic);
  TwoInputs data(clusters);
  const at::Tensor before = module.named_parameters()["left.weight"].detach().clone();
  Trainer trainer(FiveEpochs());
  absl::Status fitted = trainer.fit(module, data);
  ASSERT_TRUE(fitted.ok()) << fitted;
  EXPECT_FALSE(module.named_parameters()["left.weight"].equal(before));
  EXPECT_GT(trainer.callback_metrics().at("val_acc"), 0.7);  // Chance: 0.25; the one-tensor MLP above gets there too.
  // Predictions follow: class probabilities for every validation row (TwoInputs predicts on them).
  absl::StatusOr<std::vector<at::Tensor>> predictions = trainer.predict(module, data);
  ASSERT_TRUE(predictions.ok()) << predictions.status();
  const at::Tensor all = at::cat(*predictions);
  EXPECT_EQ(all.sizes(), (std::vector<int64_t>{512, 4}));
  EXPECT_TRUE(at::allclose(all.sum(1), at::ones({512}), 1e-5, 1e-5));
}

TEST(TorchScriptModuleTest, AModelThatTakesOneTensorRefusesADictionaryBatch) {
  TorchScriptModule module(ScriptMlp(), {});
  Batch batch;
  c10::impl::GenericDict dict(c10::StringType::get(), c10::TensorType::get());
  dict.insert("x", at::zeros({2, 16}));
  batch.data = dict;
  try {
    module.training_step(batch, 0);
    FAIL() << "a dictionary batch was taken";
  } catch (const c10::ValueError& e) {
    EXPECT_THAT(e.what_without_backtrace(), ::testing::HasSubstr("this model takes one input tensor"));
  }
}

// docs/reliability.md, "Memory", TorchScript models: what loading a model file of `file_bytes`, whose deflated records
// inflate to `inflated_bytes` together, may take at its peak (of a small module: its code's compiling is LibTorch's).
constexpr uint64_t kMiB = uint64_t{1} << 20;
uint64_t ModelBound(uint64_t file_bytes, uint64_t inflated_bytes) {
  return SanitizerMemoryFactor() * (2 * (file_bytes + inflated_bytes) + 8 * kMiB);
}

// A 35 KB model whose 32 MiB buffer is deflated (testdata/make_inflating_torchscript.py): LibTorch inflates it
// whole, and loading stays within twice the file and what it inflates to (measured: 34 MiB). What a model file may
// inflate to is not yet limited (docs/reliability.md, "Memory"): Kiln does not check a model's archive first, as it
// does a checkpoint's.
TEST(TorchScriptModuleTest, LoadingAModelStaysWithinTwiceTheFileAndWhatItInflatesTo) {
  const std::string path = "trainer/models/testdata/inflating_model.pt";
  const uint64_t file_bytes = std::filesystem::file_size(path);
  absl::StatusOr<std::shared_ptr<TorchScriptModule>> model;
  absl::StatusOr<uint64_t> peak = PeakResidentGrowth([&] { model = TorchScriptModule::Load(path, {}); });
  ASSERT_TRUE(peak.ok()) << peak.status();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_LE(*peak, ModelBound(file_bytes, 32 * kMiB)) << "loading " << path << " took " << *peak / kMiB << " MiB";
  std::printf("%s: %llu bytes, inflating to 32 MiB: peak %llu bytes\n", path.c_str(),
              static_cast<unsigned long long>(file_bytes), static_cast<unsigned long long>(*peak));
}

}  // namespace
}  // namespace kiln
