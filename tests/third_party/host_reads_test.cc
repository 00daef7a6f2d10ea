// The training step never waits for the device unless something needs a value on the host. On the sample virtual
// NPU (linked through @kiln_backends, chosen by name), whose statistics count the host's reads of its memory
// (device_to_host_copies: a copy to the CPU, or an operator such as item()'s that returns a value rather than a
// tensor), a fit with Kiln's fused Adam reads nothing on the steps that write no log row, and reads on the ones that
// do. Under LibTorch 1.13, which has no fused kernels, the trainer reads the loss on the host every step instead,
// which the test checks too (and says so in its output).
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hal/registry.h"
#include "torch/version.h"
#include "trainer/classifier.h"
#include "trainer/core/callback.h"
#include "trainer/optim/fused_optimizers.h"
#include "trainer/synthetic_data.h"
#include "trainer/testing/test_support.h"
#include "trainer/trainer.h"

namespace {

constexpr char kDevice[] = "virtual_npu";
constexpr int64_t kLogEvery = 4;

// The device's read counter at the start of every training batch, and at the end of the last one.
class ReadCounter final : public kiln::Callback {
 public:
  explicit ReadCounter(std::shared_ptr<kiln::Accelerator> accelerator) : accelerator_(std::move(accelerator)) {}
  std::string state_key() const override { return "ReadCounter"; }
  void on_train_batch_start(kiln::Trainer& trainer, kiln::LightningModule& module, const kiln::Batch& batch,
                            int64_t batch_idx) override {
    counts.push_back(Reads(module));
  }
  void on_train_epoch_end(kiln::Trainer& trainer, kiln::LightningModule& module) override {
    if (at_epoch_end < 0) at_epoch_end = Reads(module);
  }
  std::vector<double> counts;
  double at_epoch_end = -1;

 private:
  double Reads(kiln::LightningModule& module) const {
    absl::StatusOr<kiln::DeviceStats> stats =
        accelerator_->GetDeviceStats(kiln::LogicalDeviceOf(*accelerator_, module.parameters().front().device()));
    EXPECT_TRUE(stats.ok()) << stats.status();
    if (!stats.ok() || stats->count("device_to_host_copies") == 0) {
      ADD_FAILURE() << kDevice << " has no device_to_host_copies statistic";
      return 0;
    }
    return stats->at("device_to_host_copies");
  }
  std::shared_ptr<kiln::Accelerator> accelerator_;
};

// The test's classifier (train_loss logged each step, for the progress bar and the epoch), stepped by FusedAdam.
class FusedAdamClassifier final : public kiln::testing::RecordingClassifier {
 public:
  kiln::OptimizerConfig configure_optimizers() override {
    return std::make_shared<kiln::FusedAdam>(parameters(), torch::optim::AdamOptions(1e-2));
  }
};

TEST(HostReadsTest, StepsThatReadNothingMakeNoDeviceToHostCopy) {
  absl::StatusOr<std::shared_ptr<kiln::Accelerator>> accelerator = kiln::AcceleratorRegistry::Default().Get(kDevice);
  ASSERT_TRUE(accelerator.ok()) << kDevice << " is not linked: Kiln's WORKSPACE lists it in kiln_backends for this "
                                << "test; registered: " << kiln::AcceleratorRegistry::Default().NameList();
  auto counter = std::make_shared<ReadCounter>(*accelerator);
  kiln::Trainer trainer({.accelerator = kDevice,
                         .devices = 1,
                         .max_epochs = 1,
                         .num_sanity_val_steps = 0,
                         .log_every_n_steps = kLogEvery,
                         .seed = 3,
                         .default_root_dir = kiln::testing::TempDir(),
                         .callbacks = {counter},
                         .enable_checkpointing = false,
                         .enable_progress_bar = false});
  torch::manual_seed(3);
  FusedAdamClassifier model;
  kiln::SyntheticClusters data(kiln::testing::SmallData());  // 10 training batches.
  const absl::Status status = trainer.fit(model, data);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(counter->counts.size(), 10u);
  ASSERT_GE(counter->at_epoch_end, counter->counts.back());
  // Batch i's reads: from its start to the next batch's (the last batch's run to the epoch's end). After batch i
  // the global step is i + 1; the CSV logger writes a row when that is a multiple of kLogEvery.
  std::vector<double> reads;
  for (size_t i = 0; i < counter->counts.size(); ++i) {
    const double next = i + 1 < counter->counts.size() ? counter->counts[i + 1] : counter->at_epoch_end;
    reads.push_back(next - counter->counts[i]);
  }
  std::printf("device-to-host copies per training batch:");
  for (const double count : reads) std::printf(" %.0f", count);
  std::printf(" (a log row every %lld steps)\n", static_cast<long long>(kLogEvery));
  for (size_t i = 0; i + 1 < reads.size(); ++i) {
    const bool log_row = (i + 1) % kLogEvery == 0;
    if (log_row) {
      EXPECT_GT(reads[i], 0) << "batch " << i << " wrote a log row, which reads the logged values";
    } else {
      EXPECT_EQ(reads[i], 0) << "batch " << i << " read the device; nothing was asked of it";
    }
  }
}

}  // namespace
