// Trainer(sync_batchnorm=true) from a user's own program (tests/ddp/sync_batchnorm_fit_test.sh runs it):
//
//   sync_batchnorm_fit train DIR ACCELERATOR DEVICES BATCH SYNC   fit, then write the final parameters and buffers
//       and the run's numbers to DIR/<rank>.txt. The model normalises with a torch::nn::BatchNorm1d inside a
//       torch::nn::Sequential (converted by sync_batchnorm) and with a kiln::SyncBatchNorm it declares itself.
//   sync_batchnorm_fit compare REFERENCE OTHER                    exit 0 when OTHER's values are REFERENCE's within
//       the bound derived below (REFERENCE: one process on the whole batch), 1 otherwise.
//   sync_batchnorm_fit member DIR                                 a BatchNorm held and called as a member, 2
//       processes with sync_batchnorm: fit must fail (exit 2, the error on stderr) and put the BatchNorm back.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "ATen/ATen.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/activation.h"
#include "torch/nn/modules/batchnorm.h"
#include "torch/nn/modules/container/sequential.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/sgd.h"
#include "trainer/kiln.h"

namespace {

constexpr int64_t kExamples = 64;
constexpr double kLearningRate = 0.1;
constexpr double kEps = 1e-5;  // BatchNorm's default.

class Data final : public kiln::DataModule {
 public:
  explicit Data(int64_t batch_size) : batch_size_(batch_size) {}
  std::shared_ptr<kiln::DataLoader> train_dataloader() override {
    at::Generator generator = at::detail::createCPUGenerator(11);
    // Not centred, so that the statistics' formula is tested where it is weakest.
    const at::Tensor inputs = at::randn({kExamples, 6}, generator, at::kFloat) * 2 + 1;
    const at::Tensor targets = at::randint(0, 3, {kExamples}, generator, at::kLong);
    return std::make_shared<kiln::TensorDataLoader>(inputs, targets,
                                                    kiln::TensorDataLoaderOptions{.batch_size = batch_size_});
  }

 private:
  int64_t batch_size_;
};

// The largest condition number (E[h²] + E[h]²) / (var(h) + eps) of a channel of `h` (rows: the batch): how much the
// sums' variance formula amplifies rounding (see Bound).
double Kappa(const at::Tensor& h) {
  const at::Tensor x = h.detach().to(at::kDouble);
  const at::Tensor mean = x.mean(0);
  return (((x * x).mean(0) + mean * mean) / (x.var(0, /*unbiased=*/false) + kEps)).max().item<double>();
}

class Net final : public kiln::LightningModule {
 public:
  Net() {
    torch::manual_seed(7);
    body_ = register_module("body", torch::nn::Sequential(torch::nn::Linear(6, 8), torch::nn::BatchNorm1d(8)));
    hidden_ = register_module("hidden", torch::nn::Linear(8, 5));
    norm_ = register_module("norm", kiln::SyncBatchNorm(torch::nn::BatchNormOptions(5)));
    head_ = register_module("head", torch::nn::Linear(5, 3));
  }
  at::Tensor training_step(const kiln::Batch& batch, int64_t batch_idx) override {
    const at::Tensor first = body_[0]->as<torch::nn::Linear>()->forward(batch.input);
    const at::Tensor h = hidden_(at::tanh(body_->forward(batch.input)));
    kappa = std::max({kappa, Kappa(first), Kappa(h)});
    at::Tensor loss = torch::nn::functional::cross_entropy(head_(at::tanh(norm_(h))), batch.target);
    log("train_loss", loss);
    return loss;
  }
  void on_after_backward() override {
    for (const at::Tensor& p : parameters()) {
      if (p.grad().defined()) largest_gradient = std::max(largest_gradient, p.grad().abs().max().item<double>());
    }
  }
  kiln::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(kLearningRate));
  }

  double kappa = 0;             // The largest of every step's normalised input (Kappa).
  double largest_gradient = 0;  // After the reduction.

 private:
  torch::nn::Sequential body_{nullptr};
  torch::nn::Linear hidden_{nullptr};
  kiln::SyncBatchNorm norm_{nullptr};
  torch::nn::Linear head_{nullptr};
};

// A BatchNorm held as a member and called directly: sync_batchnorm cannot reach it.
class MemberNet final : public kiln::LightningModule {
 public:
  MemberNet() {
    linear_ = register_module("linear", torch::nn::Linear(6, 4));
    bn_ = register_module("bn", torch::nn::BatchNorm1d(4));
    head_ = register_module("head", torch::nn::Linear(4, 3));
  }
  at::Tensor training_step(const kiln::Batch& batch, int64_t batch_idx) override {
    return torch::nn::functional::cross_entropy(head_(bn_(linear_(batch.input))), batch.target);
  }
  kiln::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(kLearningRate));
  }

 private:
  torch::nn::Linear linear_{nullptr};
  torch::nn::BatchNorm1d bn_{nullptr};
  torch::nn::Linear head_{nullptr};
};

kiln::TrainerOptions Options(const std::string& dir, const std::string& accelerator, int devices, bool sync) {
  return {.accelerator = accelerator,
          .devices = devices,
          .strategy = devices > 1 ? "ddp" : "auto",
          .precision = "64-true",
          .sync_batchnorm = sync,
          .max_epochs = 1,
          .default_root_dir = dir,
          .logger = false,
          .enable_checkpointing = false,
          .enable_progress_bar = false,
          .enable_model_summary = false};
}

int Train(const std::string& dir, const std::string& accelerator, int devices, int64_t batch_size, bool sync) {
  Net model;
  Data data(batch_size);
  kiln::Trainer trainer(Options(dir, accelerator, devices, sync));
  if (absl::Status status = trainer.fit(model, data); !status.ok()) {
    std::cerr << "sync_batchnorm_fit: " << status << "\n";
    return 1;
  }
  // After fit, sync_batchnorm has put the BatchNorm back (Lightning's revert).
  if (!model.named_modules("", /*include_self=*/false)["body.1"]->as<torch::nn::BatchNorm1d>()) {
    std::cerr << "sync_batchnorm_fit: body.1 is not a BatchNorm1d after fit\n";
    return 1;
  }
  std::cout << "rank " << trainer.global_rank() << " trained on " << trainer.strategy()->root_device() << std::endl;
  std::ofstream out(dir + "/" + std::to_string(trainer.global_rank()) + ".txt");
  out << std::hexfloat << "steps " << trainer.global_step() << "\nkappa " << model.kappa << "\nlargest_gradient "
      << model.largest_gradient << "\n";
  for (const auto& item : model.named_parameters()) {
    const at::Tensor flat = item.value().detach().flatten().to(at::kDouble).contiguous();
    for (int64_t i = 0; i < flat.numel(); ++i) out << item.key() << " " << flat[i].item<double>() << "\n";
  }
  for (const auto& item : model.named_buffers()) {
    const at::Tensor flat = item.value().detach().flatten().to(at::kDouble).contiguous();
    for (int64_t i = 0; i < flat.numel(); ++i) out << item.key() << " " << flat[i].item<double>() << "\n";
  }
  return out.good() ? 0 : 1;
}

struct Values {
  std::map<std::string, double> numbers;
  std::vector<std::pair<std::string, double>> state;
};

Values Read(const std::string& path) {
  Values values;
  std::ifstream in(path);
  std::string name, text;
  while (in >> name >> text) {
    const double value = std::strtod(text.c_str(), nullptr);
    if (name == "steps" || name == "kappa" || name == "largest_gradient") {
      values.numbers[name] = value;
    } else {
      values.state.emplace_back(name, value);
    }
  }
  return values;
}

// The bound on the distance between the 2-process run and one process on the whole batch, both in float64 (64-true).
// Their only difference is rounding: the global batch's statistics from the ranks' sums (E[x²] − E[x]²) against
// LibTorch's kernel over the whole batch, and the gradients averaged over two processes. As
// tests/ddp/sync_batch_norm_test.cc derives, one normalisation's output and its backward are within 8·2·n·u·κ
// relative (n values per channel, u the unit roundoff, κ the condition number of the variance formula, Kappa); one
// SGD step moves a parameter by lr times a gradient that is off by that much relative, and a running statistic by
// that much; over S steps those add up, and what a step's error does to the next (the model's sensitivity, lr·|H|
// for SGD) at most doubles it: 2·S·16·n·u·κ·max(1, largest gradient, largest value).
double Bound(const Values& reference, int64_t n) {
  const double u = std::numeric_limits<double>::epsilon() / 2;
  double largest = 1;
  for (const auto& [name, value] : reference.state) largest = std::max(largest, std::abs(value));
  largest = std::max(largest, reference.numbers.at("largest_gradient"));
  return 2 * reference.numbers.at("steps") * 16 * static_cast<double>(n) * u * reference.numbers.at("kappa") * largest;
}

int Compare(const std::string& reference_path, const std::string& other_path) {
  const Values reference = Read(reference_path);
  const Values other = Read(other_path);
  if (reference.state.empty() || other.state.size() != reference.state.size() ||
      other.numbers.at("steps") != reference.numbers.at("steps")) {
    std::cerr << "compare: " << other_path << " has " << other.state.size() << " values after "
              << (other.numbers.count("steps") ? other.numbers.at("steps") : -1) << " steps, " << reference_path
              << " " << reference.state.size() << "\n";
    return 1;
  }
  const double bound = Bound(reference, /*n=*/kExamples / reference.numbers.at("steps"));
  double worst = 0;
  std::string worst_name;
  for (size_t i = 0; i < reference.state.size(); ++i) {
    const double difference = std::abs(other.state[i].second - reference.state[i].second);
    if (other.state[i].first != reference.state[i].first) {
      std::cerr << "compare: value " << i << " is " << other.state[i].first << ", not " << reference.state[i].first
                << "\n";
      return 1;
    }
    if (difference > worst) {
      worst = difference;
      worst_name = reference.state[i].first;
    }
  }
  std::cout << "largest difference " << worst << " (" << worst_name << "), bound " << bound << "\n";
  return worst <= bound ? 0 : 1;
}

int Member(const std::string& dir) {
  MemberNet model;
  Data data(8);
  kiln::Trainer trainer(Options(dir, "cpu", 2, /*sync=*/true));
  const absl::Status status = trainer.fit(model, data);
  if (!model.named_children()["bn"]->as<torch::nn::BatchNorm1d>()) {
    std::cerr << "member: the BatchNorm was not put back after fit failed\n";
    return 1;
  }
  if (status.ok()) {
    std::cerr << "member: fit succeeded with a BatchNorm called as a member\n";
    return 0;
  }
  std::cerr << "member: " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc >= 2 ? argv[1] : "";
  if (mode == "train" && argc == 7) {
    return Train(argv[2], argv[3], std::atoi(argv[4]), std::atoll(argv[5]), std::string(argv[6]) == "true");
  }
  if (mode == "compare" && argc == 4) return Compare(argv[2], argv[3]);
  if (mode == "member" && argc == 3) return Member(argv[2]);
  std::cerr << "usage: sync_batchnorm_fit train DIR ACCELERATOR DEVICES BATCH true|false\n"
               "       sync_batchnorm_fit compare REFERENCE OTHER\n"
               "       sync_batchnorm_fit member DIR\n";
  return 64;
}
