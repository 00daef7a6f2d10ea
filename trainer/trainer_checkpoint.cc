// Trainer::save_checkpoint, remove_checkpoint and the restore path of fit/validate/test/predict: where the files go
// and when; what they hold is trainer/checkpoint/lightning/checkpoint_connector.h's.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "trainer/callbacks/model_checkpoint.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/checkpoint/lightning/checkpoint_connector.h"
#include "trainer/checkpoint/lightning/optimizer_state_dict.h"
#include "trainer/checkpoint/sharded/sharded_checkpoint.h"
#include "trainer/loops/fit_loop.h"
#include "trainer/plugins/precision/precision_plugin.h"
#include "trainer/strategies/strategy.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

// The checkpoint code's reading and writing of an optimizer's state dictionary, for strategies that convert it.
Strategy::OptimizerStateCodec CheckpointCodec() {
  return {.state_dict = [](const torch::optim::Optimizer& optimizer) { return OptimizerStateDict(optimizer); },
          .load_state_dict = [](torch::optim::Optimizer& optimizer, const c10::IValue& dict) -> absl::Status {
            absl::StatusOr<std::function<void()>> load = PrepareOptimizerLoad(optimizer, dict);
            if (!load.ok()) return load.status();
            (*load)();
            return absl::OkStatus();
          }};
}

// Where each slice of `slices` (the strategy's ShardedSaveSlices) lies in its whole parameter, for the writer.
std::unordered_map<std::string, ShardedPart> PartsOf(
    const torch::nn::Module& model, const std::unordered_map<std::string, Strategy::ParameterSlice>& slices) {
  std::unordered_map<std::string, ShardedPart> parts;
  for (const auto& parameter : model.named_parameters()) {
    const auto found = slices.find(parameter.key());
    if (found == slices.end()) continue;
    const Strategy::ParameterSlice& slice = found->second;
    ShardedPart part{.whole_sizes = parameter.value().sizes().vec(),
                     .sizes = parameter.value().sizes().vec(),
                     .offsets = std::vector<int64_t>(parameter.value().dim(), 0),
                     .replica = slice.replica,
                     .replicas = slice.replicas};
    if (slice.dim >= 0 && slice.dim < parameter.value().dim()) {
      part.whole_sizes[slice.dim] *= slice.count;
      part.offsets[slice.dim] = slice.index * part.sizes[slice.dim];
    }
    parts.emplace(parameter.key(), std::move(part));
  }
  return parts;
}

// A sharded checkpoint (sharded_checkpoint.h) of `state` as each rank holds it (whole, or with the parts `slices`
// names), saved asynchronously: the snapshot (the copies of this rank's tensors) is taken here, on the loop's thread;
// the pieces are written, the ranks exchange their records through the store and rank 0 publishes the folder on
// `writer`'s thread while training goes on. A snapshot that fails on this rank is returned here, and still takes part
// in the write (which then fails on every rank, publishing nothing).
absl::Status SaveSharded(const std::string& path, const TrainingState& state, const LoopProgress& progress,
                         Strategy& strategy, const std::unordered_map<std::string, Strategy::ParameterSlice>& slices,
                         CheckpointWriter& writer) {
  std::unordered_map<const c10::TensorImpl*, std::string> names;
  for (const auto& parameter : state.model.named_parameters()) {
    names.emplace(parameter.value().unsafeGetTensorImpl(), parameter.key());
  }
  ShardedCheckpointRanks ranks{.rank = strategy.global_rank(), .world_size = strategy.world_size()};
  for (const auto& optimizer : state.optimizers.optimizers) {
    std::vector<std::string>& numbered = ranks.optimizer_parameter_names.emplace_back();
    for (const auto& group : optimizer->param_groups()) {
      for (const at::Tensor& parameter : group.params()) {
        const auto found = names.find(parameter.unsafeGetTensorImpl());
        numbered.push_back(found != names.end() ? found->second : absl::StrCat(numbered.size()));
      }
    }
  }
  ranks.parts = PartsOf(state.model, slices);
  // The writer's thread exchanges through the store: the process group is the loop's.
  ranks.all_gather = [&strategy](const std::string& mine) {
    return strategy.ExchangeThroughStore("writing a sharded checkpoint", mine);
  };
  absl::StatusOr<CheckpointSnapshot> snapshot = TakeCheckpointSnapshot(path, state, progress);
  const absl::Status taken = snapshot.status();
  absl::Status submitted = writer.SubmitCollective(
      path, std::move(snapshot), [path, ranks = std::move(ranks)](absl::StatusOr<c10::impl::GenericDict> contents) {
        return WriteShardedCheckpoint(path, std::move(contents), ranks);
      });
  return taken.ok() ? submitted : taken;
}

}  // namespace

absl::Status Trainer::save_checkpoint(const std::string& path) { return save_checkpoint(path, false); }

absl::Status Trainer::save_checkpoint(const std::string& path, bool weights_only) {
  if (model_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("save_checkpoint('", path, "') was called outside fit; call it from a hook or callback"));
  }
  // Never a checkpoint of a run that met a non-finite loss the device has not reported yet (RunTrainEpoch).
  if (absl::Status checked = fit_loop_->epoch_loop().CheckPendingLosses(); !checked.ok()) return checked;
  // Where the loops stand, from the loops (FitLoop::state_dict), and the schedulers' steps they counted.
  const LoopProgress progress = fit_loop_->state_dict();
  std::vector<int64_t> scheduler_steps = fit_loop_->epoch_loop().scheduler_progress().total;
  const TrainingState state{*model_, optimizers_, scheduler_steps, callbacks_, *precision_, data_, weights_only};
  if (checkpoint_writer_ == nullptr) checkpoint_writer_ = std::make_unique<CheckpointWriter>();
  // The state made whole on this rank (by a strategy that shards it, WithFullState below; every rank takes part).
  const auto save_whole = [&] {
    if (strategy_->SavesShardedCheckpoints()) {
      return SaveSharded(path, state, progress, *strategy_, /*slices=*/{}, *checkpoint_writer_);
    }
    // Every rank calls the checkpoint hooks, as Lightning does; rank zero alone writes the file.
    if (!is_global_zero()) return CallSaveCheckpointHooks(path, state);
    // Only the snapshot (copies of the tensors and values) is taken here, at the step; the dictionary, pickling, the
    // zip and its CRCs are made on the writer's thread, so the loop does not wait for them.
    absl::StatusOr<CheckpointSnapshot> snapshot = TakeCheckpointSnapshot(path, state, progress);
    if (!snapshot.ok()) return snapshot.status();
    return checkpoint_writer_->SubmitSnapshot(path, *std::move(snapshot));
  };
  // A sharded checkpoint of the state as the ranks hold it, where the strategy says what each holds (model_parallel's
  // slices): nothing is gathered.
  const std::optional<std::unordered_map<std::string, Strategy::ParameterSlice>> slices =
      strategy_->SavesShardedCheckpoints() ? strategy_->ShardedSaveSlices(*model_) : std::nullopt;
  const absl::Status status =
      slices.has_value()
          ? SaveSharded(path, state, progress, *strategy_, *slices, *checkpoint_writer_)
          : strategy_->WithFullState(optimizers_.optimizers, CheckpointCodec(), /*restoring=*/false, save_whole);
  strategy_->Barrier();
  return status;
}

absl::Status Trainer::remove_checkpoint(const std::string& path) {
  if (!is_global_zero()) return absl::OkStatus();
  if (checkpoint_writer_ == nullptr) checkpoint_writer_ = std::make_unique<CheckpointWriter>();
  return checkpoint_writer_->SubmitRemove(path);
}

absl::StatusOr<std::string> Trainer::ResolveCheckpointPath(const std::string& ckpt_path) const {
  if (ckpt_path == "last") return FindLastCheckpoint(options_.default_root_dir);
  if (ckpt_path == "best") {
    ModelCheckpoint* checkpoint = checkpoint_callback();
    if (checkpoint == nullptr || checkpoint->best_model_path().empty()) {
      return absl::InvalidArgumentError(
          "ckpt_path=\"best\" but no ModelCheckpoint of this trainer has saved a best checkpoint yet; fit first, "
          "or pass a checkpoint path");
    }
    return checkpoint->best_model_path();
  }
  return ckpt_path;
}

absl::Status Trainer::RestoreCheckpoint(LightningModule& model, const std::string& ckpt_path, bool restore_training,
                                        DataModule* data) {
  absl::StatusOr<std::string> path = ResolveCheckpointPath(ckpt_path);
  if (!path.ok()) return path.status();
  absl::StatusOr<LoopProgress> progress = absl::UnknownError("not restored");
  // The schedulers' steps the checkpoint holds (with restore_training), for the loops to count on from.
  std::vector<int64_t> scheduler_steps = fit_loop_->epoch_loop().scheduler_progress().total;
  // A strategy that shards the model and optimizer state restores them whole, then keeps its part.
  absl::Status restored = strategy_->WithFullState(optimizers_.optimizers, CheckpointCodec(), /*restoring=*/true, [&] {
    progress =
        RestoreTrainingState(*path, TrainingState{model, optimizers_, scheduler_steps, callbacks_, *precision_, data},
                             strategy_->root_device(), restore_training);
    return progress.status();
  });
  if (!restored.ok()) return restored;
  if (restore_training) {
    // The loops resume where the checkpoint stood (FitLoop::load_state_dict).
    fit_loop_->load_state_dict(*progress, scheduler_steps);
    LOG(INFO) << "Restored from checkpoint " << *path << " (epoch " << progress->epoch << ", batch "
              << progress->batch_in_epoch << ", global step " << progress->global_step << ")";
    // The run resumed from was perhaps killed in the middle of a write: the temporary files of processes that no
    // longer run, beside the checkpoint and in its run folder, are its debris (each removal is logged).
    if (is_global_zero()) {
      std::filesystem::path folder = std::filesystem::path(*path).parent_path();
      if (folder.empty()) folder = ".";
      RemoveStaleTemporaryFiles(folder.string());
      if (folder.filename() == "checkpoints") RemoveStaleTemporaryFiles(folder.parent_path().string());
    }
  } else {
    LOG(INFO) << "Loaded the model from checkpoint " << *path << " (saved in epoch " << progress->current_epoch
              << ", at global step " << progress->global_step << ")";
  }
  resumed_from_ = *path;
  return absl::OkStatus();
}

}  // namespace kiln
