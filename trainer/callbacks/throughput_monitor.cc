#include "trainer/callbacks/throughput_monitor.h"

#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "c10/core/impl/DeviceGuardImplInterface.h"
#include "c10/util/Exception.h"
#include "glog/logging.h"
#include "hal/precision.h"
#include "trainer/strategies/strategy.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

// Lightning's RunningStage values, which prefix the keys.
constexpr char kTrain[] = "train";
constexpr char kValidate[] = "validate";
constexpr char kTest[] = "test";
constexpr char kPredict[] = "predict";

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

ThroughputMonitor::ThroughputMonitor(ThroughputMonitorOptions options) : options_(std::move(options)) {}

absl::Status ThroughputMonitor::validate_config(const Trainer& trainer) const {
  (void)trainer;
  if (options_.window_size < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ThroughputMonitor(window_size=", options_.window_size,
        "): the window must hold at least 2 batches (rates are taken between its first and last); use 2 or more "
        "(Lightning's default is 100; fit: --throughput_window_size)"));
  }
  if (options_.available_flops.has_value() && !(*options_.available_flops > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("ThroughputMonitor(available_flops=", *options_.available_flops,
                                                   "): the device's peak FLOP/s must be positive; leave it unset to "
                                                   "use the accelerator's declaration (fit: "
                                                   "--throughput_available_flops=0)"));
  }
  return absl::OkStatus();
}

std::optional<double> ThroughputMonitor::flops_per_batch(const std::string& stage) const {
  const auto found = stages_.find(stage);
  return found == stages_.end() ? std::nullopt : found->second.flops_per_batch;
}

void ThroughputMonitor::setup(Trainer& trainer, LightningModule& module, Stage stage) {
  (void)module;
  available_flops_ = options_.available_flops;
  if (!available_flops_.has_value() && trainer.plan().has_value() && trainer.plan()->accelerator != nullptr) {
    const Plan& plan = *trainer.plan();
    available_flops_ = plan.accelerator->PeakFlops(plan.root_logical_device(), ComputeDtype(plan.precision));
  }
  auto make = [&](const char* name) {
    StageState& state = stages_[name];
    state.throughput = std::make_unique<Throughput>(available_flops_, trainer.world_size(), options_.window_size,
                                                    options_.separator);
    // A new entry point counts again (the module may have changed), and a fit's stages start from zero.
    state.flops_per_batch.reset();
    if (stage == Stage::kFit) state.batches = state.samples = state.lengths = 0;
  };
  switch (stage) {
    case Stage::kFit:
      make(kTrain);
      make(kValidate);
      break;
    case Stage::kValidate:
      make(kValidate);
      break;
    case Stage::kTest:
      make(kTest);
      break;
    case Stage::kPredict:
      make(kPredict);
      break;
  }
}

void ThroughputMonitor::teardown(Trainer& trainer, LightningModule& module, Stage stage) { StopCounting(); }

void ThroughputMonitor::on_exception(Trainer& trainer, LightningModule& module, const absl::Status& error) {
  StopCounting();
}

void ThroughputMonitor::StopCounting() {
  counter_.Stop();
  counting_stage_.clear();
}

void ThroughputMonitor::Start(Trainer& trainer, const std::string& stage) {
  StageState& state = stages_[stage];
  if (state.throughput == nullptr) {
    state.throughput = std::make_unique<Throughput>(available_flops_, trainer.world_size(), options_.window_size,
                                                    options_.separator);
  }
  // As Lightning: every run of a fit starts its window and totals afresh; other entry points keep their totals.
  state.throughput->Reset();
  if (stage == kTrain || stage == kValidate) state.batches = state.samples = state.lengths = 0;
  state.run_batches = 0;
  state.t0 = Clock::now();
}

void ThroughputMonitor::BatchStart(LightningModule& module, const std::string& stage) {
  StageState& state = stages_[stage];
  if (!options_.measure_flops || module.flops_per_batch().has_value() || state.flops_per_batch.has_value() ||
      counter_.counting()) {
    return;
  }
  counter_.Reset();
  if (absl::Status started = counter_.Start(); !started.ok()) {
    LOG(WARNING) << "ThroughputMonitor: cannot count the FLOPs of a " << stage << " batch: " << started.message();
    state.flops_per_batch = 0;  // Not tried again; no FLOP metrics for the stage.
    return;
  }
  counting_stage_ = stage;
}

void ThroughputMonitor::WaitForDevice(Trainer& trainer) {
  if (device_wait_failed_ || trainer.strategy() == nullptr) return;
  const c10::Device device = trainer.strategy()->root_device();
  if (device.is_cpu()) return;
  try {
    c10::impl::getDeviceGuardImpl(device.type())->synchronizeDevice(device.has_index() ? device.index() : 0);
  } catch (const c10::Error& e) {
    device_wait_failed_ = true;
    LOG(WARNING) << "ThroughputMonitor: cannot wait for " << device.str() << " before reading the clock ("
                 << e.what_without_backtrace() << "); times are taken when the host is done, not the device";
  }
}

bool ThroughputMonitor::Update(Trainer& trainer, LightningModule& module, const Batch& batch,
                               const std::string& stage) {
  StageState& state = stages_[stage];
  WaitForDevice(trainer);
  const double elapsed = Seconds(Clock::now() - state.t0);
  if (counting_stage_ == stage) {
    counter_.Stop();
    counting_stage_.clear();
    state.flops_per_batch = static_cast<double>(counter_.total());
  }
  if (options_.length_fn) state.lengths += options_.length_fn(batch);
  state.samples += options_.batch_size_fn ? options_.batch_size_fn(batch) : batch.size();
  ++state.batches;
  ++state.run_batches;
  std::optional<double> flops;
  if (const std::optional<int64_t> declared = module.flops_per_batch(); declared.has_value()) {
    flops = static_cast<double>(*declared);
  } else if (state.flops_per_batch.has_value() && *state.flops_per_batch > 0) {
    flops = state.flops_per_batch;
  }
  const absl::Status updated = state.throughput->Update(
      elapsed, state.batches, state.samples,
      options_.length_fn ? std::optional<int64_t>(state.lengths) : std::nullopt, flops);
  // Lightning raises here (a batch_size_fn or length_fn that counts nothing, a clock that did not move): the run
  // stops with the message.
  if (!updated.ok()) throw std::invalid_argument(std::string(updated.message()));
  return true;
}

void ThroughputMonitor::Log(Trainer& trainer, const std::string& stage, int64_t step) {
  const StageState& state = stages_[stage];
  MetricMap metrics;
  for (auto& [key, value] : state.throughput->Compute()) {
    metrics[absl::StrCat(stage, state.throughput->separator(), key)] = value;
  }
  trainer.log_metrics(std::move(metrics), step);
}

void ThroughputMonitor::on_train_start(Trainer& trainer, LightningModule& module) {
  if (trainer.is_global_zero()) Start(trainer, kTrain);
}

void ThroughputMonitor::on_train_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch,
                                             int64_t batch_idx) {
  if (trainer.is_global_zero()) BatchStart(module, kTrain);
}

void ThroughputMonitor::on_train_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs,
                                           const Batch& batch, int64_t batch_idx) {
  if (!trainer.is_global_zero()) return;
  Update(trainer, module, batch, kTrain);
  // Rates are logged when an accumulation window ends, so that they include its optimizer step, and only at the
  // steps the loggers log (Lightning's should_update_logs: the step about to be counted, or a stop).
  const int64_t accumulate = trainer.options().accumulate_grad_batches;
  const bool window_ends = (batch_idx + 1) % accumulate == 0 || batch_idx + 1 == trainer.num_training_batches();
  const int64_t every = trainer.options().log_every_n_steps;
  if (!window_ends || every <= 0) return;
  if ((trainer.logged_step() + 1) % every == 0 || trainer.should_stop()) Log(trainer, kTrain, trainer.logged_step());
}

void ThroughputMonitor::on_validation_start(Trainer& trainer, LightningModule& module) {
  if (trainer.is_global_zero() && !trainer.sanity_checking()) Start(trainer, kValidate);
}

void ThroughputMonitor::on_validation_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch,
                                                  int64_t batch_idx, int64_t dataloader_idx) {
  if (trainer.is_global_zero() && !trainer.sanity_checking()) BatchStart(module, kValidate);
}

void ThroughputMonitor::on_validation_batch_end(Trainer& trainer, LightningModule& module, const Batch& batch,
                                                int64_t batch_idx, int64_t dataloader_idx) {
  if (!trainer.is_global_zero() || trainer.sanity_checking()) return;
  Update(trainer, module, batch, kValidate);
  const int64_t every = trainer.options().log_every_n_steps;
  const int64_t step = stages_[kValidate].run_batches;
  if (every > 0 && (step % every == 0 || trainer.should_stop())) Log(trainer, kValidate, step);
}

void ThroughputMonitor::on_validation_end(Trainer& trainer, LightningModule& module) {
  if (!trainer.is_global_zero() || trainer.sanity_checking()) return;
  const auto train = stages_.find(kTrain);
  if (train == stages_.end() || train->second.throughput == nullptr) return;  // Not fitting.
  StageState& val = stages_[kValidate];
  // Training's clock skips from where its last batch ended to where validation's last batch ended.
  const Clock::duration train_elapsed =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(train->second.throughput->last_time()));
  const Clock::duration val_elapsed =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(val.throughput->last_time()));
  const Clock::time_point training_finished = train->second.t0 + train_elapsed;
  train->second.t0 += (val.t0 - training_finished) + val_elapsed;
}

void ThroughputMonitor::on_test_start(Trainer& trainer, LightningModule& module) {
  if (trainer.is_global_zero()) Start(trainer, kTest);
}

void ThroughputMonitor::on_test_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch,
                                            int64_t batch_idx, int64_t dataloader_idx) {
  if (trainer.is_global_zero()) BatchStart(module, kTest);
}

void ThroughputMonitor::on_test_batch_end(Trainer& trainer, LightningModule& module, const Batch& batch,
                                          int64_t batch_idx, int64_t dataloader_idx) {
  if (!trainer.is_global_zero()) return;
  Update(trainer, module, batch, kTest);
  const int64_t every = trainer.options().log_every_n_steps;
  const int64_t step = stages_[kTest].run_batches;
  if (every > 0 && (step % every == 0 || trainer.should_stop())) Log(trainer, kTest, step);
}

void ThroughputMonitor::on_predict_start(Trainer& trainer, LightningModule& module) {
  if (trainer.is_global_zero()) Start(trainer, kPredict);
}

void ThroughputMonitor::on_predict_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch,
                                               int64_t batch_idx, int64_t dataloader_idx) {
  if (trainer.is_global_zero()) BatchStart(module, kPredict);
}

void ThroughputMonitor::on_predict_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs,
                                             const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) {
  if (!trainer.is_global_zero()) return;
  Update(trainer, module, batch, kPredict);
  const int64_t every = trainer.options().log_every_n_steps;
  const int64_t step = stages_[kPredict].run_batches;
  if (every > 0 && (step % every == 0 || trainer.should_stop())) Log(trainer, kPredict, step);
}

}  // namespace kiln
