// kiln::Tuner: Lightning's Tuner (lightning.pytorch.tuner) for a kiln::Trainer: the learning-rate range test
// (lr_find) and the largest batch size that fits the device's memory (scale_batch_size).
//
//   kiln::Trainer trainer({.max_epochs = 10});
//   kiln::Tuner tuner(trainer);
//   absl::StatusOr<std::optional<kiln::LRFinder>> found = tuner.lr_find(model, data);
//   if (found.ok() && found->has_value()) std::optional<double> lr = (*found)->suggestion();
//   trainer.fit(model, data);
//
// Each runs as a fit of its own, as Lightning's does, with the trainer's options but none of its callbacks, no
// loggers, no checkpoints, no progress bar and no sanity check, on the same processes (under ddp, call it on every
// rank, as the rest of the program: docs/library.md, "Several processes"). Afterwards the module's parameters and
// buffers, its train/eval mode and LibTorch's CPU generator are what they were before (bit for bit); the trainer
// itself is not touched, and its next fit configures its optimizers afresh. Lightning's names, defaults and
// arithmetic throughout; where Kiln differs it says so below.
//
// Attributes. Lightning finds the learning rate (`lr`, `learning_rate` or attr_name) and the batch size
// (batch_arg_name) as an attribute of the module, of its hparams, or of the datamodule, by name. C++ has no
// attributes by name: a module or data module that has one derives from kiln::TunableAttributes too (below), or,
// for the learning rate, keeps it in its hyper-parameters (LightningModule::save_hyperparameters, written back with
// 17 significant digits). As Lightning's lightning_getattr and lightning_setattr: the places are the module, its
// hparams and the data module, in that order; the value read is the last place's that has the name, and a value
// found is written to every place that has it (so a batch size kept in both the hparams and the data module is read
// from the data module, whose loaders use it, and written to both).
//
// Thread-safety: as the Trainer: one call at a time, on the thread that owns the trainer.
#ifndef KILN_TRAINER_TUNER_H_
#define KILN_TRAINER_TUNER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/core/data_loader.h"
#include "trainer/core/lightning_module.h"

namespace kiln {

class Trainer;

// Named numeric attributes a module or data module offers the Tuner (Lightning's lightning_getattr and
// lightning_setattr find them by name): derive from it beside LightningModule or DataModule.
class TunableAttributes {
 public:
  virtual ~TunableAttributes() = default;
  // The value of attribute `name`, or nullopt when there is none of that name. Must not throw.
  virtual std::optional<double> get_attribute(std::string_view name) const = 0;
  // Sets attribute `name` (one get_attribute knows) to `value`; a batch size is a whole number. The next fit must
  // see it: a data module makes its loaders with the new batch size when train_dataloader() is next called.
  virtual void set_attribute(std::string_view name, double value) = 0;
};

// Tuner::lr_find's settings: Lightning's arguments and defaults.
struct LRFinderOptions {
  double min_lr = 1e-8;        // The first step's learning rate.
  double max_lr = 1.0;         // The last step's.
  int64_t num_training = 100;  // Optimizer steps, one learning rate each.
  std::string mode = "exponential";  // "exponential" or "linear": how the rate rises from step to step.
  // Stop when the smoothed loss passes early_stop_threshold x the best so far; nullopt: never.
  std::optional<double> early_stop_threshold = 4.0;
  bool update_attr = true;  // Set the learning-rate attribute to suggestion() afterwards (when there is one).
  std::string attr_name;    // Empty: "lr" or "learning_rate", whichever is found first.
};

// What lr_find found (Lightning's _LRFinder): the learning rate of each optimizer step and the loss after it,
// smoothed as Lightning smooths it (an exponential moving average with beta = 0.98, bias-corrected).
struct LRFinder {
  std::string mode;
  double lr_min = 0;
  double lr_max = 0;
  int64_t num_training = 0;
  std::vector<double> lrs;     // results["lr"]
  std::vector<double> losses;  // results["loss"]; NaN where a step gave no loss.

  // Lightning's rule: the learning rate where the smoothed loss falls fastest (the most negative
  // torch.gradient of losses over lrs, in float32, as Lightning computes it), among the points left after dropping
  // `skip_begin` at the start and `skip_end` at the end (Python's slicing: skip_end = 0 leaves none) and those whose
  // loss is not finite. nullopt when fewer than 2 points are left.
  std::optional<double> suggestion(int64_t skip_begin = 10, int64_t skip_end = 1) const;
  // The index in lrs/losses of that learning rate (Lightning's _optimal_idx).
  std::optional<int64_t> optimal_index(int64_t skip_begin = 10, int64_t skip_end = 1) const;
};

// Tuner::scale_batch_size's settings: Lightning's arguments and defaults.
struct ScaleBatchSizeOptions {
  // "power": double the batch size until a trial runs out of memory (or a limit below), then take the last that
  // fitted; "binsearch": the same, then a binary search between the last that fitted and the first that did not.
  std::string mode = "power";
  int64_t steps_per_trial = 3;  // Optimizer steps (and validation batches) each batch size runs.
  int64_t init_val = 2;         // The first batch size tried.
  int64_t max_trials = 25;      // The most batch sizes tried.
  std::string batch_arg_name = "batch_size";
  double margin = 0.05;   // binsearch only: the result is lowered by this share, in [0, 1), for a safety margin.
  int64_t max_val = 8192;  // No batch size above this is tried (where nothing runs out of memory, as on the CPU).
};

class Tuner {
 public:
  // `trainer` outlives the Tuner; its options are those of every run the Tuner makes.
  explicit Tuner(Trainer& trainer) : trainer_(trainer) {}

  // The learning-rate range test: num_training optimizer steps on `data`'s training batches, the learning rate
  // rising from min_lr to max_lr (Lightning's schedule: min_lr for the first step, then
  // min_lr x (max_lr / min_lr)^((k + 1) / num_training) for step k, or the linear equivalent), stopping early when
  // the smoothed loss diverges. configure_optimizers must return one optimizer; its schedulers are not stepped. On
  // several processes every rank takes rank zero's decision to stop and gets rank zero's results, as Lightning
  // broadcasts them. Kiln never trains on a non-finite loss: where Lightning would step on one, lr_find records NaN
  // for that step and stops there, as at a divergence.
  //
  // nullopt (with a warning) under fast_dev_run, as Lightning. InvalidArgument, before anything runs, for a bad
  // option or, with update_attr, when no learning-rate attribute is found (naming where it looked); the errors of
  // the fit it runs otherwise.
  absl::StatusOr<std::optional<LRFinder>> lr_find(LightningModule& model, DataModule& data,
                                                  const LRFinderOptions& options = {});

  // The largest batch size that trains without running out of memory, by trials of steps_per_trial steps each, as
  // Lightning searches (its quirks included: the search stops at a batch size that covers the whole training set,
  // max_val caps each doubling, and binsearch takes `margin` off at the end). Out of memory is what the device's
  // allocator (or LibTorch's CPU allocator, or operator new) reports by throwing c10::OutOfMemoryError or
  // std::bad_alloc in a trial; any other failure ends the search with that error. On the CPU nothing runs out of
  // memory before max_trials, the training set's size or max_val ends the search, as in Lightning. The batch-size
  // attribute is left at the result, which is returned.
  //
  // nullopt (with a warning) under fast_dev_run. InvalidArgument for a bad option, on several processes (Lightning
  // refuses distributed strategies too), or when no attribute batch_arg_name is found.
  absl::StatusOr<std::optional<int64_t>> scale_batch_size(LightningModule& model, DataModule& data,
                                                          const ScaleBatchSizeOptions& options = {});

 private:
  Trainer& trainer_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_TUNER_H_
