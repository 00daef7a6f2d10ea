// Whole-process measurements of //trainer:fit, each against a baseline in the same run, interleaved:
//   Startup: process start to exit after the first training step (`fit --max_steps=1`, no validation, no
//            checkpoint, no summary), against raw_first_step (LibTorch alone doing the same step). The time to the
//            first finished step is below this figure.
//   DDP:     training throughput of 2 processes (--devices=2 --strategy=ddp) against 1, one thread each, on a
//            compute-bound MLP (256 -> 1024 -> 1024 -> 10, batch 512 per process; 5.3 MB of gradients a step).
// Programs are found in the runfiles (bazel run) or next to the working directory.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"

namespace {

const bool kSmoke = std::getenv("KILN_BENCH_SMOKE") != nullptr;

// Runs `argv` with `env` added, waits, and returns the wall time in seconds (negative on failure).
double Run(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    for (const std::string& entry : env) putenv(const_cast<char*>(entry.c_str()));
    std::vector<char*> args;
    for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    freopen("/dev/null", "w", stdout);
    freopen("/dev/null", "w", stderr);
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? seconds : -1;
}

std::string Program(const char* path) {
  return access(path, X_OK) == 0 ? path : absl::StrCat("bazel-bin/", path);
}

void BM_Startup(benchmark::State& state) {
  const std::vector<std::string> fit = {Program("trainer/cli/fit"), "--max_steps=1", "--limit_val_batches=0",
                                        "--num_sanity_val_steps=0", "--enable_checkpointing=false",
                                        "--enable_progress_bar=false", "--num_train=64", "--num_val=64"};
  const std::vector<std::string> raw = {Program("tests/bench/raw_first_step")};
  double fit_total = 0;
  double raw_total = 0;
  for (auto _ : state) {
    const double a = Run(raw);
    const double b = Run(fit);
    if (a < 0 || b < 0) state.SkipWithError("a program failed");
    raw_total += a;
    fit_total += b;
    state.SetIterationTime(b);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["fit_s"] = fit_total / n;
  state.counters["raw_s"] = raw_total / n;
  state.counters["fit_over_raw"] = fit_total / raw_total;
}

void BM_DdpThroughput(benchmark::State& state) {
  const int64_t examples = kSmoke ? 2048 : 32768;
  const std::vector<std::string> common = {
      Program("trainer/cli/fit"), "--max_epochs=1", "--limit_val_batches=0", "--num_sanity_val_steps=0",
      "--enable_checkpointing=false", "--enable_progress_bar=false", "--num_features=256",
      "--hidden_sizes=1024,1024", "--num_classes=10", "--batch_size=512", "--logger=none", "--report=false", absl::StrCat("--num_train=", examples),
      "--num_val=128"};
  std::vector<std::string> one = common;
  one.push_back("--devices=1");
  std::vector<std::string> two = common;
  two.push_back("--devices=2");
  two.push_back("--strategy=ddp");
  const std::vector<std::string> env = {"OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1"};
  double one_total = 0;
  double two_total = 0;
  for (auto _ : state) {
    const double a = Run(one, env);
    const double b = Run(two, env);
    if (a < 0 || b < 0) state.SkipWithError("a fit run failed");
    one_total += a;
    two_total += b;
    state.SetIterationTime(b);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["one_examples_per_s"] = static_cast<double>(examples) * n / one_total;
  state.counters["two_examples_per_s"] = static_cast<double>(examples) * n / two_total;
  state.counters["two_over_one"] = one_total / two_total;
}

BENCHMARK(BM_Startup)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(kSmoke ? 1 : 10);
BENCHMARK(BM_DdpThroughput)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(kSmoke ? 1 : 3);

}  // namespace

BENCHMARK_MAIN();
