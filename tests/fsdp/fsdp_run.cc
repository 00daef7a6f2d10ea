// One training run of a small model under fsdp, ddp or one device, with real processes (the Trainer's own launcher,
// c10d over Gloo), for tests/fsdp/fsdp_test.sh. Each rank writes its final parameters (named, in hexadecimal
// floating point) and global step to OUT.rank<R>.txt. With `compare`, it compares two such files.
//
//   fsdp_run OUT [accelerator=cpu|virtual_npu] [strategy=fsdp|ddp|single_device] [devices=N] [sharding=FULL_SHARD|SHARD_GRAD_OP|NO_SHARD]
//            [policy=none|linear|size] [optimizer=sgd|adam] [accumulate=K] [clip=V] [precision=P] [epochs=E]
//            [width=W depth=D] [batches=B] [offload=0|1] [model=linear|blocks] [checkpoint=TYPE] [batch=N]
//            [policy=...|block|nested (Block and Linear)] [prefetch=1|0 (backward_prefetch)] [save=0|1 (ModelCheckpoint's checkpoints, in
//            ./checkpoints)] [state_dict_type=full|sharded] [resume=CKPT_PATH] [precision=16-mixed scale=S]
//            [param_dtype=D reduce_dtype=D buffer_dtype=D (fsdp's mixed precision: bf16, fp16, fp32; unset: what the
//            precision implies)]
//            [nodes=N]   (nodes > 1: one program per node, with NODE_RANK, MASTER_ADDR and MASTER_PORT set; its ranks'
//                        files are numbered by local rank)
//   fsdp_run compare A B TOLERANCE     exit 1 when some |a - b| > TOLERANCE * (1 + |a|); prints the largest
//   fsdp_run free_port                 prints a TCP port free on this machine
//
// The model: a Sequential of Linear(6, 15), Tanh, Linear(15, 13), Tanh (sizes chosen so that every unit needs
// padding at 2 and 4 ranks) and a member head Linear(13, 3), which the model calls itself: policy=linear makes the
// three Linear layers units (the head's gathered when its forward reads it), policy=none leaves one (root) unit;
// with width=W, D Linear layers of width W instead. Where the accelerator counts its memory, the file also has the run's peak
// ("peak_bytes").
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "ATen/ATen.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/activation.h"
#include "torch/nn/modules/container/sequential.h"
#include "torch/nn/module.h"
#include "torch/nn/modules/linear.h"
#include "torch/nn/pimpl.h"
#include "torch/optim/adam.h"
#include "torch/optim/sgd.h"
#include "trainer/kiln.h"
#include "hal/testing/fake_accelerator.h"
#include "trainer/plugins/precision/mixed_precision.h"
#include "trainer/strategies/fsdp_strategy.h"
#include "trainer/strategies/launcher.h"

namespace {

class Data final : public kiln::DataModule {
 public:
  explicit Data(int64_t batch_size) : batch_size_(batch_size) {}
  std::shared_ptr<kiln::DataLoader> train_dataloader() override {
    at::Generator generator = at::detail::createCPUGenerator(11);
    const at::Tensor inputs = at::randn({16 * batch_size_, 6}, generator, at::kFloat);
    const at::Tensor targets = at::randint(0, 3, {16 * batch_size_}, generator, at::kLong);
    return std::make_shared<kiln::TensorDataLoader>(inputs, targets,
                                                    kiln::TensorDataLoaderOptions{.batch_size = batch_size_});
  }
  std::vector<std::shared_ptr<kiln::DataLoader>> val_dataloaders() override {
    at::Generator generator = at::detail::createCPUGenerator(12);
    const at::Tensor inputs = at::randn({32, 6}, generator, at::kFloat);
    const at::Tensor targets = at::randint(0, 3, {32}, generator, at::kLong);
    return {std::make_shared<kiln::TensorDataLoader>(inputs, targets, kiln::TensorDataLoaderOptions{.batch_size = 8})};
  }

 private:
  int64_t batch_size_;
};

// Linear, Tanh, Linear: a module with activations inside (what activation checkpointing drops).
struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t width)
      : in(register_module("in", torch::nn::Linear(width, width))),
        out(register_module("out", torch::nn::Linear(width, width))) {}
  at::Tensor forward(at::Tensor x) { return out->forward(at::tanh(in->forward(x))); }
  torch::nn::Linear in, out;
};
TORCH_MODULE(Block);

class Net final : public kiln::LightningModule {
 public:
  // `width` 0: the small model; otherwise `depth` Linear(width, width) layers (the memory measurement's model, whose
  // parameters and optimizer state outweigh its activations).
  Net(std::string optimizer, int64_t width, int64_t depth, bool blocks_of_two) : optimizer_(std::move(optimizer)) {
    torch::manual_seed(7);
    torch::nn::Sequential blocks;
    if (blocks_of_two) {
      blocks->push_back(torch::nn::Linear(6, width));
      for (int64_t i = 0; i < depth; ++i) blocks->push_back(Block(width));
    } else if (width == 0) {
      blocks = torch::nn::Sequential(torch::nn::Linear(6, 15), torch::nn::Tanh(), torch::nn::Linear(15, 13),
                                     torch::nn::Tanh());
      width = 13;
    } else {
      blocks->push_back(torch::nn::Linear(6, width));
      for (int64_t i = 1; i < depth; ++i) {
        blocks->push_back(torch::nn::Tanh());
        blocks->push_back(torch::nn::Linear(width, width));
      }
    }
    blocks_ = register_module("blocks", blocks);
    head_ = register_module("head", torch::nn::Linear(width, 3));
  }
  at::Tensor training_step(const kiln::Batch& batch, int64_t) override {
    return torch::nn::functional::cross_entropy(head_->forward(blocks_->forward(batch.input)), batch.target);
  }
  void validation_step(const kiln::Batch& batch, int64_t) override {
    log("val_loss", torch::nn::functional::cross_entropy(head_->forward(blocks_->forward(batch.input)), batch.target),
        {.sync_dist = true});
  }
  kiln::OptimizerConfig configure_optimizers() override {
    if (optimizer_ == "adam") {
      return std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(0.01));
    }
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  }

 private:
  std::string optimizer_;
  torch::nn::Sequential blocks_{nullptr};
  torch::nn::Linear head_{nullptr};
};

// The device's peak memory over the run, where the accelerator counts it (the virtual NPU does; the CPU does not).
class PeakMemory final : public kiln::Callback {
 public:
  std::string state_key() const override { return "PeakMemory"; }
  void on_train_end(kiln::Trainer& trainer, kiln::LightningModule&) override {
    absl::StatusOr<kiln::DeviceStats> stats =
        trainer.plan()->accelerator->GetDeviceStats(trainer.plan()->root_logical_device());
    if (!stats.ok()) return;
    const auto found = stats->find("memory_allocated_peak_bytes");
    if (found != stats->end()) peak_bytes = static_cast<int64_t>(found->second);
  }
  int64_t peak_bytes = -1;
};

std::map<std::string, std::vector<double>> Read(const std::string& path) {
  std::map<std::string, std::vector<double>> values;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name;
    fields >> name;
    if (name == "peak_bytes") continue;  // Memory is not compared.
    std::string number;
    while (fields >> number) values[name].push_back(std::strtod(number.c_str(), nullptr));
  }
  return values;
}

int Compare(const std::string& a, const std::string& b, double tolerance) {
  const auto left = Read(a);
  const auto right = Read(b);
  if (left.empty() || left.size() != right.size()) {
    std::cerr << "compare: " << a << " has " << left.size() << " entries, " << b << " has " << right.size() << "\n";
    return 1;
  }
  double largest = 0;
  std::string where;
  for (const auto& [name, values] : left) {
    const auto found = right.find(name);
    if (found == right.end() || found->second.size() != values.size()) {
      std::cerr << "compare: '" << name << "' is missing or of another size in " << b << "\n";
      return 1;
    }
    for (size_t i = 0; i < values.size(); ++i) {
      const double scaled = std::abs(values[i] - found->second[i]) / (1 + std::abs(values[i]));
      if (!(scaled <= largest)) {
        largest = scaled;
        where = name + "[" + std::to_string(i) + "]";
      }
    }
  }
  std::cout << "largest |a - b| / (1 + |a|): " << largest << (where.empty() ? "" : " at " + where) << "\n";
  return largest <= tolerance ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "compare") return Compare(argv[2], argv[3], std::strtod(argv[4], nullptr));
  if (argc == 2 && std::string(argv[1]) == "free_port") {
    absl::StatusOr<int> port = kiln::FindFreePort();
    if (!port.ok()) return 1;
    std::cout << *port << "\n";
    return 0;
  }
  if (argc < 2) {
    std::cerr << "usage: fsdp_run OUT [key=value...] | fsdp_run compare A B TOLERANCE\n";
    return 2;
  }
  std::map<std::string, std::string> args = {{"accelerator", "cpu"}, {"strategy", "fsdp"}, {"devices", "2"},  {"sharding", "FULL_SHARD"},
                                             {"policy", "linear"}, {"optimizer", "sgd"}, {"accumulate", "1"},
                                             {"clip", "0"},         {"precision", "32-true"}, {"epochs", "2"},
                                             {"width", "0"},       {"depth", "8"},          {"batches", "0"},
                                             {"offload", "0"},     {"checkpoint", ""},      {"model", "linear"},
                                             {"batch", "8"},       {"nodes", "1"},          {"scale", "0"},
                                             {"prefetch", "1"},    {"save", "0"},           {"resume", ""},
                                             {"state_dict_type", "full"}, {"param_dtype", ""},
                                             {"reduce_dtype", ""},        {"buffer_dtype", ""}};
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t equals = arg.find('=');
    if (equals == std::string::npos || args.count(arg.substr(0, equals)) == 0) {
      std::cerr << "fsdp_run: unknown argument '" << arg << "'\n";
      return 2;
    }
    args[arg.substr(0, equals)] = arg.substr(equals + 1);
  }
  kiln::TrainerOptions options{.accelerator = args["accelerator"],
                               .devices = args["devices"],
                               .strategy = args["strategy"],
                               .precision = args["precision"],
                               .num_nodes = std::stoi(args["nodes"]),
                               .max_epochs = std::stoi(args["epochs"]),
                               .accumulate_grad_batches = std::stoi(args["accumulate"]),
                               .logger = false,
                               .enable_checkpointing = args["save"] == "1",
                               .enable_progress_bar = false,
                               .enable_model_summary = false};
  if (const double clip = std::stod(args["clip"]); clip > 0) options.gradient_clip_val = clip;
  if (args["precision"] == "16-mixed") {
    // No accelerator here runs 16-mixed: a fake one that declares it (CPU devices, Gloo), with trainer_precision_test's
    // stand-in plugin, whose autocast runs bfloat16 while its GradScaler runs for real. scale= sets the scaler's
    // first scale (a large one makes the first steps overflow, and be skipped).
    options.accelerator = std::make_shared<kiln::testing::FakeAccelerator>(kiln::testing::FakeAcceleratorOptions{
        .name = "fp16_chip", .device_count = 4, .process_group_backend = "fakeccl",
        .precisions = {kiln::Precision::k32True, kiln::Precision::k16Mixed}});
    options.process_group_backend = "gloo";
    kiln::GradScalerOptions scaler;
    if (const double scale = std::stod(args["scale"]); scale > 0) scaler.init_scale = scale;
    options.precision_plugin = std::shared_ptr<kiln::MixedPrecision>(
        kiln::MixedPrecision::Create(
            {.precision = kiln::Precision::k16Mixed, .autocast_dtype = at::kBFloat16, .scaler = scaler})
            .value());
  }
  if (args["strategy"] == "fsdp") {
    absl::StatusOr<kiln::ShardingStrategy> sharding = kiln::ParseShardingStrategy(args["sharding"]);
    if (!sharding.ok()) {
      std::cerr << sharding.status() << "\n";
      return 2;
    }
    absl::StatusOr<kiln::StateDictType> state_dict_type = kiln::ParseStateDictType(args["state_dict_type"]);
    if (!state_dict_type.ok()) {
      std::cerr << state_dict_type.status() << "\n";
      return 2;
    }
    kiln::FSDPOptions fsdp{.sharding_strategy = *sharding,
                           .backward_prefetch = args["prefetch"] == "1",
                           .cpu_offload = args["offload"] == "1",
                           .state_dict_type = *state_dict_type};
    if (args["policy"] == "linear") fsdp.auto_wrap_policy.module_types = {"Linear"};
    if (args["policy"] == "size") fsdp.auto_wrap_policy.min_num_params = 100;
    if (args["policy"] == "block") fsdp.auto_wrap_policy.module_types = {"Block"};
    if (args["policy"] == "nested") fsdp.auto_wrap_policy.module_types = {"Block", "Linear"};
    if (!args["checkpoint"].empty()) fsdp.activation_checkpointing_policy = {args["checkpoint"]};
    for (const auto& [name, field] : {std::pair{"param_dtype", &fsdp.mixed_precision.param_dtype},
                                      std::pair{"reduce_dtype", &fsdp.mixed_precision.reduce_dtype},
                                      std::pair{"buffer_dtype", &fsdp.mixed_precision.buffer_dtype}}) {
      if (std::optional<std::string> refused = kiln::SetFsdpField(*field, args[name])) {
        std::cerr << "fsdp_run: " << name << " '" << args[name] << "': " << *refused << "\n";
        return 2;
      }
    }
    options.strategy = std::make_shared<kiln::FSDPStrategy>(fsdp);
  }
  if (const int64_t batches = std::stoll(args["batches"]); batches > 0) options.limit_train_batches = batches;
  auto peak = std::make_shared<PeakMemory>();
  options.callbacks.push_back(peak);
  Net model(args["optimizer"], std::stoll(args["width"]), std::stoll(args["depth"]), args["model"] == "blocks");
  Data data(std::stoll(args["batch"]));
  kiln::Trainer trainer(options);
  if (absl::Status status = trainer.fit(model, data, args["resume"]); !status.ok()) {
    std::cerr << "fsdp_run: " << status << "\n";
    return 1;
  }
  std::ofstream out(std::string(argv[1]) + ".rank" + std::to_string(trainer.local_rank()) + ".txt");
  out << std::hexfloat << "global_step " << trainer.global_step() << "\n";
  if (peak->peak_bytes >= 0) out << "peak_bytes " << peak->peak_bytes << "\n";
  for (const auto& item : model.named_parameters()) {
    const at::Tensor flat = item.value().detach().flatten().contiguous();
    out << item.key();
    for (int64_t i = 0; i < flat.numel(); ++i) out << " " << flat[i].item<float>();
    out << "\n";
  }
  return out.good() ? 0 : 1;
}
