// Per-step time of Kiln's Trainer::fit against a hand-written LibTorch loop (zero_grad, forward, loss, backward,
// step), on the same model, data and optimizer, in the same process, interleaved, with one thread.
//
//   tiny:   32 -> 64 -> 1,  batch 64,  MSE, SGD   (framework-bound: overhead shows)
//   medium: 784 -> 512 -> 256 -> 10, batch 128, cross-entropy, Adam (compute-bound)
//   many:   256 -> 24 x 256 -> 10, batch 32, cross-entropy, Adam (50 small parameter tensors: the optimizer's
//           per-tensor work shows)
//
// Two hand-written loops: one steps with torch::optim (raw_us_per_step, kiln_over_raw), the other calls LibTorch's
// fused kernel itself (at::_fused_sgd_ or _fused_adam_ over every parameter, no optimizer object:
// fused_raw_us_per_step, kiln_over_fused_raw), the fastest this step can be on the CPU. Kiln's module steps with
// Kiln's optimizers (kiln::FusedSGD and FusedAdam, which fit's --optimizer uses): LibTorch's fused kernels (counter
// fused = 1 or 0). The *TorchOptim cases give Kiln torch::optim too, so they show the trainer's own overhead.
//
// Each benchmark iteration runs one round: the hand-written loop over `steps` batches, then Trainer::fit over the
// same batches for the same number of epochs (a fresh model and optimizer each, same initial parameters), and
// reports both times and their ratio
// as counters. Kiln's time includes everything fit does per call (plan resolution, set-up, teardown), spread over
// the steps. Configurations: callbacks off (no checkpointing, progress or logger) and Kiln's defaults (progress,
// a logger, checkpointing at the end of the epoch).
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "ATen/Parallel.h"
#include "benchmark/benchmark.h"
#include "tests/bench/fused_loop.h"
#include "tests/bench/scratch_dir.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/activation.h"
#include "torch/nn/modules/container/sequential.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/adam.h"
#include "torch/optim/sgd.h"
#include "torch/utils.h"
#include "trainer/core/logger.h"
#include "trainer/optim/fused_optimizers.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

struct Shape {
  std::vector<int64_t> layers;  // Input, hidden..., output.
  int64_t batch_size;
  bool classification;  // Cross-entropy + Adam, else MSE + SGD.
};

const Shape kTiny{{32, 64, 1}, 64, false};
const Shape kMedium{{784, 512, 256, 10}, 128, true};
const Shape kMany{[] {
                    std::vector<int64_t> layers(25, 256);
                    layers.push_back(10);
                    return layers;
                  }(),
                  32, true};

torch::nn::Sequential MakeNet(const Shape& shape) {
  torch::manual_seed(0);
  torch::nn::Sequential net;
  for (size_t i = 0; i + 1 < shape.layers.size(); ++i) {
    net->push_back(torch::nn::Linear(shape.layers[i], shape.layers[i + 1]));
    if (i + 2 < shape.layers.size()) net->push_back(torch::nn::ReLU());
  }
  return net;
}

std::shared_ptr<torch::optim::Optimizer> MakeOptimizer(const Shape& shape, std::vector<at::Tensor> parameters) {
  if (shape.classification) return std::make_shared<torch::optim::Adam>(parameters, torch::optim::AdamOptions(1e-3));
  return std::make_shared<torch::optim::SGD>(parameters, torch::optim::SGDOptions(1e-2));
}

// The same optimizer and options, as Kiln's: fused where the kernels are (`fused`), else torch::optim's.
std::shared_ptr<torch::optim::Optimizer> KilnOptimizer(const Shape& shape, std::vector<at::Tensor> parameters,
                                                       bool fused) {
  if (!fused) return MakeOptimizer(shape, std::move(parameters));
  if (shape.classification) return std::make_shared<FusedAdam>(parameters, torch::optim::AdamOptions(1e-3));
  return std::make_shared<FusedSGD>(parameters, torch::optim::SGDOptions(1e-2));
}

at::Tensor Loss(const Shape& shape, const at::Tensor& output, const at::Tensor& target) {
  return shape.classification ? torch::nn::functional::cross_entropy(output, target)
                              : torch::nn::functional::mse_loss(output, target);
}

std::vector<Batch> MakeBatches(const Shape& shape, int64_t steps) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(1);
  std::vector<Batch> batches;
  for (int64_t i = 0; i < steps; ++i) {
    at::Tensor input = at::randn({shape.batch_size, shape.layers.front()}, generator);
    at::Tensor target = shape.classification
                            ? at::randint(shape.layers.back(), {shape.batch_size}, generator, at::kLong)
                            : at::randn({shape.batch_size, 1}, generator);
    batches.push_back({input, target});
  }
  return batches;
}

class BatchesLoader final : public DataLoader {
 public:
  explicit BatchesLoader(const std::vector<Batch>* batches) : batches_(batches) {}
  int64_t num_batches() const override { return static_cast<int64_t>(batches_->size()); }
  Batch get_batch(int64_t index) override { return (*batches_)[index]; }

 private:
  const std::vector<Batch>* batches_;
};

class BatchesData final : public DataModule {
 public:
  explicit BatchesData(const std::vector<Batch>* batches) : loader_(std::make_shared<BatchesLoader>(batches)) {}
  std::shared_ptr<DataLoader> train_dataloader() override { return loader_; }

 private:
  std::shared_ptr<BatchesLoader> loader_;
};

class Module final : public LightningModule {
 public:
  explicit Module(const Shape& shape) : shape_(shape), net_(MakeNet(shape)) { register_module("net", net_); }
  at::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    at::Tensor loss = Loss(shape_, net_->forward(batch.input), batch.target);
    if (log_loss) log("train_loss", loss, {.prog_bar = true});
    for (const std::string& name : metric_names) log(name, loss);
    return loss;
  }
  OptimizerConfig configure_optimizers() override {
    OptimizerConfig config;
    config.optimizers.push_back(KilnOptimizer(shape_, parameters(), fused));
    return config;
  }
  bool log_loss = false;
  bool fused = true;
  std::vector<std::string> metric_names;  // More metrics logged every step.

 private:
  Shape shape_;
  torch::nn::Sequential net_;
};

double HandWritten(const Shape& shape, const std::vector<Batch>& batches, int64_t epochs) {
  torch::nn::Sequential net = MakeNet(shape);
  std::shared_ptr<torch::optim::Optimizer> optimizer = MakeOptimizer(shape, net->parameters());
  const auto start = std::chrono::steady_clock::now();
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    for (const Batch& batch : batches) {
      optimizer->zero_grad();
      at::Tensor loss = Loss(shape, net->forward(batch.input), batch.target);
      loss.backward();
      optimizer->step();
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The fused hand-written loop: zero_grad as set_to_none, forward, loss, backward, then LibTorch's fused kernel over
// all parameters (fused_loop.h).
double HandWrittenFused(const Shape& shape, const std::vector<Batch>& batches, int64_t epochs) {
  torch::nn::Sequential net = MakeNet(shape);
  bench::FusedHandWrittenStep optimizer(net->parameters(), /*adam=*/shape.classification);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    for (const Batch& batch : batches) {
      optimizer.ZeroGrad();
      Loss(shape, net->forward(batch.input), batch.target).backward();
      optimizer.Step();
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double WithKiln(const Shape& shape, const std::vector<Batch>& batches, int64_t epochs, bool defaults,
                const std::string& root, int metrics, bool fused) {
  Module module(shape);
  module.fused = fused;
  module.log_loss = defaults;
  for (int i = 0; i < metrics; ++i) module.metric_names.push_back("metric_" + std::to_string(i));
  BatchesData data(&batches);
  TrainerOptions options{
      .accelerator = "cpu", .devices = 1, .max_epochs = epochs, .num_sanity_val_steps = 0, .default_root_dir = root};
  options.enable_checkpointing = defaults;
  options.enable_progress_bar = defaults;
  if (defaults) options.loggers.push_back(std::make_shared<MemoryLogger>());
  Trainer trainer(options);
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = trainer.fit(module, data);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!status.ok()) {
    std::fprintf(stderr, "fit failed: %s\n", std::string(status.message()).c_str());
    std::abort();
  }
  return seconds;
}

void Compare(benchmark::State& state, const Shape& shape, bool defaults, int metrics = 0, bool fused = true) {
  at::set_num_threads(1);
  const int64_t steps = state.range(0);
  const int64_t epochs = state.range(1);
  const std::vector<Batch> batches = MakeBatches(shape, steps);
  // What every side starts from, for tests/bench/python_step.py's fingerprint line, which prints the same two sums
  // (each tensor's sum as a double, added in parameter order): equal sums mean PyTorch's loops start from these
  // parameters and this first batch.
  double init_param_sum = 0;
  for (const at::Tensor& param : MakeNet(shape)->parameters()) init_param_sum += param.sum().item<double>();
  const double first_input_sum = batches.front().input.sum().item<double>();
  const bench::ScratchDir scratch("kiln_step_bench");
  const std::string& root = scratch.path();
  double raw_total = 0;
  double fused_raw_total = 0;
  double kiln_total = 0;
  int round = 0;
  for (auto _ : state) {
    // Rotate which side goes first, so that none always runs on a warmer cache or allocator.
    double raw = 0;
    double fused_raw = 0;
    double kiln = 0;
    for (int turn = 0; turn < 3; ++turn) {
      switch ((round + turn) % 3) {
        case 0:
          raw = HandWritten(shape, batches, epochs);
          break;
        case 1:
          fused_raw = HandWrittenFused(shape, batches, epochs);
          break;
        default:
          kiln = WithKiln(shape, batches, epochs, defaults, root, metrics, fused);
      }
    }
    ++round;
    raw_total += raw;
    fused_raw_total += fused_raw;
    kiln_total += kiln;
    state.SetIterationTime(kiln);
  }
  const double rounds = static_cast<double>(state.iterations());
  state.counters["raw_us_per_step"] = 1e6 * raw_total / rounds / static_cast<double>(steps * epochs);
  state.counters["kiln_us_per_step"] = 1e6 * kiln_total / rounds / static_cast<double>(steps * epochs);
  state.counters["fused_raw_us_per_step"] = 1e6 * fused_raw_total / rounds / static_cast<double>(steps * epochs);
  state.counters["kiln_over_raw"] = kiln_total / raw_total;
  state.counters["kiln_over_fused_raw"] = kiln_total / fused_raw_total;
  state.counters["fused"] = fused ? 1 : 0;
  state.counters["init_param_sum"] = init_param_sum;
  state.counters["first_input_sum"] = first_input_sum;
}

const int64_t kSteps = std::getenv("KILN_BENCH_SMOKE") != nullptr ? 20 : 2000;
const int64_t kMediumSteps = std::getenv("KILN_BENCH_SMOKE") != nullptr ? 5 : 300;
const int64_t kManySteps = std::getenv("KILN_BENCH_SMOKE") != nullptr ? 5 : 500;

void BM_TinyCallbacksOff(benchmark::State& state) { Compare(state, kTiny, false); }
void BM_TinyDefaults(benchmark::State& state) { Compare(state, kTiny, true); }
// Kiln's defaults with 50 more metrics logged every step (the loggers read them every log_every_n_steps).
void BM_TinyDefaults50Metrics(benchmark::State& state) { Compare(state, kTiny, true, 50); }
void BM_TinyTorchOptim(benchmark::State& state) { Compare(state, kTiny, false, 0, /*fused=*/false); }
void BM_MediumCallbacksOff(benchmark::State& state) { Compare(state, kMedium, false); }
void BM_MediumDefaults(benchmark::State& state) { Compare(state, kMedium, true); }
void BM_MediumTorchOptim(benchmark::State& state) { Compare(state, kMedium, false, 0, /*fused=*/false); }
void BM_ManyCallbacksOff(benchmark::State& state) { Compare(state, kMany, false); }
void BM_ManyDefaults(benchmark::State& state) { Compare(state, kMany, true); }
void BM_ManyTorchOptim(benchmark::State& state) { Compare(state, kMany, false, 0, /*fused=*/false); }

// Arguments: steps per epoch, epochs. With Kiln's defaults a checkpoint is written at every epoch end, in the
// background; fit waits for the last one, which is what a short run pays for durability.
const int64_t kEpochs = std::getenv("KILN_BENCH_SMOKE") != nullptr ? 1 : 5;
BENCHMARK(BM_TinyCallbacksOff)->Args({kSteps, kEpochs})->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TinyDefaults)->Args({kSteps, kEpochs})->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TinyDefaults50Metrics)->Args({kSteps, kEpochs})->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TinyTorchOptim)->Args({kSteps, kEpochs})->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MediumCallbacksOff)->Args({kMediumSteps, 1})->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MediumDefaults)->Args({kMediumSteps, 1})->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MediumTorchOptim)->Args({kMediumSteps, 1})->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ManyCallbacksOff)->Args({kManySteps, 1})->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ManyDefaults)->Args({kManySteps, 1})->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ManyTorchOptim)->Args({kManySteps, 1})->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kiln

BENCHMARK_MAIN();
