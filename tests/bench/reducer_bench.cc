// DDP's gradient engine against the hand-written c10d loop: the backward pass of one data-parallel step with 2
// processes on Gloo over loopback, its gradients averaged by
//   pytorch  PyTorch's own reducer (c10d::Reducer through hal/compat/c10d.h's MakeReducer: what DDPStrategy uses):
//            buckets whose all-reduces start during backward, rebuilt in gradient order after the first step;
//   manual   the hand-written c10d loop: backward, then one all-reduce of all gradients flattened, then the division
//            (no overlap: the baseline).
// (Kiln's own bucketed reducer, written when Kiln also built against LibTorch 1.13, was measured here against
// c10d::Reducer before it was removed: docs/performance.md.)
// Each engine runs `steps` steps per round and the rounds interleave the engines (pytorch, manual, pytorch...), so
// that a slower moment of this shared machine falls on both. Rank 1 is a forked process running the same
// rounds; rank 0 reports. Counters: each engine's milliseconds per step (median over rounds) and their ratios.
//
//   bazel run -c opt //tests/bench:reducer_bench
//
// The model is the DDP row's of process_bench (256-1024-1024-10, batch 512 per process: 5.3 MB of gradients),
// one intra-op thread per process.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ATen/Parallel.h"
#include "benchmark/benchmark.h"
#include "hal/compat/c10d.h"
#include "torch/csrc/distributed/c10d/TCPStore.hpp"
#include "torch/csrc/distributed/c10d/reducer.hpp"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/activation.h"
#include "torch/nn/modules/container/sequential.h"
#include "torch/nn/modules/linear.h"
#include "trainer/strategies/launcher.h"

namespace kiln {
namespace {

const bool kSmoke = std::getenv("KILN_BENCH_SMOKE") != nullptr;
const int kRounds = kSmoke ? 1 : 7;
const int kSteps = kSmoke ? 2 : 20;

struct Medians {
  double pytorch_ms = 0, manual_ms = 0;
};

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// The rounds of one rank. Both ranks run exactly the same collectives in the same order.
Medians RunRounds(int rank, int port) {
  at::set_num_threads(1);
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(port);
  store_options.isServer = rank == 0;
  store_options.numWorkers = 2;
  store_options.timeout = std::chrono::seconds(60);
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);
  auto gloo_options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(60));
  gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto group = compat::MakeGlooProcessGroup(store, rank, 2, gloo_options, std::chrono::seconds(60));

  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(256, 1024), torch::nn::ReLU(), torch::nn::Linear(1024, 1024),
                              torch::nn::ReLU(), torch::nn::Linear(1024, 10));
  std::vector<at::Tensor> params = model->parameters();
  torch::manual_seed(1 + rank);
  const at::Tensor input = at::randn({512, 256});
  const at::Tensor target = at::randint(0, 10, {512}, at::kLong);
  const auto loss = [&] { return torch::nn::functional::cross_entropy(model->forward(input), target); };
  const auto zero = [&] {
    for (at::Tensor& p : params) p.mutable_grad() = at::Tensor();
  };

  using Step = std::function<void()>;
  const auto timed = [&](const Step& step) {
    step();  // Warm-up (and, for c10d::Reducer, the step after which it rebuilds its buckets).
    step();
    group->barrier()->wait();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kSteps; ++i) step();
    group->barrier()->wait();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / kSteps;
  };

  std::vector<double> pytorch, manual;
  for (int round = 0; round < kRounds; ++round) {
    {
      compat::ReducerOptions options;
      std::shared_ptr<c10d::Reducer> reducer = compat::MakeReducer(params, group, options);
      pytorch.push_back(timed([&] {
        zero();
        const at::Tensor l = loss();
        reducer->rebuild_buckets();
        reducer->prepare_for_forward();
        reducer->prepare_for_backward({l});
        l.backward();
      }));
    }
    manual.push_back(timed([&] {
      zero();
      loss().backward();
      std::vector<at::Tensor> grads;
      for (const at::Tensor& p : params) grads.push_back(p.grad().flatten());
      std::vector<at::Tensor> flat = {at::cat(grads)};
      group->allreduce(flat)->wait();
      flat[0].div_(2);
      int64_t offset = 0;
      for (at::Tensor& p : params) {
        p.mutable_grad().copy_(flat[0].slice(0, offset, offset + p.numel()).view(p.sizes()));
        offset += p.numel();
      }
    }));
  }
  return {Median(pytorch), Median(manual)};
}

int g_port = 0;

void BM_DdpReducers(benchmark::State& state) {
  Medians medians;
  for (auto _ : state) {
    medians = RunRounds(0, g_port);
    state.SetIterationTime(medians.pytorch_ms / 1e3);
  }
  state.counters["pytorch_ms_per_step"] = medians.pytorch_ms;
  state.counters["manual_ms_per_step"] = medians.manual_ms;
  state.counters["pytorch_over_manual"] = medians.pytorch_ms / medians.manual_ms;
}
BENCHMARK(BM_DdpReducers)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  // Rank 1 is forked before LibTorch starts any thread, and runs the same single benchmark iteration's rounds.
  const absl::StatusOr<int> port = kiln::FindFreePort();
  if (!port.ok()) return 1;
  kiln::g_port = *port;
  const pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    kiln::RunRounds(1, kiln::g_port);
    _exit(0);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
