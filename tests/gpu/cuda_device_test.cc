// The CUDA backend on a real GPU, through the trainer: a checkpoint written on the GPU resumes exactly (with the
// optimizer's state back on the GPU), and DeviceStatsMonitor logs NVML's and the caching allocator's statistics
// while training; and a step that writes no log row never synchronises with the GPU (fused Adam, the device-side
// loss check, non-blocking batch copies; LibTorch's sync debug mode makes any synchronisation an error). Part of `bazel
// test --config=cuda` and of tools/gpu_check.sh's pack. On a machine where the cuda accelerator is not available every
// test skips, printing the accelerator's own reason; the CUDA code paths that need no GPU are tested in backends/cuda.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "hal/registry.h"
#include "torch/optim/adam.h"
#include "trainer/callbacks/device_stats_monitor.h"
#include "trainer/classifier.h"
#include "trainer/core/callback.h"
#include "trainer/core/logger.h"
#include "trainer/optim/fused_optimizers.h"
#include "trainer/synthetic_data.h"
#include "trainer/testing/test_support.h"
#include "trainer/trainer.h"

#ifdef KILN_WITH_CUDA
#include "c10/cuda/CUDAFunctions.h"
#endif

namespace {

// Skips the calling test, saying why, unless the cuda accelerator can run here.
#define SKIP_UNLESS_CUDA()                                                                                      \
  do {                                                                                                          \
    absl::StatusOr<std::shared_ptr<kiln::Accelerator>> cuda = kiln::AcceleratorRegistry::Default().Get("cuda"); \
    ASSERT_TRUE(cuda.ok()) << cuda.status();                                                                    \
    if (absl::Status available = (*cuda)->CheckAvailable(); !available.ok()) {                                  \
      GTEST_SKIP() << "no GPU to run on: " << available.message();                                              \
    }                                                                                                           \
  } while (false)

struct FitResult {
  std::vector<at::Tensor> parameters;      // On the CPU.
  std::vector<c10::Device> state_devices;  // Where Adam's state tensors are after fit.
  std::string resumed_from;
};

FitResult Fit(const std::string& root, int64_t max_epochs, const std::string& ckpt_path,
              std::vector<std::shared_ptr<kiln::Logger>> loggers = {},
              std::vector<std::shared_ptr<kiln::Callback>> callbacks = {}) {
  kiln::TrainerOptions options{.accelerator = "cuda",
                               .devices = 1,
                               .max_epochs = max_epochs,
                               .seed = 3,
                               .default_root_dir = root,
                               .enable_progress_bar = false};
  options.loggers = std::move(loggers);
  options.callbacks = std::move(callbacks);
  options.log_every_n_steps = 1;
  kiln::Trainer trainer(options);
  torch::manual_seed(3);
  kiln::MlpClassifier model({});
  kiln::SyntheticClusters data(kiln::testing::SmallData());
  const absl::Status status = trainer.fit(model, data, ckpt_path);
  EXPECT_TRUE(status.ok()) << status;
  FitResult run;
  run.resumed_from = trainer.resumed_from();
  for (const at::Tensor& parameter : model.parameters()) run.parameters.push_back(parameter.detach().to(at::kCPU));
  for (const auto& optimizer : trainer.optimizers()) {
    for (const auto& [key, state] : optimizer->state()) {
      const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(state.get());
      if (adam == nullptr) continue;
      run.state_devices.push_back(adam->exp_avg().device());
    }
  }
  return run;
}

TEST(CudaDeviceTest, ACheckpointWrittenOnTheGpuResumesExactly) {
  SKIP_UNLESS_CUDA();
  const std::string interrupted = kiln::testing::TempDir();
  Fit(interrupted, 1, "");
  const FitResult resumed = Fit(interrupted, 3, "last");
  const FitResult straight = Fit(kiln::testing::TempDir(), 3, "");
  EXPECT_FALSE(resumed.resumed_from.empty()) << "ckpt_path=\"last\" found no checkpoint";
  ASSERT_EQ(resumed.parameters.size(), straight.parameters.size());
  for (size_t i = 0; i < straight.parameters.size(); ++i) {
    EXPECT_TRUE(at::equal(resumed.parameters[i], straight.parameters[i])) << "parameter " << i;
  }
  ASSERT_FALSE(resumed.state_devices.empty()) << "Adam kept no state";
  for (const c10::Device& device : resumed.state_devices) EXPECT_TRUE(device.is_cuda()) << device;
}

TEST(CudaDeviceTest, DeviceStatsMonitorLogsNvmlAndTheCachingAllocator) {
  SKIP_UNLESS_CUDA();
  auto memory = std::make_shared<kiln::MemoryLogger>();
  Fit(kiln::testing::TempDir(), 1, "", {memory}, {std::make_shared<kiln::DeviceStatsMonitor>()});
  const std::string prefix = "DeviceStatsMonitor.on_train_batch_end/";
  double allocated = -1, nvml = -1, allocator = -1, memory_used = -1;
  for (const kiln::MemoryLogger::Row& row : memory->rows()) {
    for (const auto& [name, value] : row.metrics) {
      if (!absl::StartsWith(name, prefix)) continue;
      const std::string key = name.substr(prefix.size());
      if (key == "allocator_allocated_bytes") allocated = value;
      if (key == "nvml_available") nvml = value;
      if (key == "allocator_available") allocator = value;
      if (key == "memory_used_bytes") memory_used = value;
    }
  }
  EXPECT_EQ(allocator, 1) << "the caching allocator's statistics were not read";
  EXPECT_GT(allocated, 0) << "a model on the GPU allocates through the caching allocator";
  EXPECT_EQ(nvml, 1) << "NVML (libnvidia-ml.so.1) gave no statistics";
  EXPECT_GT(memory_used, 0) << "NVML reports the GPU's memory in use";
}

#ifdef KILN_WITH_CUDA
// Turns LibTorch's CUDA sync debug mode to "error" from the end of one training batch to the end of the next when
// that next batch writes no log row (global step a multiple of kLogEvery): its batch copy, forward, backward, loss
// check and optimizer step must then never make the host wait for the GPU. Off everywhere else.
class NoSyncWindows final : public kiln::Callback {
 public:
  static constexpr int64_t kLogEvery = 4;
  static constexpr int64_t kBatches = 10;  // An epoch of SmallData.
  std::string state_key() const override { return "NoSyncWindows"; }
  void on_train_batch_end(kiln::Trainer& trainer, kiln::LightningModule& module, const at::Tensor& outputs,
                          const kiln::Batch& batch, int64_t batch_idx) override {
    // The next batch's step makes global step trainer.global_step() + 1; after an epoch's last batch come its
    // validation and its end, which read.
    const bool next_reads = (trainer.global_step() + 1) % kLogEvery == 0 || batch_idx + 1 == kBatches;
    c10::cuda::warning_state().set_sync_debug_mode(next_reads ? c10::cuda::SyncDebugMode::L_DISABLED
                                                              : c10::cuda::SyncDebugMode::L_ERROR);
    if (!next_reads) ++windows;
  }
  void on_train_epoch_end(kiln::Trainer& trainer, kiln::LightningModule& module) override { Off(); }
  void on_validation_start(kiln::Trainer& trainer, kiln::LightningModule& module) override { Off(); }
  static void Off() { c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED); }
  int64_t windows = 0;
};

class FusedAdamClassifier final : public kiln::testing::RecordingClassifier {
 public:
  kiln::OptimizerConfig configure_optimizers() override {
    return std::make_shared<kiln::FusedAdam>(parameters(), torch::optim::AdamOptions(1e-2));
  }
};
#endif

TEST(CudaDeviceTest, StepsThatWriteNoLogRowNeverSynchronise) {
  SKIP_UNLESS_CUDA();
#ifndef KILN_WITH_CUDA
  GTEST_SKIP() << "built without CUDA (--config=cuda builds it): the sync debug mode is c10_cuda's";
#else
  auto windows = std::make_shared<NoSyncWindows>();
  kiln::Trainer trainer({.accelerator = "cuda",
                         .devices = 1,
                         .max_epochs = 2,
                         .log_every_n_steps = NoSyncWindows::kLogEvery,
                         .seed = 3,
                         .default_root_dir = kiln::testing::TempDir(),
                         .callbacks = {windows},
                         .enable_checkpointing = false,
                         .enable_progress_bar = false});
  torch::manual_seed(3);
  FusedAdamClassifier model;
  kiln::SyntheticClusters data(kiln::testing::SmallData());
  const absl::Status status = trainer.fit(model, data);
  NoSyncWindows::Off();
  ASSERT_TRUE(status.ok()) << "a step that reads nothing synchronised with the GPU: " << status;
  EXPECT_EQ(trainer.global_step(), 20);
  EXPECT_GE(windows->windows, 10) << "too few steps ran with the sync debug mode on";
#endif
}

}  // namespace
