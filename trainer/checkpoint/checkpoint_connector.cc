// What a checkpoint holds and how it is restored (checkpoint_connector.h).
#include "trainer/checkpoint/checkpoint_connector.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "ATen/CPUGeneratorImpl.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hal/compat/optimizer_state.h"
#include "torch/optim/adagrad.h"
#include "torch/optim/adam.h"
#include "torch/optim/adamw.h"
#include "torch/optim/lbfgs.h"
#include "torch/optim/rmsprop.h"
#include "torch/optim/sgd.h"
#include "torch/utils.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/plugins/precision/precision_plugin.h"

namespace kiln {
namespace {

using torch::serialize::InputArchive;
using torch::serialize::OutputArchive;

// Every parameter and buffer of `model`, by full name, in registration order.
std::vector<std::pair<std::string, at::Tensor>> NamedState(LightningModule& model) {
  std::vector<std::pair<std::string, at::Tensor>> state;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) state.emplace_back(item.key(), item.value());
  for (const auto& item : model.named_buffers(/*recurse=*/true)) state.emplace_back(item.key(), item.value());
  return state;
}

c10::Dict<std::string, std::string> ToDict(const std::map<std::string, std::string>& map) {
  c10::Dict<std::string, std::string> dict;
  for (const auto& [key, value] : map) dict.insert(key, value);
  return dict;
}

std::map<std::string, std::string> FromDict(const c10::IValue& value) {
  std::map<std::string, std::string> map;
  for (const auto& entry : value.toGenericDict()) map[entry.key().toStringRef()] = entry.value().toStringRef();
  return map;
}

c10::Dict<std::string, double> ToDict(const PrecisionState& state) {
  c10::Dict<std::string, double> dict;
  for (const auto& [key, value] : state) dict.insert(key, value);
  return dict;
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

// Everything a checkpoint holds, read and checked before anything is applied.
struct LoadedCheckpoint {
  std::vector<at::Tensor> model;  // In NamedState order.
  std::vector<InputArchive> optimizers;
  std::vector<int64_t> scheduler_steps;
  std::map<std::string, CallbackState> callbacks;
  at::Tensor rng;
  PrecisionState precision;  // Empty when the checkpoint has none (an older file, or a plugin without state).
  int64_t epoch = 0;
  int64_t batch_in_epoch = 0;
  int64_t global_step = 0;
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

// Loads each optimizer's archive into this run's optimizer and moves its state to `device`. Throws what LibTorch
// throws for an archive that does not fit.
absl::Status LoadOptimizers(const TrainingState& state, std::vector<InputArchive>& archives,
                            const c10::Device& device) {
  for (size_t i = 0; i < archives.size(); ++i) {
    compat::LoadOptimizer(*state.optimizers.optimizers[i], archives[i]);
    if (absl::Status moved = MoveOptimizerState(*state.optimizers.optimizers[i], device); !moved.ok()) return moved;
  }
  return absl::OkStatus();
}

// Loop counters at or above this are taken for damage: 2^40 steps is decades of training at a microsecond a step.
constexpr int64_t kMaxCheckpointCounter = int64_t{1} << 40;

int64_t ReadInt(InputArchive& archive, const std::string& key) {
  c10::IValue value;
  archive.read(key, value);
  TORCH_CHECK(value.isInt(), "record '", key, "' is not an integer");
  return value.toInt();
}

}  // namespace

absl::StatusOr<std::string> DumpTrainingState(const std::string& path, const TrainingState& state,
                                              const LoopProgress& progress) {
  return SerializeCheckpoint(path, [&](OutputArchive& archive) {
    archive.write("loop_epoch", c10::IValue(progress.epoch));
    archive.write("loop_batch_in_epoch", c10::IValue(progress.batch_in_epoch));
    archive.write("loop_global_step", c10::IValue(progress.global_step));
    OutputArchive model_state;
    c10::List<std::string> names;
    int64_t index = 0;
    for (const auto& [name, tensor] : NamedState(state.model)) {
      names.push_back(name);
      model_state.write(absl::StrCat("t", index++), tensor.detach().to(at::kCPU), /*is_buffer=*/true);
    }
    model_state.write("names", c10::IValue(names));
    archive.write("model", model_state);
    archive.write("num_optimizers", c10::IValue(static_cast<int64_t>(state.optimizers.optimizers.size())));
    for (size_t i = 0; i < state.optimizers.optimizers.size(); ++i) {
      OutputArchive optimizer;
      state.optimizers.optimizers[i]->save(optimizer);
      archive.write(absl::StrCat("optimizer_", i), optimizer);
    }
    archive.write("scheduler_steps", c10::IValue(state.scheduler_steps));
    c10::List<std::string> callback_keys;
    for (const auto& callback : state.callbacks) {
      archive.write(absl::StrCat("callback_", callback_keys.size()), c10::IValue(ToDict(callback->state_dict())));
      callback_keys.push_back(callback->state_key());
    }
    archive.write("callback_keys", c10::IValue(callback_keys));
    archive.write("rng_cpu", at::detail::getDefaultCPUGenerator().get_state(), /*is_buffer=*/true);
    archive.write("hparams", c10::IValue(ToDict(state.model.hparams())));
    archive.write("precision_plugin", c10::IValue(ToDict(state.precision.state_dict())));
  });
}

absl::StatusOr<LoopProgress> RestoreTrainingState(const std::string& path, const TrainingState& state,
                                                  const c10::Device& device, bool restore_training) {
  absl::StatusOr<std::unique_ptr<InputArchive>> opened = ReadCheckpoint(path);
  if (!opened.ok()) return opened.status();
  InputArchive& archive = **opened;

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
      loaded.epoch = ReadInt(archive, "loop_epoch");
      loaded.batch_in_epoch = ReadInt(archive, "loop_batch_in_epoch");
      loaded.global_step = ReadInt(archive, "loop_global_step");
      const int64_t num_optimizers = ReadInt(archive, "num_optimizers");
      TORCH_CHECK(num_optimizers == static_cast<int64_t>(state.optimizers.optimizers.size()), "it holds ",
                  num_optimizers, " optimizer(s) but configure_optimizers returned ",
                  state.optimizers.optimizers.size());
      for (int64_t i = 0; i < num_optimizers; ++i) {
        loaded.optimizers.emplace_back();
        archive.read(absl::StrCat("optimizer_", i), loaded.optimizers.back());
      }
      // Counters a damaged or hand-made file could set to anything: a negative one would run the loops from far
      // below zero, and a huge scheduler count would replay the schedule for days.
      for (const auto& [name, value] : {std::pair<const char*, int64_t>{"loop_epoch", loaded.epoch},
                                        {"loop_batch_in_epoch", loaded.batch_in_epoch},
                                        {"loop_global_step", loaded.global_step}}) {
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
      const int64_t max_scheduler_steps = std::max(loaded.epoch, loaded.global_step) + 1;
      for (int64_t scheduler_steps : loaded.scheduler_steps) {
        TORCH_CHECK(scheduler_steps >= 0 && scheduler_steps <= max_scheduler_steps, "record 'scheduler_steps' holds ",
                    scheduler_steps, ", outside [0, ", max_scheduler_steps, "] for epoch ", loaded.epoch,
                    " and global step ", loaded.global_step);
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

  if (!loaded.precision.empty()) {
    if (absl::Status status = state.precision.CheckStateDict(loaded.precision); !status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot restore from checkpoint ", path, ": precision plugin state: ", status.message()));
    }
  }

  // Apply. Optimizers first: their archives are the likeliest to disagree with this run's configuration.
  try {
    if (absl::Status loaded_optimizers = LoadOptimizers(state, loaded.optimizers, device); !loaded_optimizers.ok()) {
      return loaded_optimizers;
    }
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
  if (restore_training) {
    for (const auto& callback : state.callbacks) {
      auto found = loaded.callbacks.find(callback->state_key());
      if (found == loaded.callbacks.end()) continue;
      if (absl::Status status = callback->load_state_dict(found->second); !status.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint ", path, ": state of callback ", callback->state_key(), ": ", status.message()));
      }
    }
    // A scheduler's only state is how often it stepped: replay that, then the optimizers' saved learning rates
    // (already loaded) are what the schedule produced, so reload them over the replay.
    for (size_t i = 0; i < loaded.scheduler_steps.size(); ++i) {
      for (int64_t step = 0; step < loaded.scheduler_steps[i]; ++step) state.optimizers.schedulers[i].scheduler->step();
      state.scheduler_steps[i] = loaded.scheduler_steps[i];
    }
    if (absl::Status loaded_optimizers = LoadOptimizers(state, loaded.optimizers, device); !loaded_optimizers.ok()) {
      return loaded_optimizers;
    }
    if (!loaded.precision.empty()) {
      // Checked above, so this cannot fail.
      if (absl::Status status = state.precision.load_state_dict(loaded.precision); !status.ok()) return status;
    }
    {
      at::Generator generator = at::detail::getDefaultCPUGenerator();
      generator.set_state(loaded.rng);
    }
  }
  return LoopProgress{
      .epoch = loaded.epoch, .batch_in_epoch = loaded.batch_in_epoch, .global_step = loaded.global_step};
}

}  // namespace kiln
