// Trains examples/real_models/tp_gpt.h's GPT, a user's own program on 1 or N processes, and writes the global training
// loss of every step (the mean over the data-parallel ranks, as exact hexadecimal floats), one a line, to
// OUT.rank<R>.txt.
//
//   tp_gpt OUT [accelerator=cpu] [devices=1] [strategy=single_device] [data_parallel_size=auto]
//              [tensor_parallel_size=auto] [global_batch=8] [epochs=2] [checkpointing=0] [root=.] [ckpt=PATH]
//              [auto_wrap_policy=TYPES]   (strategy=fsdp: the module types that become units, e.g. TpGptBlock)
//              [save_distributed_checkpoint=1]   (strategy=model_parallel: 1 sharded checkpoints, 0 full ones)
//
// checkpointing=1 saves a checkpoint at each epoch's end under root/checkpoints (ModelCheckpoint's default place);
// ckpt= resumes from one (only the steps run here are written). The per-process batch is global_batch / data-parallel size, so every run takes the same global batches.
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
  at::Tensor training_step(const kiln::Batch& batch, int64_t batch_idx) override {
    at::Tensor loss = TpGpt::training_step(batch, batch_idx);
    // The global batch's loss: the mean over every rank (those of one tensor-parallel group hold the same loss).
    losses.push_back(trainer()->strategy()->ReduceMean(loss.detach()).item<float>());
    return loss;
  }
  std::vector<float> losses;
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
      {"root", "."}, {"ckpt", ""}, {"auto_wrap_policy", ""}, {"save_distributed_checkpoint", "1"}};
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
  RecordedGpt model;
  kiln_examples::TpGptData data(kiln_examples::TpGptConfig{}, /*sequences=*/64, batch);
  kiln::Trainer trainer(options);
  if (absl::Status status = trainer.fit(model, data, args["ckpt"]); !status.ok()) {
    std::cerr << "tp_gpt: " << status << "\n";
    return 1;
  }
  std::ofstream out(std::string(argv[1]) + ".rank" + std::to_string(trainer.global_rank()) + ".txt");
  out << std::hexfloat;
  for (float loss : model.losses) out << loss << "\n";
  return out.good() ? 0 : 1;
}
