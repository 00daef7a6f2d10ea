// The data pipeline against the training step's consumption, in one process: how many examples per second the CSV
// loader parses, and the prefetching loader delivers as batches, compared with how many the medium MLP
// (784 -> 512 -> 256 -> 10, batch 128, Adam, one thread) trains on per second. A ratio above 1 means the device
// never waits for data, even if the whole file had to be parsed again every epoch.
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#include "ATen/ATen.h"
#include "ATen/Parallel.h"
#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/activation.h"
#include "torch/nn/modules/container/sequential.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/adam.h"
#include "trainer/data/csv_table.h"
#include "trainer/data/prefetching_data_loader.h"
#include "trainer/core/data_loader.h"

namespace kiln {
namespace {

constexpr int64_t kFeatures = 784;
constexpr int64_t kBatch = 128;
const int64_t kRows = std::getenv("KILN_BENCH_SMOKE") != nullptr ? 512 : 8192;

const std::string& CsvText() {
  static const std::string* text = [] {
    auto* out = new std::string;
    at::Tensor values = at::rand({kRows, kFeatures});
    const float* data = values.data_ptr<float>();
    for (int64_t c = 0; c < kFeatures; ++c) absl::StrAppend(out, "f", c, ",");
    absl::StrAppend(out, "label\n");
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t c = 0; c < kFeatures; ++c) absl::StrAppend(out, data[r * kFeatures + c], ",");
      absl::StrAppend(out, r % 10, "\n");
    }
    return out;
  }();
  return *text;
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Examples per second the training step consumes (medium MLP, one thread).
double ConsumptionRate() {
  static const double rate = [] {
    at::set_num_threads(1);
    torch::nn::Sequential net{torch::nn::Linear(kFeatures, 512), torch::nn::ReLU(), torch::nn::Linear(512, 256),
                              torch::nn::ReLU(), torch::nn::Linear(256, 10)};
    torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(1e-3));
    const at::Tensor input = at::randn({kBatch, kFeatures});
    const at::Tensor target = at::randint(10, {kBatch});
    const int steps = std::getenv("KILN_BENCH_SMOKE") != nullptr ? 3 : 50;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) {
      adam.zero_grad();
      torch::nn::functional::cross_entropy(net->forward(input), target).backward();
      adam.step();
    }
    return static_cast<double>(steps * kBatch) / Seconds(start);
  }();
  return rate;
}

void BM_CsvParse(benchmark::State& state) {
  const std::string& text = CsvText();
  CsvReadOptions options;
  options.num_threads = static_cast<int>(state.range(0));
  for (auto _ : state) {
    absl::StatusOr<CsvTable> table = ParseCsv(text, "bench.csv", options);
    if (!table.ok()) state.SkipWithError(std::string(table.status().message()).c_str());
    benchmark::DoNotOptimize(table);
  }
  state.SetItemsProcessed(state.iterations() * kRows);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(text.size()));
  state.counters["train_examples_per_s"] = ConsumptionRate();
}

void BM_PrefetchedBatches(benchmark::State& state) {
  at::Tensor inputs = at::rand({kRows, kFeatures});
  at::Tensor targets = at::randint(10, {kRows});
  auto loader = std::make_shared<PrefetchingDataLoader>(
      std::make_shared<TensorDataLoader>(inputs, targets, TensorDataLoaderOptions{kBatch, true, false, 1}),
      /*depth=*/4);
  int64_t epoch = 0;
  for (auto _ : state) {
    loader->set_epoch(epoch++);
    for (int64_t i = 0; i < loader->num_batches(); ++i) benchmark::DoNotOptimize(loader->get_batch(i));
  }
  state.SetItemsProcessed(state.iterations() * kRows);
  state.counters["train_examples_per_s"] = ConsumptionRate();
}

BENCHMARK(BM_CsvParse)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PrefetchedBatches)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kiln

BENCHMARK_MAIN();
