// ThroughputMonitor: Lightning's ThroughputMonitor callback. It times every batch of every stage on rank zero and logs
// Throughput's metrics (trainer/callbacks/throughput.h), prefixed with the stage as Lightning names it and the
// separator: "train/samples_per_sec", "train/device/mfu", "validate/device/batches_per_sec", "test/...",
// "predict/...". The same keys at the same steps as Lightning's:
//  - training: after each batch that ends an accumulation window, when the loggers log that step (every
//    log_every_n_steps, or when the run is told to stop), at the logged step (Trainer::logged_step());
//  - validation (not the sanity check), test and predict: after each batch whose number within the run is a multiple
//    of log_every_n_steps, at that number (1-based) as the step.
// Training's clock leaves out the time validation took, so validation does not lower training's rates.
//
// FLOPs: the module's flops_per_batch() when it declares one (Lightning's flops_per_batch attribute), for every
// stage, as Lightning uses it. Otherwise Kiln counts them itself (`measure_flops`): FlopCounter
// (trainer/core/flop_counter.h) counts the first batch of each stage (a training batch's forward, backward and
// optimizer step; an evaluation batch's forward), and that figure stands for every batch of the stage. Counting makes
// that one batch slower, which the first window's rates show.
//
// MFU (device/mfu) divides by the device's peak FLOP/s for the dtype the run's precision computes in
// (ComputeDtype): `available_flops` when given, else what the accelerator declares (Accelerator::PeakFlops: the
// CUDA backend from the GPU's properties, a third-party backend its own figures); an accelerator that declares none
// (the CPU) gets no MFU, as Lightning logs none without a known peak.
//
// Timing waits for the device before it reads the clock (as Lightning synchronizes CUDA), through LibTorch's device
// guard for any non-CPU device: each batch then costs one wait for the device's queue.
#ifndef KILN_TRAINER_CALLBACKS_THROUGHPUT_MONITOR_H_
#define KILN_TRAINER_CALLBACKS_THROUGHPUT_MONITOR_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "trainer/callbacks/throughput.h"
#include "trainer/core/callback.h"
#include "trainer/core/flop_counter.h"

namespace kiln {

struct ThroughputMonitorOptions {
  // Lightning's batch_size_fn: the samples in a batch. Unset: Batch::size() (the input's first dimension).
  std::function<int64_t(const Batch&)> batch_size_fn;
  // Lightning's length_fn: the items (tokens) in a batch, for items_per_sec. Unset: no items are counted.
  std::function<int64_t(const Batch&)> length_fn;
  // Lightning's Throughput arguments: the updates the rates are averaged over (at least 2), and the separator of
  // the keys.
  int64_t window_size = 100;
  std::string separator = "/";
  // The device's peak FLOP/s for MFU, instead of the accelerator's declaration (for the CPU, which declares none).
  std::optional<double> available_flops;
  // Count a batch's FLOPs with FlopCounter when the module declares no flops_per_batch(); false: no FLOP metrics
  // then (Lightning's behaviour without flops_per_batch).
  bool measure_flops = true;
};

class ThroughputMonitor final : public Callback {
 public:
  explicit ThroughputMonitor(ThroughputMonitorOptions options = {});

  std::string state_key() const override { return "ThroughputMonitor"; }
  absl::Status validate_config(const Trainer& trainer) const override;
  void setup(Trainer& trainer, LightningModule& module, Stage stage) override;
  void teardown(Trainer& trainer, LightningModule& module, Stage stage) override;
  void on_train_start(Trainer& trainer, LightningModule& module) override;
  void on_train_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch, int64_t batch_idx) override;
  void on_train_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs, const Batch& batch,
                          int64_t batch_idx) override;
  void on_validation_start(Trainer& trainer, LightningModule& module) override;
  void on_validation_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch, int64_t batch_idx,
                                 int64_t dataloader_idx) override;
  void on_validation_batch_end(Trainer& trainer, LightningModule& module, const Batch& batch, int64_t batch_idx,
                               int64_t dataloader_idx) override;
  void on_validation_end(Trainer& trainer, LightningModule& module) override;
  void on_test_start(Trainer& trainer, LightningModule& module) override;
  void on_test_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch, int64_t batch_idx,
                           int64_t dataloader_idx) override;
  void on_test_batch_end(Trainer& trainer, LightningModule& module, const Batch& batch, int64_t batch_idx,
                         int64_t dataloader_idx) override;
  void on_predict_start(Trainer& trainer, LightningModule& module) override;
  void on_predict_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch, int64_t batch_idx,
                              int64_t dataloader_idx) override;
  void on_predict_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs, const Batch& batch,
                            int64_t batch_idx, int64_t dataloader_idx) override;
  void on_exception(Trainer& trainer, LightningModule& module, const absl::Status& error) override;

  // The peak FLOP/s MFU divides by, as the last setup found it (unset: unknown, no MFU).
  std::optional<double> available_flops() const { return available_flops_; }
  // The FLOPs per batch of `stage` ("train", "validate", "test", "predict") the last run used: the module's
  // declaration or what FlopCounter counted; unset before its first batch, or when there is none.
  std::optional<double> flops_per_batch(const std::string& stage) const;

 private:
  using Clock = std::chrono::steady_clock;
  struct StageState {
    std::unique_ptr<Throughput> throughput;
    Clock::time_point t0;
    int64_t batches = 0, samples = 0, lengths = 0;
    int64_t run_batches = 0;  // Batches of the current run (an evaluation's step).
    std::optional<double> flops_per_batch;
  };

  void Start(Trainer& trainer, const std::string& stage);
  void BatchStart(LightningModule& module, const std::string& stage);
  // Adds the batch to the stage's totals; false when the update was refused (a warning says why).
  bool Update(Trainer& trainer, LightningModule& module, const Batch& batch, const std::string& stage);
  void Log(Trainer& trainer, const std::string& stage, int64_t step);
  void WaitForDevice(Trainer& trainer);
  void StopCounting();

  ThroughputMonitorOptions options_;
  std::optional<double> available_flops_;
  std::map<std::string, StageState> stages_;
  FlopCounter counter_;
  std::string counting_stage_;  // The stage whose first batch the counter counts ("" when none).
  bool device_wait_failed_ = false;
};

}  // namespace kiln

#endif  // KILN_TRAINER_CALLBACKS_THROUGHPUT_MONITOR_H_
