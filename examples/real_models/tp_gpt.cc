// Trains examples/real_models/tp_gpt.h's GPT, a user's own program on 1 or N processes, and writes the global training
// loss of every step (the mean over the data-parallel ranks, as exact hexadecimal floats), one a line, to
// OUT.rank<R>.txt.
//
//   tp_gpt OUT [accelerator=cpu] [devices=1] [strategy=single_device] [data_parallel_size=auto]
//              [tensor_parallel_size=auto] [global_batch=8] [epochs=2] [checkpointing=0] [root=.] [ckpt=PATH]
//              [auto_wrap_policy=TYPES]   (strategy=fsdp: the module types that become units, e.g. TpGptBlock)
//              [save_distributed_checkpoint=1]   (strategy=model_parallel: 1 sharded checkpoints, 0 full ones)
//              [precision=32-true] [dim=32] [heads=4] [layers=2] [vocab=32] [report=FILE]
//
// dim, heads, layers and vocab are TpGptConfig's (their defaults its own). report=FILE writes FILE.rank<R>.txt for
// tools/measure_parallel_modes.sh: the device's peak allocated bytes over the run where the accelerator counts them
// ("peak_bytes", the virtual NPU does, the CPU does not) and the wall-clock seconds of every training step
// ("step_seconds", from on_train_batch_start to on_train_batch_end: forward, backward, the gradients' collectives and
// the optimizer's step, the devices being synchronous as the virtual NPU's and the CPU's are).
//
// checkpointing=1 saves a checkpoint at each epoch's end under root/checkpoints (ModelCheckpoint's default place);
// ckpt= resumes from one (only the steps run here are written). The per-process batch is global_batch / data-parallel size, so every run takes the same global batches.
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "examples/real_models/tp_gpt.h"
#include "trainer/strategies/strategy.h"
#include "trainer/trainer.h"

namespace {

class RecordedGpt final : public kiln_examples::TpGpt {
 public:
  using TpGpt::TpGpt;
  at::Tensor training_step(const kiln::Batch& batch, int64_t batch_idx) override {
    at::Tensor loss = TpGpt::training_step(batch, batch_idx);
    // The global batch's loss: the mean over every rank (those of one tensor-parallel group hold the same loss).
    losses.push_back(trainer()->strategy()->ReduceMean(loss.detach()).item<float>());
    return loss;
  }
  std::vector<float> losses;
};

// report=FILE's figures. The peak is read at the end of training, so it covers setup (the model moved to the device,
// sharded or sliced) and every step.
class StepReport final : public kiln::Callback {
 public:
  std::string state_key() const override { return "StepReport"; }
  void on_train_batch_start(kiln::Trainer&, kiln::LightningModule&, const kiln::Batch&, int64_t) override {
    start_ = std::chrono::steady_clock::now();
  }
  void on_train_batch_end(kiln::Trainer&, kiln::LightningModule&, const at::Tensor&, const kiln::Batch&,
                          int64_t) override {
    step_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  void on_train_end(kiln::Trainer& trainer, kiln::LightningModule&) override {
    absl::StatusOr<kiln::DeviceStats> stats =
        trainer.plan()->accelerator->GetDeviceStats(trainer.plan()->root_logical_device());
    if (!stats.ok()) return;
    const auto found = stats->find("memory_allocated_peak_bytes");
    if (found != stats->end()) peak_bytes = static_cast<int64_t>(found->second);
  }
  int64_t peak_bytes = -1;
  std::vector<double> step_seconds;

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: tp_gpt OUT [key=value...]\n";
    return 2;
  }
  std::map<std::string, std::string> args = {
      {"accelerator", "cpu"}, {"devices", "1"},     {"strategy", "single_device"}, {"data_parallel_size", "auto"},
      {"tensor_parallel_size", "auto"}, {"global_batch", "8"}, {"epochs", "2"}, {"checkpointing", "0"},
      {"root", "."}, {"ckpt", ""}, {"auto_wrap_policy", ""}, {"save_distributed_checkpoint", "1"},
      {"precision", "32-true"}, {"dim", std::to_string(kiln_examples::TpGptConfig{}.dim)},
      {"heads", std::to_string(kiln_examples::TpGptConfig{}.heads)},
      {"layers", std::to_string(kiln_examples::TpGptConfig{}.layers)},
      {"vocab", std::to_string(kiln_examples::TpGptConfig{}.vocab)}, {"report", ""}};
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t equals = arg.find('=');
    if (equals == std::string::npos || args.count(arg.substr(0, equals)) == 0) {
      std::cerr << "tp_gpt: unknown argument '" << arg << "'\n";
      return 2;
    }
    args[arg.substr(0, equals)] = arg.substr(equals + 1);
  }
  int data_parallel = 1;
  if (args["strategy"] == "model_parallel" && args["data_parallel_size"] != "auto") {
    data_parallel = std::stoi(args["data_parallel_size"]);
  }
  const int64_t batch = std::stoll(args["global_batch"]) / data_parallel;
  kiln::TrainerOptions options{.accelerator = args["accelerator"],
                               .devices = args["devices"],
                               .strategy = args["strategy"],
                               .precision = args["precision"],
                               .max_epochs = std::stoi(args["epochs"]),
                               .seed = 42,  // Every rank draws the same whole weights, and keeps its slices.
                               .logger = false,
                               .enable_checkpointing = args["checkpointing"] == "1",
                               .enable_progress_bar = false,
                               .enable_model_summary = false};
  options.default_root_dir = args["root"];
  options.data_parallel_size = args["data_parallel_size"];
  options.tensor_parallel_size = args["tensor_parallel_size"];
  options.save_distributed_checkpoint = args["save_distributed_checkpoint"] == "1";
  options.fsdp.auto_wrap_policy.module_types = kiln::SplitModuleTypes(args["auto_wrap_policy"]);
  kiln_examples::TpGptConfig config;
  config.dim = std::stoll(args["dim"]);
  config.heads = std::stoll(args["heads"]);
  config.layers = std::stoll(args["layers"]);
  config.vocab = std::stoll(args["vocab"]);
  auto report = std::make_shared<StepReport>();
  if (!args["report"].empty()) options.callbacks.push_back(report);
  RecordedGpt model(config);
  kiln_examples::TpGptData data(config, /*sequences=*/64, batch);
  kiln::Trainer trainer(options);
  if (absl::Status status = trainer.fit(model, data, args["ckpt"]); !status.ok()) {
    std::cerr << "tp_gpt: " << status << "\n";
    return 1;
  }
  std::ofstream out(std::string(argv[1]) + ".rank" + std::to_string(trainer.global_rank()) + ".txt");
  out << std::hexfloat;
  for (float loss : model.losses) out << loss << "\n";
  if (!args["report"].empty()) {
    std::ofstream figures(args["report"] + ".rank" + std::to_string(trainer.global_rank()) + ".txt");
    if (report->peak_bytes >= 0) figures << "peak_bytes " << report->peak_bytes << "\n";
    figures << "step_seconds";
    for (double seconds : report->step_seconds) figures << " " << seconds;
    figures << "\n";
    if (!figures.good()) return 1;
  }
  return out.good() ? 0 : 1;
}
