// Checkpoint write and read throughput: Kiln's checkpoint files (serialise, write aside, fsync, rename; and the
// validated read) against LibTorch's own way to write and read what torch.save writes, of the same state, in the same
// process, interleaved: the baseline writes with PyTorchStreamWriter straight to the file (what torch.save does, no
// fsync) and reads with PyTorchStreamReader from the file and readArchiveAndTensors (what torch.load does). Each read
// starts from memory the process has not touched (BM_CheckpointRead).
// BM_ShardedCheckpointSave: the training thread's cost of an asynchronous sharded save, against the synchronous one.
// The state: the medium MLP (784 -> 512 -> 256 -> 10) with its Adam state after one step, about 6.4 MB.
#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "ATen/Parallel.h"
#include "benchmark/benchmark.h"
#include "caffe2/serialize/inline_container.h"
#include "tests/bench/scratch_dir.h"
#include "torch/csrc/jit/serialization/export.h"
#include "torch/csrc/jit/serialization/import_read.h"
#include "torch/csrc/jit/serialization/pickler.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/activation.h"
#include "torch/nn/modules/container/sequential.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/adam.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/checkpoint/lightning/optimizer_state_dict.h"
#include "trainer/checkpoint/sharded/sharded_checkpoint.h"
#include "trainer/io/durable_file.h"

namespace kiln {
namespace {

// One intra-op thread, as every benchmark here: the copies into the model (State::Load) would otherwise wake
// LibTorch's OpenMP threads, whose spinning takes the second core from the kernel's file copies.
struct State {
  State() {
    at::set_num_threads(1);
    adam.zero_grad();
    torch::nn::functional::cross_entropy(net->forward(at::randn({8, 784})), at::randint(10, {8})).backward();
    adam.step();
  }
  torch::nn::Sequential net{torch::nn::Linear(784, 512), torch::nn::ReLU(), torch::nn::Linear(512, 256),
                            torch::nn::ReLU(), torch::nn::Linear(256, 10)};
  torch::optim::Adam adam{net->parameters(), torch::optim::AdamOptions(1e-3)};
  // The same entries as a Kiln checkpoint's model and optimizer parts.
  c10::impl::GenericDict Contents() {
    c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
    for (const auto& item : net->named_parameters()) state.insert(item.key(), item.value().detach());
    c10::impl::GenericList optimizers(c10::AnyType::get());
    optimizers.push_back(OptimizerStateDict(adam).value());
    c10::impl::GenericDict contents(c10::StringType::get(), c10::AnyType::get());
    contents.insert(std::string("state_dict"), state);
    contents.insert(std::string("optimizer_states"), optimizers);
    return contents;
  }
  void Load(const c10::impl::GenericDict& contents) {
    torch::NoGradGuard no_grad;
    const c10::impl::GenericDict state = contents.at(std::string("state_dict")).toGenericDict();
    for (auto& item : net->named_parameters()) item.value().copy_(state.at(item.key()).toTensor());
  }
  double Bytes() {
    double bytes = 0;
    for (const at::Tensor& p : net->parameters()) bytes += 3.0 * p.numel() * p.element_size();  // Params, 2 moments.
    return bytes;
  }
  // The baseline: the same entries as torch.save writes them (LibTorch's pickler and zip writer, to the file).
  void SaveRaw(const std::string& path) {
    std::vector<char> pickle;
    torch::jit::Pickler pickler([&](const char* data, size_t size) { pickle.insert(pickle.end(), data, data + size); },
                                /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
                                /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
    pickler.protocol();
    pickler.pushIValue(Contents());
    pickler.stop();
    caffe2::serialize::PyTorchStreamWriter writer(path);
    torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(), writer);
    writer.writeEndOfFile();
  }
  // ... and as torch.load reads them.
  void LoadRaw(const std::string& path) {
    caffe2::serialize::PyTorchStreamReader reader(path);
    Load(torch::jit::readArchiveAndTensors("data", "", "", std::nullopt, std::nullopt, at::Device(at::kCPU), reader)
             .toGenericDict());
  }
};

// The benchmark's files' folder, its own (removed at exit).
std::string Dir() {
  static const bench::ScratchDir dir("kiln_checkpoint_bench");
  return dir.path();
}

void Fsync(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  ::fsync(fd);
  ::close(fd);
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

// Kiln's durable write against the raw write without fsync (what torch.save waits for) and with one (as durable as
// Kiln's: the data on the disk, though not the rename; kiln_over_raw_fsync_throughput).
void BM_CheckpointWrite(benchmark::State& state) {
  State model;
  const std::string kiln_path = Dir() + "/bench_kiln.ckpt";
  const std::string raw_path = Dir() + "/bench_raw.pt";
  double kiln = 0;
  double removal = 0;
  double raw = 0;
  double raw_fsync = 0;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    absl::Status status = WriteCheckpoint(kiln_path, model.Contents());
    kiln += Seconds(start);
    if (!status.ok()) state.SkipWithError(std::string(status.message()).c_str());
    // The checkpoint the write replaced is removed by a thread of the process after the write returns
    // (DurableWriteOptions::remove_replaced_later): waited for here, so that the baseline's write does not share the
    // disk with it, and counted in kiln_with_removal_over_raw_throughput.
    start = std::chrono::steady_clock::now();
    WaitForReplacedFiles();
    removal += Seconds(start);
    start = std::chrono::steady_clock::now();
    model.SaveRaw(raw_path);
    raw += Seconds(start);
    start = std::chrono::steady_clock::now();
    model.SaveRaw(raw_path);
    Fsync(raw_path);
    raw_fsync += Seconds(start);
  }
  ReportThroughput(state, model.Bytes(), kiln, raw);
  state.counters["raw_fsync_MB_per_s"] = model.Bytes() * static_cast<double>(state.iterations()) / raw_fsync / 1e6;
  state.counters["kiln_over_raw_fsync_throughput"] = raw_fsync / kiln;
  state.counters["kiln_with_removal_over_raw_throughput"] = raw / (kiln + removal);
}

void BM_CheckpointRead(benchmark::State& state) {
  State model;
  const std::string kiln_path = Dir() + "/bench_kiln_read.ckpt";
  const std::string raw_path = Dir() + "/bench_raw_read.pt";
  (void)WriteCheckpoint(kiln_path, model.Contents());
  model.SaveRaw(raw_path);
  double kiln = 0;
  double raw = 0;
  for (auto _ : state) {
    // Each read lands in memory the process has not touched, as a resume's read does: the allocator's free memory is
    // handed back to the kernel first (outside the timed part). Without that, a read reuses the pages the other
    // side's read freed just before it (which side gains then depends on the order and on the allocator's thresholds).
    malloc_trim(0);
    auto start = std::chrono::steady_clock::now();
    {
      absl::StatusOr<Checkpoint> checkpoint = ReadCheckpoint(kiln_path);
      if (!checkpoint.ok()) {
        state.SkipWithError(std::string(checkpoint.status().message()).c_str());
        break;
      }
      model.Load(checkpoint->contents);
    }
    kiln += Seconds(start);
    malloc_trim(0);
    start = std::chrono::steady_clock::now();
    model.LoadRaw(raw_path);
    raw += Seconds(start);
  }
  ReportThroughput(state, model.Bytes(), kiln, raw);
}

// The raw write made as durable as Kiln's (fsync before returning), and the time a training loop waits
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
    absl::StatusOr<std::string> bytes = SerializeCheckpoint(async_path, model.Contents());
    absl::Status submitted = writer.Submit(async_path, std::move(bytes).value());
    waited += Seconds(start);
    if (!submitted.ok()) state.SkipWithError(std::string(submitted.message()).c_str());
    (void)writer.Flush();  // Outside the timed part: the loop would be training meanwhile.
    start = std::chrono::steady_clock::now();
    model.SaveRaw(raw_path);
    Fsync(raw_path);
    raw += Seconds(start);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["trainer_wait_MB_per_s"] = model.Bytes() * n / waited / 1e6;
  state.counters["raw_fsync_MB_per_s"] = model.Bytes() * n / raw / 1e6;
}

// A sharded checkpoint's save, one rank: what the training thread waits for now that it is asynchronous (a copy of
// every tensor, the snapshot, handed to the writer with SubmitCollective; the pieces are written, the records
// exchanged and the folder published on the writer's thread), against the synchronous write the loop paid before
// (WriteShardedCheckpoint on its own thread) and the raw write made durable (torch.save's container, fsync). Times per
// save in ms: trainer_wait_ms, sync_write_ms, raw_fsync_ms.
void BM_ShardedCheckpointSave(benchmark::State& state) {
  State model;
  const std::string path = Dir() + "/bench_sharded.ckpt";
  const std::string raw_path = Dir() + "/bench_raw_sharded.pt";
  const ShardedCheckpointRanks ranks{
      .rank = 0, .world_size = 1, .all_gather = [](const std::string& mine) { return std::vector<std::string>{mine}; }};
  CheckpointWriter writer;
  double waited = 0;
  double sync = 0;
  double raw = 0;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    c10::impl::GenericDict copies = c10::IValue(model.Contents()).deepcopy().toGenericDict();
    CheckpointSnapshot snapshot{.tensor_bytes = static_cast<size_t>(model.Bytes()),
                                .build = [copies]() -> absl::StatusOr<c10::impl::GenericDict> { return copies; }};
    copies = c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get());  // The writer's alone now.
    absl::Status submitted = writer.SubmitCollective(
        path, std::move(snapshot), [&path, &ranks](absl::StatusOr<c10::impl::GenericDict> contents) {
          return WriteShardedCheckpoint(path, std::move(contents), ranks);
        });
    waited += Seconds(start);
    if (!submitted.ok()) state.SkipWithError(std::string(submitted.message()).c_str());
    if (absl::Status flushed = writer.Flush(); !flushed.ok()) {  // Outside the timed part: training goes on.
      state.SkipWithError(std::string(flushed.message()).c_str());
    }
    start = std::chrono::steady_clock::now();
    absl::Status written = WriteShardedCheckpoint(path, model.Contents(), ranks);
    sync += Seconds(start);
    if (!written.ok()) state.SkipWithError(std::string(written.message()).c_str());
    start = std::chrono::steady_clock::now();
    model.SaveRaw(raw_path);
    Fsync(raw_path);
    raw += Seconds(start);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["trainer_wait_ms"] = waited / n * 1e3;
  state.counters["sync_write_ms"] = sync / n * 1e3;
  state.counters["raw_fsync_ms"] = raw / n * 1e3;
  state.counters["wait_over_sync"] = waited / sync;
}

BENCHMARK(BM_CheckpointWrite)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ShardedCheckpointSave)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CheckpointWriteDurableAndAsync)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CheckpointRead)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kiln

BENCHMARK_MAIN();
