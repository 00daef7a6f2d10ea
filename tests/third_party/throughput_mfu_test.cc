// MFU on a third-party accelerator: the sample virtual NPU (linked through @kiln_backends, chosen by name) declares
// its peak FLOP/s per dtype (Accelerator::PeakFlops), and ThroughputMonitor's train/device/mfu is
// train/device/flops_per_sec over that declaration, for the dtype of the run's precision.
#include <cstdint>
#include <memory>
#include <optional>

#include "gtest/gtest.h"
#include "hal/precision.h"
#include "hal/registry.h"
#include "trainer/callbacks/throughput_monitor.h"
#include "trainer/core/logger.h"
#include "trainer/synthetic_data.h"
#include "trainer/testing/test_support.h"
#include "trainer/trainer.h"

namespace {

constexpr char kDevice[] = "virtual_npu";

TEST(ThroughputMfuTest, MfuIsFlopsPerSecondOverTheBackendsDeclaredPeak) {
  absl::StatusOr<std::shared_ptr<kiln::Accelerator>> accelerator = kiln::AcceleratorRegistry::Default().Get(kDevice);
  ASSERT_TRUE(accelerator.ok()) << kDevice << " is not linked: Kiln's WORKSPACE lists it in kiln_backends for this "
                                << "test; registered: " << kiln::AcceleratorRegistry::Default().NameList();
  const kiln::LogicalDevice device = kiln::LogicalDevices(**accelerator, {0})[0];
  const std::optional<double> peak = (*accelerator)->PeakFlops(device, kiln::ComputeDtype(kiln::Precision::k32True));
  ASSERT_TRUE(peak.has_value()) << kDevice << " declares no float32 peak";

  auto logger = std::make_shared<kiln::MemoryLogger>();
  auto monitor = std::make_shared<kiln::ThroughputMonitor>(kiln::ThroughputMonitorOptions{.window_size = 3});
  kiln::Trainer trainer({.accelerator = kDevice,
                         .devices = 1,
                         .max_epochs = 1,
                         .limit_val_batches = 0,
                         .log_every_n_steps = 1,
                         .default_root_dir = kiln::testing::TempDir(),
                         .callbacks = {monitor},
                         .loggers = {logger},
                         .enable_checkpointing = false,
                         .enable_progress_bar = false});
  kiln::testing::RecordingClassifier model;
  kiln::SyntheticClusters data(kiln::testing::SmallData());
  ASSERT_TRUE(trainer.fit(model, data).ok());
  EXPECT_EQ(monitor->available_flops(), peak);
  // The counted FLOPs are the device's work: the same operators as on the CPU.
  ASSERT_TRUE(monitor->flops_per_batch("train").has_value());
  EXPECT_GT(*monitor->flops_per_batch("train"), 0);
  int rows = 0;
  for (const kiln::MemoryLogger::Row& row : logger->rows()) {
    if (!row.metrics.count("train/device/mfu")) continue;
    ++rows;
    EXPECT_DOUBLE_EQ(row.metrics.at("train/device/mfu"), row.metrics.at("train/device/flops_per_sec") / *peak);
  }
  EXPECT_EQ(rows, 8);  // 10 batches logged every step; the window of 3 is full from the third.
}

}  // namespace
