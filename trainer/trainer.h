// kiln::Trainer: Lightning's Trainer in C++.
//
//   kiln::Trainer trainer({.accelerator = "auto", .devices = "auto", .max_epochs = 10});
//   absl::Status status = trainer.fit(model, data);
//
// The accelerator may also be an instance of a class registered nowhere:
//   kiln::Trainer trainer({.accelerator = std::make_shared<NewSotaAccelerator>(), .devices = "4"});
//
// Hardware questions go through the connector (ResolvePlan) to the accelerator; the trainer itself knows no
// hardware. Bad options are reported by fit/validate as an InvalidArgument or FailedPrecondition Status before any
// device is touched.
//
// Hook order in fit:
//   on_fit_start
//   for each epoch: on_train_epoch_start, training_step x N, [validation loop], on_train_epoch_end
//     validation loop: validation_step x M, on_validation_epoch_end
//   on_fit_end
//
// Thread-safety: one Trainer runs one loop at a time, on the calling thread.
#ifndef KILN_TRAINER_TRAINER_H_
#define KILN_TRAINER_TRAINER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "connector/options.h"
#include "connector/plan.h"
#include "hal/registry.h"
#include "trainer/data_loader.h"
#include "trainer/lightning_module.h"
#include "trainer/metrics.h"

namespace kiln {

class ProgressReporter;
class Strategy;

// Lightning's `limit_*_batches`: an int is a number of batches, a double in [0, 1] a fraction of the loader.
class BatchLimit {
 public:
  BatchLimit(int count) : value_(static_cast<int64_t>(count)) {}  // NOLINT(google-explicit-constructor)
  BatchLimit(int64_t count) : value_(count) {}                   // NOLINT(google-explicit-constructor)
  BatchLimit(double fraction) : value_(fraction) {}              // NOLINT(google-explicit-constructor)

  // The number of batches to run out of `available`, or an error naming `flag` for negative values and fractions
  // above 1.
  absl::StatusOr<int64_t> Resolve(int64_t available, absl::string_view flag) const;

 private:
  std::variant<int64_t, double> value_;
};

struct TrainerOptions {
  // Hardware and scale, resolved by the connector.
  AcceleratorFlag accelerator;  // "auto"
  Devices devices;              // "auto"
  std::string strategy = "auto";
  std::string precision = "32-true";
  int num_nodes = 1;

  // Loops, with Lightning's defaults.
  std::optional<int64_t> max_epochs;  // Unset and max_steps == -1: 1000 epochs, with Lightning's warning.
  int64_t max_steps = -1;             // -1: no limit.
  BatchLimit limit_train_batches = 1.0;
  BatchLimit limit_val_batches = 1.0;
  int64_t check_val_every_n_epoch = 1;
  int64_t log_every_n_steps = 50;
  bool enable_progress_bar = true;
  std::optional<uint64_t> seed;  // Seeds LibTorch's generators when set.
  std::string default_root_dir = ".";

  // Where names are looked up; the default registry when null. Tests pass their own.
  const AcceleratorRegistry* registry = nullptr;
};

class Trainer {
 public:
  explicit Trainer(TrainerOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains `model` on `data`'s train loader, validating on its val loader (when it has one).
  absl::Status fit(LightningModule& model, DataModule& data);
  // One pass over the val loader; returns the epoch metrics.
  absl::StatusOr<MetricMap> validate(LightningModule& model, DataModule& data);

  // The plan of the last fit/validate (empty before).
  const std::optional<Plan>& plan() const { return plan_; }
  // Latest step and epoch metrics, by name (Lightning's trainer.callback_metrics).
  const MetricMap& callback_metrics() const { return callback_metrics_; }
  int64_t current_epoch() const { return current_epoch_; }
  int64_t global_step() const { return global_step_; }

 private:
  absl::Status Prepare();
  absl::Status RunFit(LightningModule& model, DataModule& data);
  absl::StatusOr<MetricMap> RunValidation(LightningModule& model, DataLoader& loader, int64_t limit);

  TrainerOptions options_;
  std::optional<Plan> plan_;
  std::unique_ptr<Strategy> strategy_;
  std::unique_ptr<ProgressReporter> progress_;
  MetricMap callback_metrics_;
  int64_t current_epoch_ = 0;
  int64_t global_step_ = 0;
};

}  // namespace kiln

#endif  // KILN_TRAINER_TRAINER_H_
