// How long the connector takes to resolve a plan, with every built-in backend registered (each is probed for
// "auto"), for the default flags and for an explicit accelerator. There is no raw-LibTorch counterpart: the figure
// is the fixed cost fit pays once per call.
#include "benchmark/benchmark.h"
#include "connector/connector.h"

namespace kiln {
namespace {

void BM_ResolveAuto(benchmark::State& state) {
  for (auto _ : state) {
    absl::StatusOr<Plan> plan = ResolvePlan(ConnectorOptions{});
    if (!plan.ok()) state.SkipWithError(std::string(plan.status().message()).c_str());
    benchmark::DoNotOptimize(plan);
  }
}

void BM_ResolveNamed(benchmark::State& state) {
  ConnectorOptions options;
  options.accelerator = "cpu";
  options.devices = 1;
  for (auto _ : state) {
    absl::StatusOr<Plan> plan = ResolvePlan(options);
    if (!plan.ok()) state.SkipWithError(std::string(plan.status().message()).c_str());
    benchmark::DoNotOptimize(plan);
  }
}

BENCHMARK(BM_ResolveAuto)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ResolveNamed)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kiln

BENCHMARK_MAIN();
