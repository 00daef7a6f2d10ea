// DDP step time: Kiln's Trainer::fit with --strategy=ddp on 1, 2 and 4 processes against a hand-written c10d loop
// on the same processes, the same model, data and optimizer, and the same collective backend: the one the
// accelerator brings (Accelerator::MakeCollectiveBackend). And FSDP's: each round also runs fit with
// --strategy=fsdp (each Linear a unit; FULL_SHARD, or KILN_BENCH_SHARDING; 1 process: fsdp on one rank), and the
// fsdp_over_ddp counter is its step time over ddp's (issue #36's bound: 1.3 on the CPU). Two accelerators:
//   cpu          Gloo;
//   virtual_npu  the sample out-of-tree device (examples/virtual_npu) and its own backend, vnccl, as a vendor's.
// The hand-written loop: zero the gradients, forward, loss, backward, one all-reduce of all gradients flattened,
// the division by the world size, SGD's step (no bucketing, no overlap: what a user writes without a framework).
// Kiln's side is everything fit does per step under DDP (c10d::Reducer's bucketed all-reduces during backward,
// the precision plugin, the loop's bookkeeping); with 1 process it is single_device, and the loop all-reduces
// nothing.
//
// Each benchmark iteration forks the ranks (the parent never starts LibTorch, so the forks are clean); each rank
// runs `rounds` rounds, each round one fit and one hand-written run of `steps` steps, alternating which goes first,
// and times the steps after the first `warm_up` (set-up, the first all-reduces and c10d::Reducer's bucket rebuild
// are not in the figure). Rank 0 reports the medians over rounds. Counters: kiln_ms_per_step, manual_ms_per_step,
// kiln_over_manual, fsdp_ms_per_step, fsdp_over_ddp; the 1-process row of the same accelerator is the
// single-process baseline.
//
// One intra-op thread per process (OMP_NUM_THREADS=1, as torchrun sets), so that 4 processes on a 2-core machine
// share the cores rather than oversubscribe them with threads; on such a machine the 4-process steps take about
// twice as long as the 1-process ones, which is the cores' arithmetic, not the collectives'.
//
//   bazel run -c opt //tests/bench:ddp_step_bench
//
// Model: 256 -> 1024 -> 1024 -> 10 with ReLUs, cross-entropy, SGD (lr 0.01); batch 128 per process (5.3 MB of
// gradients a step).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "ATen/Parallel.h"
#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "glog/logging.h"
#include "hal/accelerator.h"
#include "hal/collectives.h"
#include "hal/registry.h"
#include "torch/csrc/distributed/c10d/PrefixStore.hpp"
#include "torch/csrc/distributed/c10d/TCPStore.hpp"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/activation.h"
#include "torch/nn/modules/container/sequential.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/sgd.h"
#include "trainer/core/callback.h"
#include "trainer/strategies/fsdp_options.h"
#include "trainer/strategies/launcher.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

const bool kSmoke = std::getenv("KILN_BENCH_SMOKE") != nullptr;
bool g_failed = false;  // A row failed: the program exits non-zero.
const int kRounds = kSmoke ? 1 : 9;
const int kWarmUp = kSmoke ? 1 : 3;
const int kSteps = kSmoke ? 3 : 43;  // Including the warm-up.
constexpr int64_t kBatch = 128;

torch::nn::Sequential MakeNet() {
  torch::manual_seed(0);
  return torch::nn::Sequential(torch::nn::Linear(256, 1024), torch::nn::ReLU(), torch::nn::Linear(1024, 1024),
                               torch::nn::ReLU(), torch::nn::Linear(1024, 10));
}

std::shared_ptr<torch::optim::Optimizer> MakeSgd(std::vector<at::Tensor> parameters) {
  return std::make_shared<torch::optim::SGD>(parameters, torch::optim::SGDOptions(0.01));
}

// This rank's batches (each rank trains on its own data, as DistributedSampler's shards are).
std::vector<Batch> MakeBatches(int rank) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(1 + rank);
  std::vector<Batch> batches;
  for (int i = 0; i < kSteps; ++i) {
    batches.push_back({at::randn({kBatch, 256}, generator), at::randint(10, {kBatch}, generator, at::kLong)});
  }
  return batches;
}

// The rank's batches, already its shard.
class ShardLoader final : public DataLoader {
 public:
  explicit ShardLoader(const std::vector<Batch>* batches) : batches_(batches) {}
  int64_t num_batches() const override { return static_cast<int64_t>(batches_->size()); }
  Batch get_batch(int64_t index) override { return (*batches_)[index]; }
  absl::Status set_shard(int rank, int world_size) override { return absl::OkStatus(); }

 private:
  const std::vector<Batch>* batches_;
};

class ShardData final : public DataModule {
 public:
  explicit ShardData(const std::vector<Batch>* batches) : loader_(std::make_shared<ShardLoader>(batches)) {}
  std::shared_ptr<DataLoader> train_dataloader() override { return loader_; }

 private:
  std::shared_ptr<ShardLoader> loader_;
};

class Module final : public LightningModule {
 public:
  Module() : net_(MakeNet()) { register_module("net", net_); }
  at::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    return torch::nn::functional::cross_entropy(net_->forward(batch.input), batch.target);
  }
  OptimizerConfig configure_optimizers() override {
    OptimizerConfig config;
    config.optimizers.push_back(MakeSgd(parameters()));
    return config;
  }

 private:
  torch::nn::Sequential net_;
};

// Times the training steps after the warm-up: from the start of batch kWarmUp to the end of the last batch.
class StepClock final : public Callback {
 public:
  std::string state_key() const override { return "StepClock"; }
  void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) override {
    if (batch_idx == kWarmUp) start_ = std::chrono::steady_clock::now();
  }
  void on_train_batch_end(Trainer&, LightningModule&, const at::Tensor&, const Batch&, int64_t batch_idx) override {
    if (batch_idx == kSteps - 1) end_ = std::chrono::steady_clock::now();
  }
  double ms_per_step() const {
    return std::chrono::duration<double, std::milli>(end_ - start_).count() / (kSteps - kWarmUp);
  }

 private:
  std::chrono::steady_clock::time_point start_, end_;
};

struct Case {
  std::string accelerator;
  int world_size;
  // Kiln's (every fit of a rank's program meets its peers there: the processes live through the program) and the
  // hand-written loop's.
  std::vector<int> ports;
};

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "ddp_step_bench: %s\n", what.c_str());
  std::fflush(stderr);
  _exit(2);
}

// One fit of `strategy` ("ddp": single_device with 1 process; "fsdp": every Linear a unit).
double WithKiln(const Case& c, int rank, int port, const std::vector<Batch>& batches, const std::string& strategy) {
  // The Lightning environment of a process someone else launched (as `torchrun` or a cluster would).
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", absl::StrCat(port).c_str(), 1);
  ::setenv("LOCAL_RANK", absl::StrCat(rank).c_str(), 1);
  ::setenv("NODE_RANK", "0", 1);
  Module module;
  ShardData data(&batches);
  auto clock = std::make_shared<StepClock>();
  TrainerOptions options{.accelerator = c.accelerator,
                         .devices = c.world_size,
                         .strategy = strategy == "fsdp" ? "fsdp" : c.world_size > 1 ? "ddp" : "single_device",
                         .process_group_timeout = absl::Seconds(120),
                         .max_epochs = 1,
                         .num_sanity_val_steps = 0};
  if (strategy == "fsdp") {
    options.fsdp.auto_wrap_policy.module_types = {"Linear"};
    if (const char* sharding = std::getenv("KILN_BENCH_SHARDING")) {
      if (std::optional<std::string> accepted = SetFsdpField(options.fsdp.sharding_strategy, sharding)) {
        Fail(absl::StrCat("KILN_BENCH_SHARDING=", sharding, " is not valid; ", *accepted));
      }
    }
  }
  options.callbacks.push_back(clock);
  options.logger = false;
  options.enable_checkpointing = false;
  options.enable_progress_bar = false;
  options.enable_model_summary = false;
  options.default_root_dir = absl::StrCat(std::getenv("TEST_TMPDIR") != nullptr ? std::getenv("TEST_TMPDIR") : "/tmp",
                                          "/kiln_ddp_step_bench");
  Trainer trainer(options);
  if (absl::Status status = trainer.fit(module, data); !status.ok()) {
    Fail(absl::StrCat("rank ", rank, ": fit failed: ", status.message()));
  }
  return clock->ms_per_step();
}

// The hand-written loop on the accelerator's device and its collective backend (`backend` is null with 1 process).
double HandWritten(const Case& c, const c10::Device& device, c10d::Backend* backend,
                   const std::vector<Batch>& batches) {
  torch::nn::Sequential net = MakeNet();
  net->to(device);
  std::vector<at::Tensor> params = net->parameters();
  std::shared_ptr<torch::optim::Optimizer> optimizer = MakeSgd(params);
  std::chrono::steady_clock::time_point start;
  for (int step = 0; step < kSteps; ++step) {
    if (step == kWarmUp) start = std::chrono::steady_clock::now();
    optimizer->zero_grad();
    const at::Tensor input = batches[step].input.to(device);
    const at::Tensor target = batches[step].target.to(device);
    torch::nn::functional::cross_entropy(net->forward(input), target).backward();
    if (backend != nullptr) {
      std::vector<at::Tensor> grads;
      for (const at::Tensor& p : params) grads.push_back(p.grad().flatten());
      std::vector<at::Tensor> flat = {at::cat(grads)};
      backend->allreduce(flat)->wait();
      flat[0].div_(c.world_size);
      int64_t offset = 0;
      for (at::Tensor& p : params) {
        p.mutable_grad().copy_(flat[0].slice(0, offset, offset + p.numel()).view(p.sizes()));
        offset += p.numel();
      }
    }
    optimizer->step();
  }
  // The last step's results are on the device; reading one back waits for them (a no-op on the CPU).
  (void)params.front().sum().item<float>();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
         (kSteps - kWarmUp);
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// One rank: sets up the hand-written loop's device and backend, then runs the rounds. Writes the two medians to
// `out` (rank 0).
void RunRank(const Case& c, int rank, int out) {
  ::setenv("OMP_NUM_THREADS", "1", 1);
  at::set_num_threads(1);
  absl::StatusOr<std::shared_ptr<Accelerator>> accelerator = AcceleratorRegistry::Default().Get(c.accelerator);
  if (!accelerator.ok()) Fail(std::string(accelerator.status().message()));
  absl::StatusOr<std::vector<int>> indices = (*accelerator)->ParseDevices(c.world_size);
  if (!indices.ok()) Fail(std::string(indices.status().message()));
  const LogicalDevice device = LogicalDevices(**accelerator, *indices)[rank];
  if (absl::Status status = (*accelerator)->SetupDevice(device); !status.ok()) Fail(std::string(status.message()));
  c10::intrusive_ptr<c10d::Backend> backend;
  if (c.world_size > 1) {
    CollectiveOptions options;
    options.rank = rank;
    options.world_size = c.world_size;
    options.device_index = device.compute.has_index() ? device.compute.index() : 0;
    options.timeout = std::chrono::seconds(120);
    options.host_endpoints = {{.is_interface = false, .name = "127.0.0.1"}};
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(c.ports.back());
    store_options.isServer = rank == 0;
    store_options.numWorkers = static_cast<size_t>(c.world_size);
    store_options.timeout = options.timeout;
    options.store = c10::make_intrusive<c10d::PrefixStore>(
        "bench", c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options));
    absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> made = (*accelerator)->MakeCollectiveBackend(device, options);
    if (!made.ok()) Fail(std::string(made.status().message()));
    backend = *made;
  }
  const std::vector<Batch> batches = MakeBatches(rank);
  std::vector<double> kiln, manual, fsdp;
  for (int round = 0; round < kRounds; ++round) {
    // Alternate which side goes first, so that neither always runs on a warmer cache or allocator.
    if (round % 2 == 0) {
      kiln.push_back(WithKiln(c, rank, c.ports[0], batches, "ddp"));
      fsdp.push_back(WithKiln(c, rank, c.ports[0], batches, "fsdp"));
      manual.push_back(HandWritten(c, device.compute, backend.get(), batches));
    } else {
      manual.push_back(HandWritten(c, device.compute, backend.get(), batches));
      fsdp.push_back(WithKiln(c, rank, c.ports[0], batches, "fsdp"));
      kiln.push_back(WithKiln(c, rank, c.ports[0], batches, "ddp"));
    }
  }
  if (rank == 0) {
    const double medians[3] = {Median(kiln), Median(manual), Median(fsdp)};
    if (write(out, medians, sizeof(medians)) != static_cast<ssize_t>(sizeof(medians))) Fail("cannot report");
  }
}

void BM_DdpStep(benchmark::State& state, const std::string& accelerator) {
  Case c{accelerator, static_cast<int>(state.range(0)), {}};
  double kiln = 0, manual = 0, fsdp = 0;
  for (auto _ : state) {
    c.ports.clear();
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<int> port = FindFreePort();
      if (!port.ok()) {
        g_failed = true;
        state.SkipWithError(std::string(port.status().message()).c_str());
        return;
      }
      c.ports.push_back(*port);
    }
    int fds[2];
    if (pipe(fds) != 0) {
      g_failed = true;
      state.SkipWithError("pipe failed");
      return;
    }
    std::vector<pid_t> ranks;
    for (int rank = 0; rank < c.world_size; ++rank) {
      const pid_t pid = fork();
      if (pid == 0) {
        close(fds[0]);
        RunRank(c, rank, fds[1]);
        _exit(0);
      }
      ranks.push_back(pid);
    }
    close(fds[1]);
    double medians[3] = {0, 0, 0};
    const bool reported = read(fds[0], medians, sizeof(medians)) == static_cast<ssize_t>(sizeof(medians));
    close(fds[0]);
    bool ok = reported;
    for (pid_t pid : ranks) {
      int status = 0;
      waitpid(pid, &status, 0);
      ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    if (!ok) {
      g_failed = true;
      state.SkipWithError("a rank failed (its error is above)");
      return;
    }
    kiln = medians[0];
    manual = medians[1];
    fsdp = medians[2];
    state.SetIterationTime(kiln / 1e3);
  }
  state.counters["kiln_ms_per_step"] = kiln;
  state.counters["manual_ms_per_step"] = manual;
  state.counters["kiln_over_manual"] = kiln / manual;
  state.counters["fsdp_ms_per_step"] = fsdp;
  state.counters["fsdp_over_ddp"] = fsdp / kiln;
}

BENCHMARK_CAPTURE(BM_DdpStep, cpu, std::string("cpu"))
    ->Arg(1)->Arg(2)->Arg(4)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DdpStep, virtual_npu, std::string("virtual_npu"))
    ->Arg(1)->Arg(2)->Arg(4)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  // The virtual NPU's device count is read once, on first use: 4 devices for the 4-process rows.
  ::setenv("VIRTUAL_NPU_DEVICES", "4", 0);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return kiln::g_failed ? 1 : 0;
}
