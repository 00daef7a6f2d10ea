// A user's own program on several processes, as a Lightning user writes one: a sequence of entry points (fit,
// validate, test, predict) on one Trainer or several, with the rank API read before and after them. The processes
// are launched once, at the first entry point, and every later one meets them again.
//
//   entry_points DIR ACCELERATOR DEVICES SEQUENCE [SEQUENCE_OF_THE_LAST_RANK]
//
// SEQUENCE: entry points separated by commas (fit, validate, test, predict); "new" starts a new Trainer for the
// entry points after it; "sleep" sleeps 10 minutes (a rank busy elsewhere). ENTRY_POINTS_TIMEOUT_S sets the
// process-group timeout (30 s by default). The last rank (global rank world_size - 1) runs SEQUENCE_OF_THE_LAST_RANK when given, so that
// tests/ddp/entry_points_test.sh can make the ranks disagree. Each rank writes DIR/rank<R>.txt: the rank API's values,
// then one line per entry point with what it returned (hexadecimal floats), then the final parameters. An entry point
// that fails prints "rank R: ENTRY: error" on standard error, and the program exits 1.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/sgd.h"
#include "trainer/kiln.h"

namespace {

// 3 classes in 8 dimensions, class k shifted along feature k: 256 examples to train on, 96 to evaluate on.
class Blobs final : public kiln::DataModule {
 public:
  void setup(kiln::Stage) override {
    if (inputs_.defined()) return;
    at::Generator generator = at::detail::createCPUGenerator(3);
    targets_ = at::randint(0, 3, {352}, generator, at::kLong);
    inputs_ = at::randn({352, 8}, generator, at::kFloat) + at::one_hot(targets_, 8).to(at::kFloat) * 2;
  }
  std::shared_ptr<kiln::DataLoader> train_dataloader() override {
    return std::make_shared<kiln::TensorDataLoader>(inputs_.slice(0, 0, 256), targets_.slice(0, 0, 256),
                                                    kiln::TensorDataLoaderOptions{.batch_size = 16, .shuffle = true});
  }
  std::shared_ptr<kiln::DataLoader> val_dataloader() override { return Evaluation(); }
  std::shared_ptr<kiln::DataLoader> test_dataloader() override { return Evaluation(); }
  std::shared_ptr<kiln::DataLoader> predict_dataloader() override { return Evaluation(); }

 private:
  std::shared_ptr<kiln::DataLoader> Evaluation() {
    return std::make_shared<kiln::TensorDataLoader>(inputs_.slice(0, 256), targets_.slice(0, 256),
                                                    kiln::TensorDataLoaderOptions{.batch_size = 12});
  }
  at::Tensor inputs_, targets_;
};

class Net final : public kiln::LightningModule {
 public:
  Net() {
    torch::manual_seed(5);
    hidden_ = register_module("hidden", torch::nn::Linear(8, 16));
    head_ = register_module("head", torch::nn::Linear(16, 3));
  }
  at::Tensor training_step(const kiln::Batch& batch, int64_t batch_idx) override {
    if (batch_idx == 0) seen_ranks = absl::StrFormat("%d %d", global_rank(), local_rank());
    at::Tensor loss = torch::nn::functional::cross_entropy(Forward(batch.input), batch.target);
    log("train_loss", loss);
    return loss;
  }
  void validation_step(const kiln::Batch& batch, int64_t) override { Evaluate(batch, "val"); }
  void test_step(const kiln::Batch& batch, int64_t) override { Evaluate(batch, "test"); }
  at::Tensor predict_step(const kiln::Batch& batch, int64_t) override { return Forward(batch.input); }
  kiln::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
  }
  // Lightning calls the checkpoint hooks on every rank (only rank zero writes the file).
  void on_save_checkpoint(c10::impl::GenericDict& checkpoint) override {
    ++saves;
    checkpoint.insert("saved_by_rank", static_cast<int64_t>(global_rank()));
  }

  std::string seen_ranks = "none";  // global_rank() and local_rank() as training_step saw them.
  int saves = 0;

 private:
  at::Tensor Forward(const at::Tensor& input) { return head_->forward(at::tanh(hidden_->forward(input))); }
  void Evaluate(const kiln::Batch& batch, const std::string& stage) {
    const at::Tensor logits = Forward(batch.input);
    log(stage + "_loss", torch::nn::functional::cross_entropy(logits, batch.target), {.sync_dist = true});
    log(stage + "_acc", logits.argmax(1).eq(batch.target).to(at::kFloat).mean(), {.sync_dist = true});
  }
  torch::nn::Linear hidden_{nullptr};
  torch::nn::Linear head_{nullptr};
};

std::string Hex(double value) { return absl::StrFormat("%a", value); }

int Timeout() {
  const char* seconds = std::getenv("ENTRY_POINTS_TIMEOUT_S");
  return seconds != nullptr ? std::atoi(seconds) : 30;
}

std::unique_ptr<kiln::Trainer> NewTrainer(const std::string& dir, const std::string& accelerator,
                                          const std::string& devices) {
  return std::make_unique<kiln::Trainer>(kiln::TrainerOptions{.accelerator = accelerator,
                                                              .devices = devices,
                                                              .process_group_timeout = absl::Seconds(Timeout()),
                                                              .max_epochs = 2,
                                                              .num_sanity_val_steps = 0,
                                                              .default_root_dir = dir,
                                                              .logger = false,
                                                              .enable_progress_bar = false,
                                                              .enable_model_summary = false});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::cerr << "usage: entry_points DIR ACCELERATOR DEVICES SEQUENCE [SEQUENCE_OF_THE_LAST_RANK]\n";
    return 2;
  }
  const std::string dir = argv[1], accelerator = argv[2], devices = argv[3];
  Net model;
  Blobs data;
  std::unique_ptr<kiln::Trainer> trainer = NewTrainer(dir, accelerator, devices);
  // The rank API answers before the first entry point: this process's place among the processes to come.
  const int rank = trainer->global_rank();
  const bool last = rank == trainer->world_size() - 1;
  std::vector<std::string> lines = {absl::StrFormat("before global=%d local=%d node=%d world=%d zero=%d", rank,
                                                    trainer->local_rank(), trainer->node_rank(),
                                                    trainer->world_size(), trainer->is_global_zero())};
  const std::string sequence = argc == 6 && last ? argv[5] : argv[4];
  for (const std::string& entry : std::vector<std::string>(absl::StrSplit(sequence, ','))) {
    absl::Status status = absl::OkStatus();
    std::string line = entry;
    if (entry == "new" || entry == "sleep") {
      if (entry == "new") trainer = NewTrainer(dir, accelerator, devices);
      if (entry == "sleep") absl::SleepFor(absl::Minutes(10));
      lines.push_back(line);
      continue;
    } else if (entry == "fit") {
      status = trainer->fit(model, data);
      line += absl::StrFormat(" global_step=%d", trainer->global_step());
    } else if (entry == "validate" || entry == "test") {
      absl::StatusOr<kiln::MetricMap> metrics =
          entry == "validate" ? trainer->validate(model, data) : trainer->test(model, data);
      status = metrics.status();
      if (metrics.ok()) {
        for (const auto& [name, value] : *metrics) line += " " + name + "=" + Hex(value);
      }
    } else if (entry == "predict") {
      absl::StatusOr<std::vector<at::Tensor>> predictions = trainer->predict(model, data);
      status = predictions.status();
      if (predictions.ok()) {
        const at::Tensor all = at::cat(*predictions).to(at::kDouble);
        line += absl::StrFormat(" rows=%d sum=%s", all.size(0), Hex(all.sum().item<double>()));
      }
    } else {
      std::cerr << "entry_points: unknown entry point '" << entry << "'; fit, validate, test, predict, new or sleep\n";
      return 2;
    }
    if (!status.ok()) {
      std::cerr << "rank " << rank << ": " << entry << ": " << status << "\n";
      return 1;
    }
    lines.push_back(line);
  }
  lines.push_back(absl::StrFormat("after global=%d local=%d node=%d world=%d zero=%d", trainer->global_rank(),
                                  trainer->local_rank(), trainer->node_rank(), trainer->world_size(),
                                  trainer->is_global_zero()));
  lines.push_back("training_step saw global, local " + model.seen_ranks);
  lines.push_back(absl::StrFormat("on_save_checkpoint %d", model.saves));
  std::ofstream out(absl::StrFormat("%s/rank%d.txt", dir, rank));
  for (const std::string& line : lines) out << line << "\n";
  for (const at::Tensor& parameter : model.parameters()) {
    const at::Tensor flat = parameter.detach().flatten().to(at::kDouble).contiguous();
    for (int64_t i = 0; i < flat.numel(); ++i) out << Hex(flat[i].item<double>()) << "\n";
  }
  return out.good() ? 0 : 1;
}
