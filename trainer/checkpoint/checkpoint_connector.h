// What the trainer keeps in a checkpoint and how it comes back (Lightning's checkpoint connector): the records of a
// checkpoint are listed in trainer/trainer.h; the file format and its checks are checkpoint_io.h's.
//
// Thread-safety: call from the loop thread, while nothing else uses the state's objects.
#ifndef KILN_TRAINER_CHECKPOINT_CHECKPOINT_CONNECTOR_H_
#define KILN_TRAINER_CHECKPOINT_CHECKPOINT_CONNECTOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "c10/core/Device.h"
#include "trainer/core/callback.h"
#include "trainer/core/lightning_module.h"
#include "trainer/plugins/precision/precision_plugin.h"

namespace kiln {

// Where the loops stand: what a checkpoint resumes.
struct LoopProgress {
  int64_t epoch = 0;           // The epoch to resume in.
  int64_t batch_in_epoch = 0;  // The next batch to run in it.
  int64_t global_step = 0;     // Optimizer steps so far.
};

// The live objects a checkpoint captures and restores; the trainer owns them.
struct TrainingState {
  LightningModule& model;
  OptimizerConfig& optimizers;
  std::vector<int64_t>& scheduler_steps;  // How often each of optimizers.schedulers has stepped.
  const std::vector<std::shared_ptr<Callback>>& callbacks;
  PrecisionPlugin& precision;
};

// The bytes of a checkpoint of `state` at `progress`; `path` names the file in errors.
absl::StatusOr<std::string> DumpTrainingState(const std::string& path, const TrainingState& state,
                                              const LoopProgress& progress);

// Reads the checkpoint at `path` into `state`: the module's parameters and buffers and, with `restore_training`, the
// optimizers (their state moved to `device`, where the parameters are), the schedulers, the callbacks' and the
// precision plugin's state and the CPU generator. Everything is read and checked before anything changes, so a
// damaged, truncated or foreign file, or one that does not fit this model and configuration, is refused with the
// state untouched. Returns where the loops stood (zeros without `restore_training`).
absl::StatusOr<LoopProgress> RestoreTrainingState(const std::string& path, const TrainingState& state,
                                                  const c10::Device& device, bool restore_training);

}  // namespace kiln

#endif  // KILN_TRAINER_CHECKPOINT_CHECKPOINT_CONNECTOR_H_
