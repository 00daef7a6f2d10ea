// Checkpoint write and read throughput: Kiln's checkpoint files (serialise, write aside, fsync, rename; and the
// validated read) against raw torch::save / torch::load of the same state, in the same process, interleaved.
// The state: the medium MLP (784 -> 512 -> 256 -> 10) with its Adam state after one step, about 6.4 MB.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "ATen/ATen.h"
#include "benchmark/benchmark.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/activation.h"
#include "torch/nn/modules/container/sequential.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/adam.h"
#include "torch/serialize.h"
#include "trainer/checkpoint/checkpoint_io.h"

namespace kiln {
namespace {

struct State {
  torch::nn::Sequential net{torch::nn::Linear(784, 512), torch::nn::ReLU(), torch::nn::Linear(512, 256),
                            torch::nn::ReLU(), torch::nn::Linear(256, 10)};
  torch::optim::Adam adam{net->parameters(), torch::optim::AdamOptions(1e-3)};
  State() {
    adam.zero_grad();
    torch::nn::functional::cross_entropy(net->forward(at::randn({8, 784})), at::randint(10, {8})).backward();
    adam.step();
  }
  // The same records as a Kiln checkpoint's model and optimizer parts.
  void Fill(torch::serialize::OutputArchive& archive) {
    torch::serialize::OutputArchive model;
    net->save(model);
    archive.write("model", model);
    torch::serialize::OutputArchive optimizer;
    adam.save(optimizer);
    archive.write("optimizer_0", optimizer);
  }
  double Bytes() {
    double bytes = 0;
    for (const at::Tensor& p : net->parameters()) bytes += 3.0 * p.numel() * p.element_size();  // Params, 2 moments.
    return bytes;
  }
  // The baseline: the same records written with LibTorch's own torch::save path.
  void SaveRaw(const std::string& path) {
    torch::serialize::OutputArchive archive;
    Fill(archive);
    archive.save_to(path);
  }
};

std::string Dir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp");
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Kiln's and the baseline's throughput over all iterations, `bytes` each, and their ratio.
void ReportThroughput(benchmark::State& state, double bytes, double kiln_seconds, double raw_seconds) {
  const double n = static_cast<double>(state.iterations());
  state.counters["kiln_MB_per_s"] = bytes * n / kiln_seconds / 1e6;
  state.counters["raw_MB_per_s"] = bytes * n / raw_seconds / 1e6;
  state.counters["kiln_over_raw_throughput"] = raw_seconds / kiln_seconds;
}

void BM_CheckpointWrite(benchmark::State& state) {
  State model;
  const std::string kiln_path = Dir() + "/bench_kiln.ckpt";
  const std::string raw_path = Dir() + "/bench_raw.pt";
  double kiln = 0;
  double raw = 0;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    absl::Status status = WriteCheckpoint(kiln_path, [&](torch::serialize::OutputArchive& a) { model.Fill(a); });
    kiln += Seconds(start);
    if (!status.ok()) state.SkipWithError(std::string(status.message()).c_str());
    start = std::chrono::steady_clock::now();
    model.SaveRaw(raw_path);
    raw += Seconds(start);
  }
  ReportThroughput(state, model.Bytes(), kiln, raw);
}

void BM_CheckpointRead(benchmark::State& state) {
  State model;
  const std::string kiln_path = Dir() + "/bench_kiln_read.ckpt";
  const std::string raw_path = Dir() + "/bench_raw_read.pt";
  (void)WriteCheckpoint(kiln_path, [&](torch::serialize::OutputArchive& a) { model.Fill(a); });
  model.SaveRaw(raw_path);
  double kiln = 0;
  double raw = 0;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<torch::serialize::InputArchive>> archive = ReadCheckpoint(kiln_path);
    torch::serialize::InputArchive sub;
    (*archive)->read("model", sub);
    model.net->load(sub);
    kiln += Seconds(start);
    start = std::chrono::steady_clock::now();
    torch::serialize::InputArchive raw_archive;
    raw_archive.load_from(raw_path);
    torch::serialize::InputArchive raw_sub;
    raw_archive.read("model", raw_sub);
    model.net->load(raw_sub);
    raw += Seconds(start);
  }
  ReportThroughput(state, model.Bytes(), kiln, raw);
}

// Raw torch::save made as durable as Kiln's write (fsync before returning), and the time a training loop waits
// when the Trainer saves: serialisation only, since the file is written by the background CheckpointWriter.
void BM_CheckpointWriteDurableAndAsync(benchmark::State& state) {
  State model;
  const std::string async_path = Dir() + "/bench_async.ckpt";
  const std::string raw_path = Dir() + "/bench_raw_durable.pt";
  CheckpointWriter writer;
  double waited = 0;
  double raw = 0;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::string> bytes =
        SerializeCheckpoint(async_path, [&](torch::serialize::OutputArchive& a) { model.Fill(a); });
    absl::Status submitted = writer.Submit(async_path, std::move(bytes).value());
    waited += Seconds(start);
    if (!submitted.ok()) state.SkipWithError(std::string(submitted.message()).c_str());
    (void)writer.Flush();  // Outside the timed part: the loop would be training meanwhile.
    start = std::chrono::steady_clock::now();
    model.SaveRaw(raw_path);
    const int fd = ::open(raw_path.c_str(), O_RDONLY);
    ::fsync(fd);
    ::close(fd);
    raw += Seconds(start);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["trainer_wait_MB_per_s"] = model.Bytes() * n / waited / 1e6;
  state.counters["raw_fsync_MB_per_s"] = model.Bytes() * n / raw / 1e6;
}

BENCHMARK(BM_CheckpointWrite)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CheckpointWriteDurableAndAsync)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CheckpointRead)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kiln

BENCHMARK_MAIN();
