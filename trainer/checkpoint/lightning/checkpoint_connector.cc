// What a checkpoint holds and how it is restored (checkpoint_connector.h).
#include "trainer/checkpoint/lightning/checkpoint_connector.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ATen/ATen.h"
#include "ATen/CPUGeneratorImpl.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "hal/compat/optimizer_state.h"
#include "torch/optim/adagrad.h"
#include "torch/optim/adam.h"
#include "torch/optim/adamw.h"
#include "torch/optim/lbfgs.h"
#include "torch/optim/rmsprop.h"
#include "torch/optim/sgd.h"
#include "torch/utils.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/checkpoint/format/pickle_writer.h"
#include "trainer/checkpoint/format/snapshot_dict.h"
#include "trainer/checkpoint/format/torch_file.h"
#include "trainer/checkpoint/lightning/lightning_layout.h"
#include "trainer/checkpoint/lightning/optimizer_state_dict.h"
#include "trainer/core/metric_scheduler.h"
#include "trainer/plugins/precision/precision_plugin.h"

namespace kiln {
namespace {

using c10::impl::GenericDict;
using torch::serialize::InputArchive;

// Every parameter and buffer of `model`, by full name, in registration order.
std::vector<std::pair<std::string, at::Tensor>> NamedState(LightningModule& model) {
  std::vector<std::pair<std::string, at::Tensor>> state;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) state.emplace_back(item.key(), item.value());
  for (const auto& item : model.named_buffers(/*recurse=*/true)) state.emplace_back(item.key(), item.value());
  return state;
}

std::map<std::string, std::string> FromDict(const c10::IValue& value) {
  std::map<std::string, std::string> map;
  for (const auto& entry : value.toGenericDict()) map[entry.key().toStringRef()] = entry.value().toStringRef();
  return map;
}

PrecisionState PrecisionStateFromDict(const c10::IValue& value) {
  TORCH_CHECK(value.isGenericDict(), "record 'precision_plugin' is not a dictionary");
  PrecisionState state;
  for (const auto& entry : value.toGenericDict()) {
    TORCH_CHECK(entry.key().isString() && entry.value().isDouble(), "record 'precision_plugin' holds a ",
                entry.value().tagKind(), " where a number was expected");
    state[entry.key().toStringRef()] = entry.value().toDouble();
  }
  return state;
}

// Everything a checkpoint holds, read and checked before anything is applied (either format).
struct LoadedCheckpoint {
  std::vector<at::Tensor> model;  // In NamedState order.
  // Each puts one optimizer's saved state into this run's optimizer; each may run twice (see Apply). An error (or a
  // throw) means the state does not fit.
  std::vector<std::function<absl::Status()>> load_optimizers;
  std::vector<int64_t> scheduler_steps;
  // By scheduler index: the saved state of each MetricScheduler, checked by its CheckStateDict.
  std::map<size_t, GenericDict> scheduler_states;
  std::map<std::string, CallbackState> callbacks;
  at::Tensor rng;            // Undefined: the generator keeps its state.
  PrecisionState precision;  // Empty when the checkpoint has none (an older file, or a plugin without state).
  std::function<absl::Status()> load_data;  // Null: the data keeps its state.
  LoopProgress progress;
};

void MoveTo(at::Tensor& tensor, const c10::Device& device) {
  if (tensor.defined() && tensor.device() != device) tensor = tensor.to(device);
}

// Checkpoints are read onto the CPU (ReadCheckpoint), so an optimizer's loaded state is there too; it goes back to
// `device`, where the parameters are (Lightning's optimizer_to_device). LibTorch's state classes have no common way
// to reach their tensors, so each of its optimizers is listed; another optimizer's state can only stay on the CPU.
absl::Status MoveOptimizerState(torch::optim::Optimizer& optimizer, const c10::Device& device) {
  if (device.is_cpu()) return absl::OkStatus();
  for (auto& [key, state] : optimizer.state()) {
    if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(state.get())) {
      MoveTo(adam->exp_avg(), device);
      MoveTo(adam->exp_avg_sq(), device);
      MoveTo(adam->max_exp_avg_sq(), device);
    } else if (auto* adamw = dynamic_cast<torch::optim::AdamWParamState*>(state.get())) {
      MoveTo(adamw->exp_avg(), device);
      MoveTo(adamw->exp_avg_sq(), device);
      MoveTo(adamw->max_exp_avg_sq(), device);
    } else if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(state.get())) {
      MoveTo(sgd->momentum_buffer(), device);
    } else if (auto* rmsprop = dynamic_cast<torch::optim::RMSpropParamState*>(state.get())) {
      MoveTo(rmsprop->square_avg(), device);
      MoveTo(rmsprop->momentum_buffer(), device);
      MoveTo(rmsprop->grad_avg(), device);
    } else if (auto* adagrad = dynamic_cast<torch::optim::AdagradParamState*>(state.get())) {
      MoveTo(adagrad->sum(), device);
    } else if (auto* lbfgs = dynamic_cast<torch::optim::LBFGSParamState*>(state.get())) {
      MoveTo(lbfgs->d(), device);
      MoveTo(lbfgs->H_diag(), device);
      MoveTo(lbfgs->prev_flat_grad(), device);
      for (auto* tensors : {&lbfgs->old_dirs(), &lbfgs->old_stps(), &lbfgs->ro()}) {
        for (at::Tensor& tensor : *tensors) MoveTo(tensor, device);
      }
      if (lbfgs->al().has_value()) {
        for (at::Tensor& tensor : *lbfgs->al()) MoveTo(tensor, device);
      }
    } else {
      return absl::UnimplementedError(
          absl::StrCat("the optimizer state restored from the checkpoint cannot be moved to ", device.str(),
                       ": its type (", typeid(*state).name(),
                       ") is not one of LibTorch's optimizers (Adam, AdamW, SGD, RMSprop, Adagrad, "
                       "LBFGS); resume on the CPU, or start this optimizer fresh"));
    }
  }
  return absl::OkStatus();
}

// Format 1's optimizer archive, loaded into this run's optimizer, with its state moved to `device`. Throws what
// LibTorch throws for an archive that does not fit.
std::function<absl::Status()> LoadOptimizerArchive(torch::optim::Optimizer& optimizer,
                                                   std::shared_ptr<InputArchive> archive, const c10::Device& device) {
  return [&optimizer, archive, device] {
    compat::LoadOptimizer(optimizer, *archive);
    return MoveOptimizerState(optimizer, device);
  };
}

// A count-based scheduler is restored by stepping it as often as it stepped (LibTorch's schedulers have no state to
// set); a file may claim any count below kMaxCheckpointCounter, and replaying 2^40 steps would take days (the
// checkpoint fuzzer found a file that hung the restore this way). The replay is bounded at 2^24 steps; a run with more
// scheduler steps than that is beyond any that resumes today.
constexpr int64_t kMaxReplayedSchedulerSteps = int64_t{1} << 24;

int64_t ReadInt(InputArchive& archive, const std::string& key) {
  c10::IValue value;
  archive.read(key, value);
  TORCH_CHECK(value.isInt(), "record '", key, "' is not an integer");
  return value.toInt();
}

// Puts what was read and checked into `state`: the data's state first (only the data module can check it, as it
// loads it), then the optimizers (a LibTorch archive is checked only as it loads), the model, and with
// `restore_training` the callbacks, the schedulers, the precision plugin and the generator.
absl::StatusOr<LoopProgress> Apply(const std::string& path, const TrainingState& state,
                                   const std::vector<std::pair<std::string, at::Tensor>>& named,
                                   const LoadedCheckpoint& loaded, bool restore_training) {
  if (!loaded.precision.empty()) {
    if (absl::Status status = state.precision.CheckStateDict(loaded.precision); !status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot restore from checkpoint ", path, ": precision plugin state: ", status.message()));
    }
  }
  if (restore_training && loaded.load_data != nullptr) {
    if (absl::Status status = loaded.load_data(); !status.ok()) return status;
  }
  const auto load_optimizers = [&]() -> absl::Status {
    for (const auto& load : loaded.load_optimizers) {
      if (absl::Status status = load(); !status.ok()) return status;
    }
    return absl::OkStatus();
  };
  try {
    if (absl::Status status = load_optimizers(); !status.ok()) return status;
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", path, " does not fit this run's optimizers: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", path, " does not fit this run's optimizers: ", e.what()));
  }
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < named.size(); ++i) named[i].second.copy_(loaded.model[i]);
  }
  if (!restore_training) return loaded.progress;
  for (const auto& callback : state.callbacks) {
    auto found = loaded.callbacks.find(callback->state_key());
    if (found == loaded.callbacks.end()) continue;
    if (absl::Status status = callback->load_state_dict(found->second); !status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", path, ": state of callback ", callback->state_key(), ": ", status.message()));
    }
  }
  // A count-based scheduler's state is how often it stepped: replay that. A MetricScheduler's state depends on the
  // values it saw, so it comes back from the checkpoint whole. Then the optimizers' saved options (their learning
  // rates, what the schedules produced) go back over both.
  for (size_t i = 0; i < loaded.scheduler_steps.size(); ++i) {
    torch::optim::LRScheduler& scheduler = *state.optimizers.schedulers[i].scheduler;
    if (auto* metric_scheduler = dynamic_cast<MetricScheduler*>(&scheduler)) {
      metric_scheduler->load_state_dict(loaded.scheduler_states.at(i));
    } else {
      for (int64_t step = 0; step < loaded.scheduler_steps[i]; ++step) scheduler.step();
    }
    state.scheduler_steps[i] = loaded.scheduler_steps[i];
  }
  if (absl::Status status = load_optimizers(); !status.ok()) return status;
  if (!loaded.precision.empty()) {
    // Checked above, so this cannot fail.
    if (absl::Status status = state.precision.load_state_dict(loaded.precision); !status.ok()) return status;
  }
  if (loaded.rng.defined()) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(loaded.rng);
  }
  return loaded.progress;
}

// Format 1, the LibTorch archive of earlier Kiln versions, read as those versions did.
absl::StatusOr<LoopProgress> RestoreFormat1(const std::string& path, InputArchive& archive, const TrainingState& state,
                                            const c10::Device& device, bool restore_training) {
  // Read and check everything first: a bad file must leave the model, optimizers and callbacks untouched.
  const std::vector<std::pair<std::string, at::Tensor>> named = NamedState(state.model);
  LoadedCheckpoint loaded;
  try {
    InputArchive saved_model;
    archive.read("model", saved_model);
    c10::IValue names_value;
    saved_model.read("names", names_value);
    std::vector<std::string> names;
    for (const c10::IValue& name : names_value.toListRef()) names.push_back(name.toStringRef());
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < names.size(); ++i) index[names[i]] = i;
    for (const auto& [name, tensor] : named) {
      auto found = index.find(name);
      TORCH_CHECK(found != index.end(), "it has no '", name, "' (the model's parameters do not match)");
      at::Tensor saved;
      saved_model.read(absl::StrCat("t", found->second), saved, /*is_buffer=*/true);
      TORCH_CHECK(saved.sizes() == tensor.sizes() && saved.dtype() == tensor.dtype(), "'", name, "' has shape ",
                  saved.sizes(), " and type ", saved.dtype(), ", the model has ", tensor.sizes(), " and ",
                  tensor.dtype());
      loaded.model.push_back(saved);
      index.erase(found);
    }
    if (!index.empty()) {
      std::vector<std::string> unexpected;
      for (const auto& [name, i] : index) unexpected.push_back(name);
      TORCH_CHECK(false, "it has parameters the model does not: ", absl::StrJoin(unexpected, ", "));
    }
    if (restore_training) {
      LoopProgress& progress = loaded.progress;
      progress.epoch = ReadInt(archive, "loop_epoch");
      progress.batch_in_epoch = ReadInt(archive, "loop_batch_in_epoch");
      progress.global_step = ReadInt(archive, "loop_global_step");
      const int64_t num_optimizers = ReadInt(archive, "num_optimizers");
      TORCH_CHECK(num_optimizers == static_cast<int64_t>(state.optimizers.optimizers.size()), "it holds ",
                  num_optimizers, " optimizer(s) but configure_optimizers returned ",
                  state.optimizers.optimizers.size());
      for (int64_t i = 0; i < num_optimizers; ++i) {
        auto optimizer = std::make_shared<InputArchive>();
        archive.read(absl::StrCat("optimizer_", i), *optimizer);
        loaded.load_optimizers.push_back(LoadOptimizerArchive(*state.optimizers.optimizers[i], optimizer, device));
      }
      // Counters a damaged or hand-made file could set to anything: a negative one would run the loops from far
      // below zero, and a huge scheduler count would replay the schedule for days.
      for (const auto& [name, value] : {std::pair<const char*, int64_t>{"loop_epoch", progress.epoch},
                                        {"loop_batch_in_epoch", progress.batch_in_epoch},
                                        {"loop_global_step", progress.global_step}}) {
        TORCH_CHECK(value >= 0 && value < kMaxCheckpointCounter, "record '", name, "' is ", value,
                    ", outside [0, 2^40)");
      }
      c10::IValue steps;
      archive.read("scheduler_steps", steps);
      loaded.scheduler_steps = steps.toIntVector();
      TORCH_CHECK(loaded.scheduler_steps.size() == state.optimizers.schedulers.size(), "it holds ",
                  loaded.scheduler_steps.size(), " scheduler(s) but configure_optimizers returned ",
                  state.optimizers.schedulers.size());
      // A scheduler steps at most once per epoch or once per optimizer step.
      const int64_t max_scheduler_steps = std::max(progress.epoch, progress.global_step) + 1;
      for (int64_t scheduler_steps : loaded.scheduler_steps) {
        TORCH_CHECK(scheduler_steps >= 0 && scheduler_steps <= max_scheduler_steps, "record 'scheduler_steps' holds ",
                    scheduler_steps, ", outside [0, ", max_scheduler_steps, "] for epoch ", progress.epoch,
                    " and global step ", progress.global_step);
        TORCH_CHECK(scheduler_steps <= kMaxReplayedSchedulerSteps, "record 'scheduler_steps' holds ", scheduler_steps,
                    ", more than the ", kMaxReplayedSchedulerSteps, " steps Kiln replays to restore a schedule");
      }
      // Format 1 kept only step counts, which cannot rebuild what a plateau scheduler learnt from its values.
      for (const SchedulerConfig& scheduler : state.optimizers.schedulers) {
        TORCH_CHECK(dynamic_cast<MetricScheduler*>(scheduler.scheduler.get()) == nullptr,
                    "it is a format-1 checkpoint, which holds no ReduceLROnPlateau state; resume it without the "
                    "plateau scheduler, or start the run fresh");
      }
      c10::IValue keys;
      archive.read("callback_keys", keys);
      const auto& key_list = keys.toListRef();
      for (size_t i = 0; i < key_list.size(); ++i) {
        c10::IValue callback_state;
        archive.read(absl::StrCat("callback_", i), callback_state);
        loaded.callbacks[key_list[i].toStringRef()] = FromDict(callback_state);
      }
      archive.read("rng_cpu", loaded.rng, /*is_buffer=*/true);
      // Checked on a scratch generator now, so that a bad state fails here rather than after the model is changed.
      at::make_generator<at::CPUGeneratorImpl>().set_state(loaded.rng);
      // Checkpoints written before precision plugins existed have no such record: the plugin keeps its state.
      c10::IValue precision_state;
      if (archive.try_read("precision_plugin", precision_state)) {
        loaded.precision = PrecisionStateFromDict(precision_state);
      }
    }
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot restore from checkpoint ", path, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {  // LibTorch also throws standard exceptions on damaged records.
    return absl::InvalidArgumentError(absl::StrCat("cannot restore from checkpoint ", path, ": ", e.what()));
  }

  return Apply(path, state, named, loaded, restore_training);
}

// Format 2 and checkpoints in Lightning's layout that Kiln did not write.

// A hyper-parameter as Python would hold it: what reads back as the same integer, number or boolean is one.
c10::IValue HparamValue(const std::string& text) {
  int64_t integer = 0;
  if (absl::SimpleAtoi(text, &integer) && absl::StrCat(integer) == text) return integer;
  if (text == "true" || text == "True") return true;
  if (text == "false" || text == "False") return false;
  double number = 0;
  const bool numeric = !text.empty() && text.find_first_not_of("0123456789+-.eE") == std::string::npos;
  if (numeric && absl::SimpleAtod(text, &number) && std::isfinite(number)) return number;
  return text;
}

// Reading: each accessor throws c10::Error naming the key.
const c10::IValue& Field(const GenericDict& dict, const std::string& key, const std::string& where) {
  auto found = dict.find(c10::IValue(key));
  TORCH_CHECK(found != dict.end(), where, " has no '", key, "'");
  return found->value();
}

GenericDict DictField(const GenericDict& dict, const std::string& key, const std::string& where) {
  const c10::IValue& value = Field(dict, key, where);
  TORCH_CHECK(value.isGenericDict(), where, ": '", key, "' is a ", value.tagKind(), ", not a dictionary");
  return value.toGenericDict();
}

int64_t IntField(const GenericDict& dict, const std::string& key, const std::string& where) {
  const c10::IValue& value = Field(dict, key, where);
  TORCH_CHECK(value.isInt(), where, ": '", key, "' is a ", value.tagKind(), ", not an integer");
  return value.toInt();
}

std::vector<c10::IValue> ListField(const GenericDict& dict, const std::string& key, const std::string& where) {
  const c10::IValue& value = Field(dict, key, where);
  TORCH_CHECK(value.isList(), where, ": '", key, "' is a ", value.tagKind(), ", not a list");
  return value.toListRef().vec();
}

// Where a checkpoint written at `progress` stands, in Lightning's terms.
LightningLoopPosition LightningPosition(const LoopProgress& progress) {
  const bool epoch_ended = progress.epoch > progress.current_epoch;
  return {.current_epoch = progress.current_epoch,
          .epoch_ended = epoch_ended,
          .batches_done = epoch_ended ? progress.batches_done : progress.batch_in_epoch,
          .global_step = progress.global_step};
}

// Where a run resumed at `progress` (epoch, batch_in_epoch) starts, in Lightning's terms: an epoch's start counts as
// the end of none, with no batches done.
LightningLoopPosition ResumePosition(const LoopProgress& progress) {
  return {.current_epoch = progress.epoch,
          .epoch_ended = progress.batch_in_epoch == 0,
          .batches_done = progress.batch_in_epoch,
          .global_step = progress.global_step};
}

// Where the loops stood, from Kiln's exact record, or from Lightning's fields in a checkpoint Kiln did not write.
LoopProgress ReadProgress(const Checkpoint& checkpoint) {
  const GenericDict& top = checkpoint.contents;
  LoopProgress progress;
  progress.global_step = IntField(top, "global_step", "the checkpoint");
  if (checkpoint.format_version >= 2) {
    const GenericDict kiln = DictField(top, kKilnSectionKey, "the checkpoint");
    const GenericDict loop = DictField(kiln, "loop", "'kiln'");
    auto loader = kiln.find(c10::IValue(std::string("train_loader")));
    if (loader != kiln.end()) progress.train_loader = loader->value();
    progress.epoch = IntField(loop, "epoch", "'kiln.loop'");
    progress.batch_in_epoch = IntField(loop, "batch_in_epoch", "'kiln.loop'");
    TORCH_CHECK(IntField(loop, "global_step", "'kiln.loop'") == progress.global_step,
                "'kiln.loop.global_step' and 'global_step' differ");
    progress.lightning = ReadLightningCounters(top, ResumePosition(progress));
    return progress;
  }
  // Lightning: "epoch" is the epoch the loop was in. Its batch progress says how far it got: a batch is "processed"
  // once its step has run and "completed" once its on_train_batch_end hooks have returned, so a checkpoint written
  // from those hooks resumes after that batch. The epoch progress (Lightning 1.6 on) says whether the epoch had begun
  // (at the end of a fit it has not: "epoch" is already the next one) and whether its batches had all run; without
  // it, is_last_batch says the latter.
  const int64_t epoch = IntField(top, "epoch", "the checkpoint");
  const GenericDict fit_loop = DictField(DictField(top, "loops", "the checkpoint"), "fit_loop", "'loops'");
  const GenericDict batches = DictField(fit_loop, "epoch_loop.batch_progress", "'loops.fit_loop'");
  const GenericDict current = DictField(batches, "current", "the batch progress");
  int64_t done = IntField(current, "completed", "the batch progress's 'current'");
  if (current.contains("processed")) {
    done = std::max(done, IntField(current, "processed", "the batch progress's 'current'"));
  }
  const c10::IValue& last = Field(batches, "is_last_batch", "the batch progress");
  TORCH_CHECK(last.isBool(), "the batch progress's 'is_last_batch' is not True or False");
  bool begun = true;
  bool batches_ran = last.toBool();
  if (fit_loop.contains("epoch_progress")) {
    const GenericDict epochs =
        DictField(DictField(fit_loop, "epoch_progress", "'loops.fit_loop'"), "total", "the epoch progress");
    begun = IntField(epochs, "started", "the epoch progress") > epoch;
    batches_ran = IntField(epochs, "processed", "the epoch progress") > epoch;
  }
  progress.current_epoch = epoch;
  progress.batches_done = begun ? done : 0;
  progress.epoch = begun && batches_ran ? epoch + 1 : epoch;
  progress.batch_in_epoch = begun && !batches_ran ? done : 0;
  progress.lightning = ReadLightningCounters(top, ResumePosition(progress));
  return progress;
}

// What a checkpoint takes at its step (TakeCheckpointSnapshot): copies and plain values, nothing the loop goes on
// changing and nothing of the live objects, so that its dictionary can be built on another thread.
struct TakenCheckpoint {
  LoopProgress progress;
  bool weights_only = false;  // TrainingState::weights_only: only the keys such a file has.
  int64_t scheduler_steps = 0;                                   // Every scheduler's steps, summed.
  std::vector<std::pair<std::string, at::Tensor>> model;         // Copies, in NamedState order.
  std::vector<std::pair<std::string, CallbackState>> callbacks;  // The non-empty states, under their state keys.
  std::vector<TakenOptimizerState> optimizers;
  // By scheduler: its steps, and a MetricScheduler's state_dict() (a plain copy); None for the others, which are
  // written from their steps.
  std::vector<std::pair<int64_t, c10::IValue>> schedulers;
  std::map<std::string, std::string> hparams;
  std::string data_key;  // Empty: the data keeps no state.
  c10::IValue data;      // A plain copy of its state_dict().
  at::Tensor rng;        // The default CPU generator's state.
  PrecisionState precision;
  // What the module's on_save_checkpoint added, as plain copies, in the order it added them.
  std::vector<std::pair<std::string, c10::IValue>> module_entries;
};

// The keys of a checkpoint's top level and Kiln's section, made once (snapshot_dict.h).
struct CheckpointKeys {
  DictKey epoch{"epoch"}, global_step{"global_step"}, version{"pytorch-lightning_version"};
  DictKey state_dict{"state_dict"}, loops{"loops"}, callbacks{"callbacks"}, optimizer_states{"optimizer_states"};
  DictKey lr_schedulers{"lr_schedulers"}, hparams_name{"hparams_name"}, hyper_parameters{"hyper_parameters"};
  DictKey kiln{kKilnSectionKey}, loop{"loop"}, batch_in_epoch{"batch_in_epoch"}, rng_cpu{"rng_cpu"};
  DictKey train_loader{"train_loader"}, weights_only{"weights_only"};
  DictKey precision_plugin{"precision_plugin"}, last_epoch{"last_epoch"}, step_count{"_step_count"};
};

const CheckpointKeys& Keys() {
  static const CheckpointKeys* const keys = new CheckpointKeys();  // Never destroyed, as interned keys are not.
  return *keys;
}

// What only a checkpoint that resumes training has (not a weights-only one): callbacks, optimizer_states and
// lr_schedulers, in Lightning's order.
template <typename Sink>
void WriteTrainingKeys(Sink& out, const TakenCheckpoint& taken) {
  const CheckpointKeys& keys = Keys();
  WriteKey(out, keys.callbacks);
  out.BeginDict(taken.callbacks.size());
  for (const auto& [key, state] : taken.callbacks) {
    out.Key(key);
    LightningCallbackState(out, key, state);
  }
  out.EndDict();
  WriteKey(out, keys.optimizer_states);
  out.BeginList(taken.optimizers.size());
  for (const TakenOptimizerState& optimizer : taken.optimizers) {
    const absl::Status saved = OptimizerStateDict(out, optimizer);
    TORCH_CHECK(saved.ok(), saved.message());
  }
  out.EndList();
  WriteKey(out, keys.lr_schedulers);
  out.BeginList(taken.schedulers.size());
  for (const auto& [steps, metric_state] : taken.schedulers) {
    if (!metric_state.isNone()) {
      out.Value(metric_state);
      continue;
    }
    out.BeginDict(/*capacity=*/2);
    WriteKey(out, keys.last_epoch);
    out.Int(steps);
    WriteKey(out, keys.step_count);
    out.Int(steps + 1);
    out.EndDict();
  }
  out.EndList();
}

// The checkpoint, from what was taken, into either sink (snapshot_dict.h): a pickle (the writer's thread, with the
// format records `kiln` ends with) or a dictionary (SnapshotTrainingState; SerializeCheckpoint adds the records, at
// the same place). Reads nothing else. Throws c10::Error.
template <typename Sink>
void WriteCheckpointTree(Sink& out, const TakenCheckpoint& taken, bool with_format_records) {
  const CheckpointKeys& keys = Keys();
  const LoopProgress& progress = taken.progress;
  out.BeginDict(/*capacity=*/12);  // Lightning's 10 keys, the data's and Kiln's.
  WriteKey(out, keys.epoch);
  out.Int(progress.current_epoch);
  WriteKey(out, keys.global_step);
  out.Int(progress.global_step);
  WriteKey(out, keys.version);
  out.String(kLightningLayoutVersion);
  WriteKey(out, keys.state_dict);
  out.BeginDict(taken.model.size());
  for (const auto& [name, tensor] : taken.model) {
    out.Key(name);
    out.Tensor(tensor);
  }
  out.EndDict();
  WriteKey(out, keys.loops);
  LightningLoops(out, LightningPosition(progress), progress.lightning, taken.scheduler_steps);
  if (!taken.weights_only) WriteTrainingKeys(out, taken);
  WriteKey(out, keys.hparams_name);
  out.String("kwargs");
  WriteKey(out, keys.hyper_parameters);
  out.BeginDict(taken.hparams.size());
  for (const auto& [key, value] : taken.hparams) {
    out.Key(key);
    out.Value(HparamValue(value));
  }
  out.EndDict();
  if (!taken.data_key.empty()) {
    out.Key(taken.data_key);
    out.Value(taken.data);
  }
  for (const auto& [key, value] : taken.module_entries) {
    out.Key(key);
    out.Value(value);
  }

  WriteKey(out, keys.kiln);
  out.BeginDict(/*capacity=*/5);  // And SerializeCheckpoint's two format records.
  WriteKey(out, keys.loop);
  out.BeginDict(/*capacity=*/3);
  WriteKey(out, keys.epoch);
  out.Int(progress.epoch);
  WriteKey(out, keys.batch_in_epoch);
  out.Int(progress.batch_in_epoch);
  WriteKey(out, keys.global_step);
  out.Int(progress.global_step);
  out.EndDict();
  if (taken.weights_only) {
    // Marks the file for the refusal to resume from it (RestoreTrainingState), beside Lightning's missing keys.
    WriteKey(out, keys.weights_only);
    out.Bool(true);
  } else {
    if (!progress.train_loader.isNone()) {
      WriteKey(out, keys.train_loader);
      out.Value(progress.train_loader);
    }
    WriteKey(out, keys.rng_cpu);
    out.Tensor(taken.rng);
    WriteKey(out, keys.precision_plugin);
    out.BeginDict(taken.precision.size());
    for (const auto& [key, value] : taken.precision) {
      out.Key(key);
      out.Value(value);
    }
    out.EndDict();
  }
  if (with_format_records) WriteFormatRecords(out);
  out.EndDict();
  out.EndDict();
}

GenericDict BuildCheckpoint(const TakenCheckpoint& taken) {
  ValueBuilder out;
  WriteCheckpointTree(out, taken, /*with_format_records=*/false);
  return out.Finish().toGenericDict();
}

absl::StatusOr<GenericDict> BuildCheckpoint(const std::string& path, const TakenCheckpoint& taken) {
  try {
    return BuildCheckpoint(taken);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("cannot serialise checkpoint ", path, ": ", e.what_without_backtrace()));
  }
}

absl::Status PickleCheckpoint(const std::string& path, const TakenCheckpoint& taken, PickleWriter& out) {
  try {
    WriteCheckpointTree(out, taken, /*with_format_records=*/true);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("cannot serialise checkpoint ", path, ": ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

// The module's on_save_checkpoint, at the step: what it adds is copied (its tensors too), under keys that Kiln's
// checkpoint does not write itself.
template <typename Copy>
absl::Status TakeModuleEntries(const std::string& path, const TrainingState& state, const Copy& copy,
                               TakenCheckpoint& taken) {
  GenericDict added(c10::StringType::get(), c10::AnyType::get());
  try {
    state.model.on_save_checkpoint(added);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("checkpoint ", path, ": on_save_checkpoint raised: ",
                                            e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("checkpoint ", path, ": on_save_checkpoint raised: ", e.what()));
  }
  const CheckpointKeys& keys = Keys();
  for (const auto& entry : added) {
    if (!entry.key().isString()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, ": on_save_checkpoint added a key that is "
                                                     "not text (", entry.key().tagKind(), "); use text keys"));
    }
    const std::string& key = entry.key().toStringRef();
    for (const DictKey* own : {&keys.epoch, &keys.global_step, &keys.version, &keys.state_dict, &keys.loops,
                               &keys.callbacks, &keys.optimizer_states, &keys.lr_schedulers, &keys.hparams_name,
                               &keys.hyper_parameters, &keys.kiln}) {
      if (key == own->value().toStringRef() || key == taken.data_key) {
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint ", path, ": on_save_checkpoint added the key '", key, "', which Kiln's checkpoint writes "
            "itself (with Lightning's keys epoch, global_step, state_dict, loops, callbacks, optimizer_states, "
            "lr_schedulers, hyper_parameters, kiln and the data's state key); add your entries under keys of your "
            "own"));
      }
    }
    taken.module_entries.emplace_back(key, PlainValue(entry.value(), copy));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CallSaveCheckpointHooks(const std::string& path, const TrainingState& state) {
  TakenCheckpoint dropped;
  try {
    for (const auto& callback : state.callbacks) {
      if (!state.weights_only) callback->state_dict();
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("cannot serialise checkpoint ", path, ": ", e.what_without_backtrace()));
  }
  return TakeModuleEntries(path, state, [](const at::Tensor& tensor) { return tensor; }, dropped);
}

absl::StatusOr<CheckpointSnapshot> TakeCheckpointSnapshot(const std::string& path, const TrainingState& state,
                                                          const LoopProgress& progress) {
  auto taken = std::make_shared<TakenCheckpoint>();
  size_t tensor_bytes = 0;
  const auto copy = [&tensor_bytes](const at::Tensor& tensor) {
    at::Tensor snapshot = SnapshotTensor(tensor);
    tensor_bytes += snapshot.nbytes();
    return snapshot;
  };
  try {
    taken->progress = progress;
    taken->weights_only = state.weights_only;
    if (!state.weights_only) taken->progress.train_loader = PlainValue(progress.train_loader, copy);
    taken->model = NamedState(state.model);
    for (auto& [name, tensor] : taken->model) tensor = copy(tensor);

    // Called here, at the step, as Lightning calls them at save time: a state read later could be a later step's,
    // and a callback need not be thread-safe. Only non-empty states are written, as Lightning writes them: Lightning
    // warns about every state it finds no callback for.
    // A weights-only file has none of the callbacks', optimizers' and schedulers' state (Lightning does not call
    // the callbacks' state_dict for one either).
    for (const auto& callback : state.callbacks) {
      if (state.weights_only) break;
      CallbackState callback_state = callback->state_dict();
      if (!callback_state.empty()) taken->callbacks.emplace_back(callback->state_key(), std::move(callback_state));
    }
    taken->optimizers.reserve(state.optimizers.optimizers.size());
    for (const auto& optimizer : state.optimizers.optimizers) {
      if (state.weights_only) break;
      absl::StatusOr<TakenOptimizerState> optimizer_state = TakeOptimizerState(*optimizer);
      if (!optimizer_state.ok()) return optimizer_state.status();
      tensor_bytes += optimizer_state->tensor_bytes();
      taken->optimizers.push_back(*std::move(optimizer_state));
    }
    taken->schedulers.reserve(state.scheduler_steps.size());
    for (size_t i = 0; i < state.scheduler_steps.size(); ++i) {
      const int64_t steps = state.scheduler_steps[i];
      taken->scheduler_steps += steps;
      c10::IValue metric_state;
      if (state.weights_only) continue;
      if (auto* metric_scheduler =
              dynamic_cast<const MetricScheduler*>(state.optimizers.schedulers[i].scheduler.get())) {
        metric_state = PlainValue(metric_scheduler->state_dict(), copy);
      }
      taken->schedulers.emplace_back(steps, std::move(metric_state));
    }
    taken->hparams = state.model.hparams();
    if (state.data != nullptr && !state.data->state_key().empty()) {
      taken->data_key = state.data->state_key();
      taken->data = PlainValue(state.data->state_dict(), copy);
    }
    if (!state.weights_only) {
      taken->rng = at::detail::getDefaultCPUGenerator().get_state();
      tensor_bytes += taken->rng.nbytes();
      taken->precision = state.precision.state_dict();
    }
    if (absl::Status added = TakeModuleEntries(path, state, copy, *taken); !added.ok()) return added;
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("cannot serialise checkpoint ", path, ": ", e.what_without_backtrace()));
  }
  const std::shared_ptr<const TakenCheckpoint> held(std::move(taken));
  return CheckpointSnapshot{
      .tensor_bytes = tensor_bytes,
      .build = [path, held]() -> absl::StatusOr<GenericDict> { return BuildCheckpoint(path, *held); },
      .pickle = [path, held](PickleWriter& out) { return PickleCheckpoint(path, *held, out); }};
}

absl::StatusOr<std::string> DumpTrainingState(const std::string& path, const TrainingState& state,
                                              const LoopProgress& progress) {
  absl::StatusOr<GenericDict> contents = SnapshotTrainingState(path, state, progress);
  if (!contents.ok()) return contents.status();
  return SerializeCheckpoint(path, *std::move(contents));
}

absl::StatusOr<GenericDict> SnapshotTrainingState(const std::string& path, const TrainingState& state,
                                                  const LoopProgress& progress) {
  absl::StatusOr<CheckpointSnapshot> snapshot = TakeCheckpointSnapshot(path, state, progress);
  if (!snapshot.ok()) return snapshot.status();
  return snapshot->build();
}

absl::StatusOr<LoopProgress> RestoreTrainingState(const std::string& path, const TrainingState& state,
                                                  const c10::Device& device, bool restore_training) {
  absl::StatusOr<Checkpoint> opened = ReadCheckpoint(path);
  if (!opened.ok()) return opened.status();
  if (opened->format_version == 1) return RestoreFormat1(path, *opened->archive, state, device, restore_training);
  const Checkpoint& checkpoint = *opened;
  const bool kiln_wrote = checkpoint.format_version >= 2;
  // The module sees the whole dictionary first, as Lightning calls on_load_checkpoint before restoring anything.
  try {
    state.model.on_load_checkpoint(checkpoint.contents);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot restore from checkpoint ", path,
                                                   ": on_load_checkpoint raised: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot restore from checkpoint ", path, ": on_load_checkpoint raised: ", e.what()));
  }

  // Read and check everything first: a bad file must leave the model, optimizers and callbacks untouched.
  const std::vector<std::pair<std::string, at::Tensor>> named = NamedState(state.model);
  LoadedCheckpoint loaded;
  try {
    std::map<std::string, at::Tensor> saved;
    for (auto& [name, tensor] : CheckpointStateDict(checkpoint)) saved[name] = tensor;
    for (const auto& [name, tensor] : named) {
      auto found = saved.find(name);
      TORCH_CHECK(found != saved.end(), "it has no '", name, "' (the model's parameters do not match)");
      const at::Tensor& value = found->second;
      TORCH_CHECK(value.sizes() == tensor.sizes() && value.dtype() == tensor.dtype(), "'", name, "' has shape ",
                  value.sizes(), " and type ", value.dtype(), ", the model has ", tensor.sizes(), " and ",
                  tensor.dtype());
      loaded.model.push_back(value);
      saved.erase(found);
    }
    if (!saved.empty()) {
      std::vector<std::string> unexpected;
      for (const auto& [name, tensor] : saved) unexpected.push_back(name);
      TORCH_CHECK(false, "it has parameters the model does not: ", absl::StrJoin(unexpected, ", "));
    }
    const GenericDict& top = checkpoint.contents;
    if (!restore_training) {
      // Where the checkpoint was saved, for messages only.
      for (auto [key, field] : {std::pair<const char*, int64_t*>{"epoch", &loaded.progress.current_epoch},
                                {"global_step", &loaded.progress.global_step}}) {
        auto found = top.find(c10::IValue(std::string(key)));
        if (found != top.end() && found->value().isInt()) *field = found->value().toInt();
      }
    } else {
      LoopProgress& progress = loaded.progress;
      progress = ReadProgress(checkpoint);
      // Counters a damaged or hand-made file could set to anything: a negative one would run the loops from far
      // below zero, and a huge scheduler count would replay the schedule for days.
      for (const auto& [name, value] : {std::pair<const char*, int64_t>{"epoch", progress.epoch},
                                        {"batch_in_epoch", progress.batch_in_epoch},
                                        {"global_step", progress.global_step}}) {
        TORCH_CHECK(value >= 0 && value < kMaxCheckpointCounter, "its ", name, " is ", value, ", outside [0, 2^40)");
      }
      // Lightning's refusal of a weights-only file (ModelCheckpoint's save_weights_only), with the way out.
      if (!top.contains(c10::IValue(std::string("optimizer_states")))) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cannot resume training from checkpoint ", path, ": it holds only the model (no optimizer_states, as "
            "ModelCheckpoint(save_weights_only=True) writes), so it cannot continue a run. Load its weights with "
            "validate, test or predict (ckpt_path), or into the module before a fresh fit; to resume, save full "
            "checkpoints (save_weights_only=False)"));
      }
      const std::vector<c10::IValue> optimizers = ListField(top, "optimizer_states", "the checkpoint");
      TORCH_CHECK(optimizers.size() == state.optimizers.optimizers.size(), "it holds ", optimizers.size(),
                  " optimizer(s) but configure_optimizers returned ", state.optimizers.optimizers.size());
      for (size_t i = 0; i < optimizers.size(); ++i) {
        absl::StatusOr<std::function<void()>> load =
            PrepareOptimizerLoad(*state.optimizers.optimizers[i], optimizers[i]);
        TORCH_CHECK(load.ok(), "optimizer ", i, ": ", load.status().message());
        loaded.load_optimizers.push_back([apply = *std::move(load)] {
          apply();
          return absl::OkStatus();
        });
      }
      const std::vector<c10::IValue> schedulers = ListField(top, "lr_schedulers", "the checkpoint");
      TORCH_CHECK(schedulers.size() == state.optimizers.schedulers.size(), "it holds ", schedulers.size(),
                  " scheduler(s) but configure_optimizers returned ", state.optimizers.schedulers.size());
      // A scheduler steps at most once per epoch or once per optimizer step.
      const int64_t max_scheduler_steps = std::max(progress.epoch, progress.global_step) + 1;
      for (size_t i = 0; i < schedulers.size(); ++i) {
        TORCH_CHECK(schedulers[i].isGenericDict(), "lr_schedulers[", i, "] is not a dictionary");
        const int64_t steps =
            IntField(schedulers[i].toGenericDict(), "last_epoch", absl::StrCat("lr_schedulers[", i, "]"));
        TORCH_CHECK(steps >= 0 && steps <= max_scheduler_steps, "lr_schedulers[", i, "] has stepped ", steps,
                    " times, outside [0, ", max_scheduler_steps, "] for epoch ", progress.epoch, " and global step ",
                    progress.global_step);
        // A MetricScheduler comes back from its saved state whole; a count-based one is replayed (Apply).
        auto* metric_scheduler = dynamic_cast<MetricScheduler*>(state.optimizers.schedulers[i].scheduler.get());
        TORCH_CHECK(metric_scheduler != nullptr || steps <= kMaxReplayedSchedulerSteps, "lr_schedulers[", i,
                    "] has stepped ", steps, " times, more than the ", kMaxReplayedSchedulerSteps,
                    " steps Kiln replays to restore a schedule");
        loaded.scheduler_steps.push_back(steps);
        if (metric_scheduler != nullptr) {
          const GenericDict saved = schedulers[i].toGenericDict();
          absl::Status fits = metric_scheduler->CheckStateDict(saved);
          TORCH_CHECK(fits.ok(), "lr_schedulers[", i, "]: ", fits.message());
          loaded.scheduler_states.emplace(i, saved);
        }
      }
      if (kiln_wrote) {
        for (const auto& entry : DictField(top, "callbacks", "the checkpoint")) {
          TORCH_CHECK(entry.key().isString(), "'callbacks' has a key that is not text");
          const std::string key = CurrentStateKey(entry.key().toStringRef());
          loaded.callbacks[key] = KilnCallbackState(key, entry.value());
        }
        const GenericDict kiln = DictField(top, kKilnSectionKey, "the checkpoint");
        const c10::IValue& rng_value = Field(kiln, "rng_cpu", "'kiln'");
        TORCH_CHECK(rng_value.isTensor(), "'kiln.rng_cpu' is not a tensor");
        loaded.rng = rng_value.toTensor();
        // Checked on a scratch generator now, so that a bad state fails here rather than after the model is changed.
        at::make_generator<at::CPUGeneratorImpl>().set_state(loaded.rng);
        loaded.precision = PrecisionStateFromDict(Field(kiln, "precision_plugin", "'kiln'"));
      }
    }
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot restore from checkpoint ", path, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot restore from checkpoint ", path, ": ", e.what()));
  }
  if (state.data != nullptr && !state.data->state_key().empty()) {
    auto found = checkpoint.contents.find(c10::IValue(state.data->state_key()));
    if (found != checkpoint.contents.end()) {
      loaded.load_data = [&state, &path, saved = found->value()]() -> absl::Status {
        if (absl::Status status = state.data->load_state_dict(saved); !status.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, ": the state of the data ('",
                                                         state.data->state_key(), "'): ", status.message()));
        }
        return absl::OkStatus();
      };
    }
  }
  absl::StatusOr<LoopProgress> progress = Apply(path, state, named, loaded, restore_training);
  if (!progress.ok()) return progress.status();
  if (restore_training && !kiln_wrote) {
    LOG(INFO) << "checkpoint " << path << " was not written by Kiln: its model, optimizers, schedulers and loop "
              << "progress are restored; its callbacks' states and the random generator are not";
  }
  return *progress;
}

}  // namespace kiln
