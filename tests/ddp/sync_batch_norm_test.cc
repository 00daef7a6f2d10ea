// kiln::SyncBatchNorm in a user's own program on 2 real processes (c10d over Kiln's Gloo backend, the HAL's
// MakeGlooCollectiveBackend): each process normalises its part of a batch, and together they equal one process
// normalising the whole batch with LibTorch's own torch::nn::BatchNorm: the outputs, the input gradients, the
// parameter gradients (summed over the processes), and after several steps the running statistics; in eval mode
// both normalise with those running statistics; without a group it is torch::nn::BatchNorm bit for bit. Each rank
// checks its own part against the whole batch it makes itself (the data come from seeded generators), within the
// bound Tolerance derives, and exits non-zero when a check fails.
//
//   sync_batch_norm_test            runs the checks on 2 processes (itself, started twice)
//   sync_batch_norm_test RANK PORT  one rank of them
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "hal/collectives.h"
#include "hal/testing/rank_runner.h"
#include "torch/csrc/distributed/c10d/PrefixStore.hpp"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"
#include "torch/csrc/distributed/c10d/TCPStore.hpp"
#include "torch/nn/modules/batchnorm.h"
#include "trainer/core/sync_batch_norm.h"

namespace {

constexpr int kWorld = 2;
int failures = 0;

#define CHECK_OR_COUNT(condition, what)                                    \
  do {                                                                     \
    if (!(condition)) {                                                    \
      std::cerr << "rank " << rank << ": FAILED: " << what << std::endl;   \
      ++failures;                                                          \
    }                                                                      \
  } while (0)

c10::intrusive_ptr<c10d::ProcessGroup> JoinGroup(int rank, int port) {
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(port);
  store_options.isServer = rank == 0;
  store_options.numWorkers = kWorld;
  store_options.timeout = std::chrono::seconds(60);
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);
  kiln::CollectiveOptions options;
  options.store = c10::make_intrusive<c10d::PrefixStore>("gloo", store);
  options.rank = rank;
  options.world_size = kWorld;
  options.timeout = std::chrono::seconds(60);
  options.host_endpoints.push_back({.is_interface = false, .name = "127.0.0.1"});
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> backend = kiln::MakeGlooCollectiveBackend(options);
  if (!backend.ok()) {
    std::cerr << "rank " << rank << ": " << backend.status() << std::endl;
    std::exit(1);
  }
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, kWorld);
  group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, *backend);
  group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  return group;
}

at::Tensor SumOverRanks(const at::Tensor& value, const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  std::vector<at::Tensor> tensors = {value.detach().clone()};
  group->allreduce(tensors)->wait();
  return tensors[0];
}

// How far the synchronised layer may be from LibTorch's BatchNorm on the whole batch, derived from how each
// computes: the reference takes the mean and variance of the n values of a channel with its own kernel, the layer
// from the sums Σx and Σx² (E[x²] − E[x]²). A sum of n terms in floating point is within (n−1)·u·Σ|terms| of the
// exact one (u the unit roundoff; Higham, "Accuracy and Stability of Numerical Algorithms", §4.2), so each side's
// mean is within n·u·E|x| and its variance within 3·n·u·(E[x²] + E[x]²) (the two sums and the subtraction). The
// normalised value (x − mean)/sqrt(var + eps) then moves by at most n·u·κ relative, where κ = (E[x²] + E[x]²) /
// (var + eps) is the condition number of that variance; twice that (both sides err) times the 3 of the variance and
// the 1 of the mean, 8, bounds the difference of two outputs of magnitude `magnitude`. A backward pass sums over the
// same n values again (×2), and `steps` steps of running statistics add up.
double Tolerance(const at::Tensor& whole_batch, at::ScalarType type, double magnitude, double passes, double eps) {
  const double u = type == at::kDouble ? std::numeric_limits<double>::epsilon() / 2
                                       : std::numeric_limits<float>::epsilon() / 2;
  const at::Tensor x = whole_batch.to(at::kDouble).transpose(0, 1).reshape({whole_batch.size(1), -1});
  const double n = static_cast<double>(x.size(1));
  const at::Tensor mean = x.mean(1);
  const at::Tensor kappa = ((x * x).mean(1) + mean * mean) / (x.var(1, /*unbiased=*/false) + eps);
  return 8 * passes * n * u * kappa.max().item<double>() * std::max(1.0, magnitude);
}

double MaxAbs(const at::Tensor& t) { return t.abs().max().item<double>(); }
double MaxDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

struct Case {
  std::string name;
  std::vector<int64_t> shape;   // The whole batch's.
  std::vector<int64_t> split;   // Each rank's rows.
  std::optional<double> momentum;
  at::ScalarType type;
};

// Steps of training on both sides, then eval: every check of one case.
void RunCase(int rank, const Case& c, const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  constexpr int kSteps = 3;
  const int64_t channels = c.shape[1];
  torch::nn::BatchNormOptions options = torch::nn::BatchNormOptions(channels).momentum(c.momentum);
  // The reference: LibTorch's BatchNorm of the input's rank; the layer: kiln::SyncBatchNorm, the same weights.
  std::shared_ptr<torch::nn::Module> reference_module;
  std::function<at::Tensor(const at::Tensor&)> reference;
  if (c.shape.size() == 2) {
    auto bn = std::make_shared<torch::nn::BatchNorm1dImpl>(options);
    reference_module = bn;
    reference = [bn](const at::Tensor& x) { return bn->forward(x); };
  } else {
    auto bn = std::make_shared<torch::nn::BatchNorm2dImpl>(options);
    reference_module = bn;
    reference = [bn](const at::Tensor& x) { return bn->forward(x); };
  }
  kiln::SyncBatchNorm layer(options);
  at::manual_seed(5);
  {
    at::NoGradGuard no_grad;
    const at::Tensor weight = at::rand({channels}) + 0.5;
    const at::Tensor bias = at::randn({channels});
    for (auto* module : {reference_module.get(), static_cast<torch::nn::Module*>(layer.ptr().get())}) {
      module->named_parameters()["weight"].copy_(weight);
      module->named_parameters()["bias"].copy_(bias);
    }
  }
  reference_module->to(c.type);
  layer->to(c.type);
  layer->set_process_group(group);
  const int64_t begin = rank == 0 ? 0 : c.split[0];
  const int64_t rows = c.split[rank];

  at::Tensor last_batch;
  for (int step = 0; step < kSteps; ++step) {
    at::manual_seed(100 + step);
    // Not centred, so that the sums' formula is tested where it is weakest.
    const at::Tensor batch = (at::randn(c.shape) * 2 + 3).to(c.type);
    const at::Tensor upstream = at::randn(c.shape).to(c.type);
    last_batch = batch;
    reference_module->zero_grad();
    layer->zero_grad();
    const at::Tensor whole = batch.clone().requires_grad_(true);
    const at::Tensor expected = reference(whole);
    (expected * upstream).sum().backward();
    const at::Tensor part = batch.narrow(0, begin, rows).clone().requires_grad_(true);
    const at::Tensor got = layer(part);
    (got * upstream.narrow(0, begin, rows)).sum().backward();

    const std::string where = c.name + " step " + std::to_string(step) + ": ";
    const at::Tensor expected_part = expected.detach().narrow(0, begin, rows);
    const double out_bound = Tolerance(batch, c.type, MaxAbs(expected_part), 1, options.eps());
    CHECK_OR_COUNT(MaxDiff(got, expected_part) <= out_bound,
                   where << "output differs from the whole batch's by " << MaxDiff(got, expected_part) << " > "
                         << out_bound);
    const at::Tensor expected_grad = whole.grad().narrow(0, begin, rows);
    const double grad_bound = Tolerance(batch, c.type, MaxAbs(expected_grad), 2, options.eps());
    CHECK_OR_COUNT(MaxDiff(part.grad(), expected_grad) <= grad_bound,
                   where << "input gradient differs by " << MaxDiff(part.grad(), expected_grad) << " > "
                         << grad_bound);
    for (const char* name : {"weight", "bias"}) {
      const at::Tensor expected_param_grad = reference_module->named_parameters()[name].grad();
      const at::Tensor summed = SumOverRanks(layer->named_parameters()[name].grad(), group);
      const double bound = Tolerance(batch, c.type, MaxAbs(expected_param_grad), 2, options.eps());
      CHECK_OR_COUNT(MaxDiff(summed, expected_param_grad) <= bound,
                     where << name << "'s gradient summed over the ranks differs by "
                           << MaxDiff(summed, expected_param_grad) << " > " << bound);
    }
  }
  // The running statistics: PyTorch's update with the whole batch's mean and unbiased variance, every step.
  for (const char* name : {"running_mean", "running_var"}) {
    const at::Tensor expected = reference_module->named_buffers()[name];
    const double bound = Tolerance(last_batch, c.type, MaxAbs(expected), kSteps, options.eps());
    CHECK_OR_COUNT(MaxDiff(layer->named_buffers()[name], expected) <= bound,
                   c.name << ": " << name << " differs by " << MaxDiff(layer->named_buffers()[name], expected)
                          << " > " << bound);
  }
  CHECK_OR_COUNT(layer->num_batches_tracked.item<int64_t>() == kSteps,
                 c.name << ": num_batches_tracked is " << layer->num_batches_tracked.item<int64_t>());

  // Eval: the running statistics, on each part alone, with no collective (rank 1 evaluates twice and rank 0 once:
  // a collective there would wait for a peer that never comes, and fail).
  // BatchNorm's eval with the layer's running statistics (equal to its own within the bound above) is the layer's.
  reference_module->eval();
  layer->eval();
  {
    at::NoGradGuard no_grad;
    for (const char* name : {"running_mean", "running_var"}) {
      reference_module->named_buffers()[name].copy_(layer->named_buffers()[name]);
    }
  }
  for (int i = 0; i <= rank; ++i) {
    at::NoGradGuard no_grad;
    const at::Tensor part = last_batch.narrow(0, begin, rows);
    const at::Tensor got = layer(part);
    const at::Tensor expected = reference(last_batch).narrow(0, begin, rows);
    CHECK_OR_COUNT(at::equal(got, expected), c.name << ": eval output differs from BatchNorm's by "
                                                    << MaxDiff(got, expected));
    const std::vector<int64_t> shape = c.shape.size() == 2 ? std::vector<int64_t>{1, channels}
                                                            : std::vector<int64_t>{1, channels, 1, 1};
    const at::Tensor scale = at::rsqrt(layer->running_var.view(shape) + options.eps()) * layer->weight.view(shape);
    const at::Tensor by_hand = (part - layer->running_mean.view(shape)) * scale + layer->bias.view(shape);
    // A few roundings of each term: the bound is relative to the terms' size, not the result's.
    const double terms = MaxAbs(part * scale) + MaxAbs(layer->running_mean.view(shape) * scale) + MaxAbs(layer->bias);
    const double bound = 4 * (c.type == at::kDouble ? std::numeric_limits<double>::epsilon()
                                                    : std::numeric_limits<float>::epsilon()) * terms;
    CHECK_OR_COUNT(MaxDiff(got, by_hand) <= bound,
                   c.name << ": eval output is not normalised with the running statistics (off by "
                          << MaxDiff(got, by_hand) << " > " << bound << ")");
  }
}

// Without a group, and in eval mode, the layer is torch::nn::BatchNorm2d, bit for bit, and so is its state dict.
void CheckAlone(int rank) {
  torch::nn::BatchNorm2d reference(torch::nn::BatchNorm2dOptions(3).momentum(std::nullopt));
  kiln::SyncBatchNorm layer(torch::nn::BatchNormOptions(3).momentum(std::nullopt));
  std::vector<std::string> reference_names, names;
  for (const auto& item : reference->named_parameters()) reference_names.push_back(item.key());
  for (const auto& item : reference->named_buffers()) reference_names.push_back(item.key());
  for (const auto& item : layer->named_parameters()) names.push_back(item.key());
  for (const auto& item : layer->named_buffers()) names.push_back(item.key());
  CHECK_OR_COUNT(names == reference_names, "the layer's parameters and buffers are not BatchNorm's");
  for (int step = 0; step < 2; ++step) {
    at::manual_seed(step);
    const at::Tensor batch = at::randn({4, 3, 2, 2}) + 1;
    const at::Tensor expected = reference(batch);
    const at::Tensor got = layer(batch);
    CHECK_OR_COUNT(at::equal(got, expected), "without a group, training output differs from BatchNorm2d's");
  }
  CHECK_OR_COUNT(at::equal(layer->running_var, reference->running_var) &&
                     at::equal(layer->running_mean, reference->running_mean),
                 "without a group, the running statistics differ from BatchNorm2d's");
}

int RunRank(int rank, int port) {
  const c10::intrusive_ptr<c10d::ProcessGroup> group = JoinGroup(rank, port);
  for (const Case& c : std::vector<Case>{
           {"2d, halves, double", {8, 3, 4, 5}, {4, 4}, 0.1, at::kDouble},
           {"2d, 5 and 3 rows, float", {8, 3, 4, 5}, {5, 3}, 0.1, at::kFloat},
           {"1d, halves, cumulative average, float", {16, 4}, {8, 8}, std::nullopt, at::kFloat},
           {"1d, 7 and 9 rows, double", {16, 4}, {7, 9}, 0.3, at::kDouble},
       }) {
    RunCase(rank, c, group);
  }
  CheckAlone(rank);
  if (failures == 0) std::cout << "rank " << rank << ": every check passed" << std::endl;
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3) return RunRank(std::atoi(argv[1]), std::atoi(argv[2]));
  const std::string self = kiln::testing::ThisProgram(argv[0]);
  const std::string port = std::to_string(kiln::testing::FreeLoopbackPort());
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::vector<kiln::testing::RankRun> runs =
      kiln::testing::RunRanks({{self, "0", port}, {self, "1", port}},
                              std::string(tmp != nullptr ? tmp : "/tmp") + "/sync_batch_norm",
                              kiln::testing::TestTimeoutSeconds() * 0.8);
  int failed = 0;
  for (size_t r = 0; r < runs.size(); ++r) {
    std::cout << "== rank " << r << " (status " << runs[r].status << ")\n" << kiln::testing::RankOutput(runs[r]) << "\n";
    if (runs[r].status != 0) failed = 1;
  }
  std::cout << (failed ? "FAIL" : "PASS: 2 processes with parts of a batch equal one with the whole batch") << std::endl;
  return failed;
}
