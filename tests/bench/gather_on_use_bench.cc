// What fsdp's gather-on-use trigger (trainer/strategies/gather_on_use.h) costs an operator that needs no gather:
// a forward and backward pass of a small MLP (256 -> 8 x 256 -> 10, batch 32, about 60 operators each way) with the
// trigger installed and every parameter's storage tracked, all of them whole (so every operator goes through the
// fallback, looks its tensors up, finds them ready and runs), against the same pass in raw LibTorch, in the same
// process, interleaved, one thread. Counters: raw_us_per_step, installed_us_per_step, installed_over_raw.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "ATen/ATen.h"
#include "ATen/Parallel.h"
#include "benchmark/benchmark.h"
#include "glog/logging.h"
#include "torch/nn/modules/activation.h"
#include "torch/nn/modules/container/sequential.h"
#include "torch/nn/modules/linear.h"
#include "trainer/strategies/gather_on_use.h"

namespace {

// Every unit is whole: the fallback's lookups succeed and nothing is gathered.
class AllReady final : public kiln::GatherOnUse {
 public:
  bool Ready(int) const override { return true; }
  void Gather(const std::vector<int>&) override { LOG(FATAL) << "nothing should be gathered"; }
};

torch::nn::Sequential Mlp() {
  torch::manual_seed(3);
  torch::nn::Sequential mlp(torch::nn::Linear(256, 256));
  for (int i = 0; i < 7; ++i) {
    mlp->push_back(torch::nn::ReLU());
    mlp->push_back(torch::nn::Linear(256, 256));
  }
  mlp->push_back(torch::nn::ReLU());
  mlp->push_back(torch::nn::Linear(256, 10));
  return mlp;
}

double Pass(torch::nn::Sequential& mlp, const at::Tensor& x) {
  const auto start = std::chrono::steady_clock::now();
  for (at::Tensor& parameter : mlp->parameters()) parameter.mutable_grad() = at::Tensor();
  mlp->forward(x).pow(2).mean().backward();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
}

// The two cases as functions of their own, so that callgrind counts each one's instructions inclusively
// (valgrind --tool=callgrind --toggle-collect='*RawPass*' --toggle-collect='*InstalledPass*', then
// callgrind_annotate --inclusive=yes; KILN_BENCH_ITERATIONS=20 for fewer rounds): docs/performance.md has the figures.
// noipa: without it the compiler folds the two identical functions into one.
__attribute__((noipa)) double RawPass(torch::nn::Sequential& mlp, const at::Tensor& x) { return Pass(mlp, x); }
__attribute__((noipa)) double InstalledPass(torch::nn::Sequential& mlp, const at::Tensor& x) {
  return Pass(mlp, x);
}

void BM_GatherOnUse(benchmark::State& state) {
  at::set_num_threads(1);
  torch::nn::Sequential mlp = Mlp();
  const at::Tensor x = at::randn({32, 256});
  AllReady owner;
  std::vector<double> raw, installed;
  for (auto _ : state) {
    raw.push_back(RawPass(mlp, x));
    {
      auto scope = kiln::GatherOnUseScope::Install(&owner);
      CHECK(scope.ok()) << scope.status();
      int unit = 0;
      for (const at::Tensor& parameter : mlp->parameters()) {
        (*scope)->Track(parameter.storage().unsafeGetStorageImpl(), unit++);
      }
      installed.push_back(InstalledPass(mlp, x));
    }
  }
  const auto median = [](std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
  };
  state.counters["raw_us_per_step"] = median(raw);
  state.counters["installed_us_per_step"] = median(installed);
  state.counters["installed_over_raw"] = median(installed) / median(raw);
}
int64_t Iterations() {
  const char* iterations = std::getenv("KILN_BENCH_ITERATIONS");
  return iterations != nullptr && std::atoi(iterations) > 0 ? std::atoi(iterations) : 300;
}
BENCHMARK(BM_GatherOnUse)->Iterations(Iterations())->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
