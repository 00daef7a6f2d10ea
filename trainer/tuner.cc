#include "trainer/tuner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ATen/CPUGeneratorImpl.h"
#include "ATen/ATen.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "torch/csrc/autograd/grad_mode.h"
#include "trainer/loops/call_user.h"
#include "trainer/loops/fit_loop.h"
#include "trainer/loops/loop_context.h"
#include "trainer/strategies/strategy.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

// Lightning's _adjust_batch_size default cap, which its power mode and its failed binsearch trials use whatever
// max_val says (only binsearch's successful trials pass max_val on).
constexpr int64_t kAdjustDefaultMaxVal = 8192;
// _LRCallback's smoothing.
constexpr double kBeta = 0.98;

// What a tuning run puts back: every parameter's and buffer's data (device and dtype included) and gradient, the
// module's train/eval mode, LibTorch's CPU generator (Lightning's isolate_rng around lr_find; its checkpoint
// restore for the module).
class Snapshot {
 public:
  explicit Snapshot(LightningModule& model) : model_(model), training_(model.is_training()) {
    torch::NoGradGuard no_grad;
    for (const auto& item : model.named_parameters(/*recurse=*/true)) {
      const at::Tensor& grad = item.value().grad();
      tensors_.push_back({item.key(), item.value().detach().clone(), grad.defined() ? grad.detach().clone() : grad});
    }
    for (const auto& item : model.named_buffers(/*recurse=*/true)) {
      if (item.value().defined()) buffers_.emplace_back(item.key(), item.value().detach().clone());
    }
    rng_ = at::detail::getDefaultCPUGenerator().get_state();
  }

  void Restore() {
    torch::NoGradGuard no_grad;
    auto parameters = model_.named_parameters(/*recurse=*/true);
    for (const Saved& saved : tensors_) {
      if (at::Tensor* parameter = parameters.find(saved.name)) {
        parameter->set_data(saved.data);
        parameter->mutable_grad() = saved.grad;
      }
    }
    auto buffers = model_.named_buffers(/*recurse=*/true);
    for (const auto& [name, data] : buffers_) {
      if (at::Tensor* buffer = buffers.find(name)) buffer->set_data(data);
    }
    model_.train(training_);
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(rng_);
  }

 private:
  struct Saved {
    std::string name;
    at::Tensor data;
    at::Tensor grad;
  };
  LightningModule& model_;
  bool training_;
  std::vector<Saved> tensors_;
  std::vector<std::pair<std::string, at::Tensor>> buffers_;
  at::Tensor rng_;
};

// Where an attribute lives: every holder of the name, in Lightning's order (_lightning_get_all_attr_holders): the
// module, its hparams, the data module. As Lightning's lightning_getattr, the value is the LAST holder's (the data
// module's over the hparams' over the module's); as its lightning_setattr, a new value goes to EVERY holder. (fit's
// module keeps batch_size in its hparams for hparams.yaml while the data module's loaders use theirs: reading or
// writing the hparams alone would tune a number no loader uses.)
struct Attribute {
  enum class Place { kModule, kHparams, kData };
  std::vector<Place> holders;  // Never empty once found.
  std::string name;
};

std::optional<Attribute> FindAttribute(LightningModule& model, DataModule& data, const std::string& name) {
  Attribute found{{}, name};
  if (auto* own = dynamic_cast<TunableAttributes*>(&model); own != nullptr && own->get_attribute(name).has_value()) {
    found.holders.push_back(Attribute::Place::kModule);
  }
  if (model.hparams().count(name) > 0) found.holders.push_back(Attribute::Place::kHparams);
  if (auto* own = dynamic_cast<TunableAttributes*>(&data); own != nullptr && own->get_attribute(name).has_value()) {
    found.holders.push_back(Attribute::Place::kData);
  }
  if (found.holders.empty()) return std::nullopt;
  return found;
}

std::optional<double> GetAttribute(LightningModule& model, DataModule& data, const Attribute& attribute) {
  switch (attribute.holders.back()) {
    case Attribute::Place::kModule:
      return dynamic_cast<TunableAttributes&>(model).get_attribute(attribute.name);
    case Attribute::Place::kData:
      return dynamic_cast<TunableAttributes&>(data).get_attribute(attribute.name);
    case Attribute::Place::kHparams: {
      double value = 0;
      auto found = model.hparams().find(attribute.name);
      if (found == model.hparams().end() || !absl::SimpleAtod(found->second, &value)) return std::nullopt;
      return value;
    }
  }
  return std::nullopt;
}

void SetAttribute(LightningModule& model, DataModule& data, const Attribute& attribute, double value,
                  bool whole) {
  for (const Attribute::Place place : attribute.holders) {
    switch (place) {
      case Attribute::Place::kModule:
        dynamic_cast<TunableAttributes&>(model).set_attribute(attribute.name, value);
        break;
      case Attribute::Place::kData:
        dynamic_cast<TunableAttributes&>(data).set_attribute(attribute.name, value);
        break;
      case Attribute::Place::kHparams: {
        std::map<std::string, std::string> hparams = model.hparams();
        hparams[attribute.name] =
            whole ? absl::StrCat(static_cast<int64_t>(value)) : absl::StrFormat("%.17g", value);
        model.save_hyperparameters(std::move(hparams));
        break;
      }
    }
  }
}

std::string WhereLooked(const std::string& names) {
  return absl::StrCat(names, " was found neither in the module (a kiln::TunableAttributes), nor in its hparams, nor ",
                      "in the data module (a kiln::TunableAttributes); derive the module or data module from ",
                      "kiln::TunableAttributes (trainer/tuner.h) and answer that name, or save it as a ",
                      "hyper-parameter");
}

// The trainer's options for a tuning run: none of its callbacks, loggers, checkpoints, progress bar, model summary,
// sanity check or time limit (Lightning replaces the callbacks and the logger, and runs the fit loop without the
// sanity check). A non-finite loss is skipped rather than fatal: the finders decide what it means.
TrainerOptions TuningOptions(const TrainerOptions& user) {
  TrainerOptions options = user;
  options.callbacks.clear();
  options.loggers.clear();
  options.logger = false;
  options.enable_checkpointing = false;
  options.enable_progress_bar = false;
  options.enable_model_summary = false;
  options.num_sanity_val_steps = 0;
  options.max_time.reset();
  options.on_nonfinite_loss = "skip";
  return options;
}

// Rank zero's value of `value`, on every rank (Lightning's strategy.broadcast), through the strategy's AllGather.
at::Tensor FromRankZero(Trainer& trainer, const at::Tensor& value) {
  Strategy* strategy = trainer.strategy();
  if (strategy == nullptr || strategy->world_size() <= 1) return value;
  return strategy->AllGather(value.to(strategy->root_device())).at(0);
}

// Lightning's _LRCallback, with _LRFinder's scheduler in it: before each optimizer step, the learning rate of that
// step goes into every parameter group (the schedule Lightning's _ExponentialLR / _LinearLR give, stepped once per
// optimizer step) and is recorded; after it, the loss, smoothed.
class LRFinderCallback final : public Callback {
 public:
  LRFinderCallback(const LRFinderOptions& options, FitLoop* const* loop) : options_(options), loop_(loop) {}

  std::string state_key() const override { return "LRFinder"; }

  // The rate for optimizer step `step` (0-based): Lightning's scheduler starts at its base rate (min_lr) and, after
  // its k-th step, k >= 1, gives base x (max / base)^((k + 1) / n), or base + (k + 1) / n x (max - base).
  double LearningRate(int64_t step) const {
    if (step <= 0) return options_.min_lr;
    const double r = static_cast<double>(step + 1) / static_cast<double>(options_.num_training);
    if (options_.mode == "linear") return options_.min_lr + r * (options_.max_lr - options_.min_lr);
    return options_.min_lr * std::pow(options_.max_lr / options_.min_lr, r);
  }

  void on_fit_start(Trainer& trainer, LightningModule& module) override {
    const auto& optimizers = trainer.optimizers();
    if (optimizers.size() != 1) {
      throw std::invalid_argument(absl::StrCat("`model.configure_optimizers()` returned ", optimizers.size(),
                                               " optimizers, but the learning rate finder only works with a single "
                                               "optimizer; return one for lr_find"));
    }
    // Lightning's _exchange_scheduler: the module's own schedulers are left out of the search.
    if (*loop_ != nullptr) (*loop_)->context().optimizers.schedulers.clear();
    SetRate(trainer, options_.min_lr);
  }

  void on_train_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch,
                            int64_t batch_idx) override {
    const double lr = LearningRate(trainer.global_step());
    SetRate(trainer, lr);
    if ((batch_idx + 1) % trainer.options().accumulate_grad_batches != 0) return;
    result_.lrs.push_back(lr);
  }

  void on_train_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs, const Batch& batch,
                          int64_t batch_idx) override {
    if ((batch_idx + 1) % trainer.options().accumulate_grad_batches != 0) return;
    if (!outputs.defined()) {
      // As Lightning: a step without a loss is a NaN point, which suggestion() leaves out.
      result_.losses.push_back(std::numeric_limits<double>::quiet_NaN());
      return;
    }
    const double loss = outputs.item<double>();
    const int64_t step = trainer.global_step();
    average_ = kBeta * average_ + (1 - kBeta) * loss;
    const double smoothed = average_ / (1 - std::pow(kBeta, static_cast<double>(step + 1)));
    bool stop = options_.early_stop_threshold.has_value() && step > 1 &&
                smoothed > *options_.early_stop_threshold * best_;
    // Kiln never steps on a non-finite loss (the step was skipped): the search ends there.
    if (!std::isfinite(loss)) stop = true;
    stop = FromRankZero(trainer, at::tensor(stop ? 1.0 : 0.0, at::kDouble)).item<double>() != 0.0;
    if (stop) trainer.set_should_stop();
    if (smoothed < best_ || step == 1) best_ = smoothed;
    result_.losses.push_back(smoothed);
  }

  void on_train_end(Trainer& trainer, LightningModule& module) override {
    // Every rank gets rank zero's results (Lightning broadcasts them).
    if (trainer.world_size() <= 1) return;
    const auto length = static_cast<int64_t>(result_.losses.size());
    at::Tensor both = at::empty({2, length}, at::kDouble);
    for (int64_t i = 0; i < length; ++i) {
      both[0][i] = i < static_cast<int64_t>(result_.lrs.size()) ? result_.lrs[i] : 0.0;
      both[1][i] = result_.losses[i];
    }
    const at::Tensor zero = FromRankZero(trainer, both).to(at::kCPU).contiguous();
    const double* values = zero.data_ptr<double>();
    result_.lrs.assign(values, values + length);
    result_.losses.assign(values + length, values + 2 * length);
  }

  LRFinder& result() { return result_; }

 private:
  static void SetRate(Trainer& trainer, double lr) {
    for (const auto& optimizer : trainer.optimizers()) {
      for (auto& group : optimizer->param_groups()) group.options().set_lr(lr);
    }
  }

  LRFinderOptions options_;
  FitLoop* const* loop_;
  LRFinder result_;
  double average_ = 0.0;
  double best_ = 0.0;
};

absl::Status OptionError(absl::string_view name, absl::string_view value, absl::string_view accepted) {
  return absl::InvalidArgumentError(absl::StrCat(name, "=", value, " is not valid; ", accepted));
}

absl::Status CheckOptions(const LRFinderOptions& options) {
  if (options.mode != "exponential" && options.mode != "linear") {
    return OptionError("mode", absl::StrCat("'", options.mode, "'"), "accepted: exponential, linear");
  }
  if (!(options.min_lr > 0) || !std::isfinite(options.min_lr)) {
    return OptionError("min_lr", absl::StrCat(options.min_lr), "pass a learning rate > 0");
  }
  if (!(options.max_lr > 0) || !std::isfinite(options.max_lr)) {
    return OptionError("max_lr", absl::StrCat(options.max_lr), "pass a learning rate > 0");
  }
  if (options.num_training < 1) {
    return OptionError("num_training", absl::StrCat(options.num_training), "pass a number of steps >= 1");
  }
  return absl::OkStatus();
}

absl::Status CheckOptions(const ScaleBatchSizeOptions& options) {
  if (options.mode != "power" && options.mode != "binsearch") {
    return OptionError("mode", absl::StrCat("'", options.mode, "'"), "accepted: power, binsearch");
  }
  if (options.steps_per_trial < 1) {
    return OptionError("steps_per_trial", absl::StrCat(options.steps_per_trial), "pass a number of steps >= 1");
  }
  if (options.init_val < 1) return OptionError("init_val", absl::StrCat(options.init_val), "pass a batch size >= 1");
  if (options.max_trials < 1) {
    return OptionError("max_trials", absl::StrCat(options.max_trials), "pass a number of trials >= 1");
  }
  if (!(options.margin >= 0.0 && options.margin < 1.0)) {
    return OptionError("margin", absl::StrCat(options.margin), "pass a share in [0, 1)");
  }
  if (options.max_val < 1) return OptionError("max_val", absl::StrCat(options.max_val), "pass a batch size >= 1");
  if (options.batch_arg_name.empty()) return OptionError("batch_arg_name", "''", "pass the attribute's name");
  return absl::OkStatus();
}

// Whether a batch of `batch_size` covers the whole training set (Lightning's `batch_size >=
// combined_loader._dataset_length()`): a TensorDataLoader knows its examples; another loader of known length covers
// it when it makes one batch; a stream's length is unknown (Lightning's iterable datasets: never).
bool CoversTrainingSet(DataLoader& loader, int64_t batch_size) {
  if (auto* tensors = dynamic_cast<TensorDataLoader*>(&loader)) return batch_size >= tensors->num_examples();
  const int64_t batches = loader.num_batches();
  return batches != DataLoader::kUnknownLength && batches <= 1;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// LRFinder

std::optional<int64_t> LRFinder::optimal_index(int64_t skip_begin, int64_t skip_end) const {
  // Python's losses[skip_begin:-skip_end], of both lists (which have the same length when lr_find returns).
  const auto size = static_cast<int64_t>(std::min(losses.size(), lrs.size()));
  const auto clamp = [&](int64_t index) { return std::max<int64_t>(0, std::min(size, index < 0 ? size + index : index)); };
  const int64_t begin = clamp(skip_begin);
  const int64_t end = clamp(-skip_end);  // -0 is 0 in Python: skip_end = 0 leaves nothing.
  std::vector<float> kept_losses;
  std::vector<float> kept_lrs;
  std::vector<int64_t> kept_index;
  for (int64_t i = begin; i < end; ++i) {
    // torch.tensor of Python floats is float32: the finite test and the gradient are the float32 values'.
    const auto loss = static_cast<float>(losses[i]);
    if (!std::isfinite(loss)) continue;
    kept_losses.push_back(loss);
    kept_lrs.push_back(static_cast<float>(lrs[i]));
    kept_index.push_back(i);
  }
  if (kept_losses.size() < 2) {
    LOG(ERROR) << "Failed to compute suggestion for learning rate because there are not enough points. Increase the "
                  "loop iteration limits or the size of your dataset/dataloader.";
    return std::nullopt;
  }
  const auto n = static_cast<int64_t>(kept_losses.size());
  const at::Tensor loss_tensor = at::from_blob(kept_losses.data(), {n}, at::kFloat).clone();
  const at::Tensor lr_tensor = at::from_blob(kept_lrs.data(), {n}, at::kFloat).clone();
  const std::vector<at::Tensor> spacing{lr_tensor};
  const at::Tensor gradients =
      at::gradient(loss_tensor, at::TensorList(spacing), /*dim=*/std::nullopt, /*edge_order=*/1)[0];
  return kept_index[at::argmin(gradients).item<int64_t>()];
}

std::optional<double> LRFinder::suggestion(int64_t skip_begin, int64_t skip_end) const {
  const std::optional<int64_t> index = optimal_index(skip_begin, skip_end);
  if (!index.has_value()) return std::nullopt;
  return lrs[*index];
}

// ---------------------------------------------------------------------------------------------------------------
// Tuner

absl::StatusOr<std::optional<LRFinder>> Tuner::lr_find(LightningModule& model, DataModule& data,
                                                      const LRFinderOptions& options) {
  if (absl::Status checked = CheckOptions(options); !checked.ok()) return checked;
  if (trainer_.options().fast_dev_run > 0) {
    LOG(WARNING) << "Skipping learning rate finder since `fast_dev_run` is enabled.";
    return std::optional<LRFinder>();
  }
  std::optional<Attribute> attribute;
  if (options.update_attr) {
    if (!options.attr_name.empty()) {
      attribute = FindAttribute(model, data, options.attr_name);
      if (!attribute.has_value()) {
        return absl::InvalidArgumentError(absl::StrCat("lr_find: the learning rate's attribute (attr_name) '",
                                                       options.attr_name, "' ", WhereLooked("it")));
      }
    } else {
      for (const char* name : {"lr", "learning_rate"}) {
        if (!attribute.has_value()) attribute = FindAttribute(model, data, name);
      }
      if (!attribute.has_value()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "lr_find: the learning rate's attribute: ", WhereLooked("neither 'lr' nor 'learning_rate'"),
            "; name another with attr_name, or pass update_attr=false and use suggestion()"));
      }
    }
  }

  TrainerOptions run = TuningOptions(trainer_.options());
  run.max_steps = options.num_training;  // Lightning: num_training + global_step, which is 0 for a new fit.
  run.limit_val_batches = options.num_training;
  FitLoop* loop = nullptr;
  auto callback = std::make_shared<LRFinderCallback>(options, &loop);
  run.callbacks = {callback};
  Snapshot snapshot(model);
  absl::Status status;
  {
    Trainer finder(run);
    status = finder.RunLoopsInternal(Stage::kFit, model, [&](FitLoop& fit_loop) {
      loop = &fit_loop;
      return fit_loop.Run(model, data, /*ckpt_path=*/"");
    });
    if (status.ok() && finder.global_step() != options.num_training) {
      LOG(INFO) << "LR finder stopped early after " << finder.global_step() << " steps due to diverging loss.";
    }
  }
  snapshot.Restore();
  if (!status.ok()) return status;
  LRFinder found = std::move(callback->result());
  found.mode = options.mode;
  found.lr_min = options.min_lr;
  found.lr_max = options.max_lr;
  found.num_training = options.num_training;
  if (attribute.has_value()) {
    if (const std::optional<double> lr = found.suggestion(); lr.has_value()) {
      SetAttribute(model, data, *attribute, *lr, /*whole=*/false);
      LOG(INFO) << "Learning rate set to " << absl::StrFormat("%.17g", *lr);
    }
  }
  return std::optional<LRFinder>(std::move(found));
}

absl::StatusOr<std::optional<int64_t>> Tuner::scale_batch_size(LightningModule& model, DataModule& data,
                                                               const ScaleBatchSizeOptions& options) {
  if (absl::Status checked = CheckOptions(options); !checked.ok()) return checked;
  if (trainer_.world_size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Tuning the batch size is currently not supported with distributed strategies (", trainer_.world_size(),
        " processes); tune it on one device (devices=1), then train on several"));
  }
  if (trainer_.options().fast_dev_run > 0) {
    LOG(WARNING) << "Skipping batch size scaler since `fast_dev_run` is enabled.";
    return std::optional<int64_t>();
  }
  const std::optional<Attribute> attribute = FindAttribute(model, data, options.batch_arg_name);
  if (!attribute.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("scale_batch_size: the batch size's attribute (batch_arg_name) '",
                                                   options.batch_arg_name, "' ", WhereLooked("it")));
  }
  const auto batch_size = [&]() -> int64_t {
    return static_cast<int64_t>(GetAttribute(model, data, *attribute).value_or(0));
  };
  const auto set_batch_size = [&](int64_t size) {
    SetAttribute(model, data, *attribute, static_cast<double>(size), /*whole=*/true);
  };
  absl::Status data_status = CallUser("setup", [&] { data.setup(Stage::kFit); });
  if (!data_status.ok()) return data_status;
  // Lightning's _adjust_batch_size: nothing changes once the current batch size covers the training set; otherwise
  // `value`, or the current size times `factor` (truncated), capped at `cap`.
  const auto adjust = [&](std::optional<int64_t> value, double factor, int64_t cap,
                          const char* desc) -> absl::StatusOr<std::pair<int64_t, bool>> {
    const int64_t current = batch_size();
    std::shared_ptr<DataLoader> loader;
    absl::Status got = CallUser("train_dataloader", [&] { loader = data.train_dataloader(); });
    if (!got.ok()) return got;
    if (loader != nullptr && CoversTrainingSet(*loader, current)) {
      LOG(INFO) << "The batch size " << current << " is greater or equal than the length of your dataset.";
      return std::make_pair(current, false);
    }
    int64_t next = value.has_value() ? *value : static_cast<int64_t>(static_cast<double>(current) * factor);
    if (next > cap) next = cap;
    if (desc != nullptr) LOG(INFO) << "Batch size " << current << " " << desc << ", trying batch size " << next;
    set_batch_size(next);
    return std::make_pair(next, next != current);
  };

  TrainerOptions run = TuningOptions(trainer_.options());
  run.limit_train_batches = 1.0;
  run.limit_val_batches = options.steps_per_trial;
  run.max_steps = options.steps_per_trial;
  // One trial: OK, out of memory (kOutOfMemoryPayload), or the error that ends the search.
  const auto trial = [&]() -> absl::Status {
    absl::Status status;
    {
      Trainer runner(run);
      status = runner.fit(model, data);
    }
    // Lightning's garbage_collection_cuda: what the trial left on the device goes before the next one.
    for (at::Tensor& parameter : model.parameters()) parameter.mutable_grad() = at::Tensor();
    return status;
  };

  Snapshot snapshot(model);
  absl::StatusOr<int64_t> result = [&]() -> absl::StatusOr<int64_t> {
    absl::StatusOr<std::pair<int64_t, bool>> first = adjust(options.init_val, 1.0, kAdjustDefaultMaxVal, nullptr);
    if (!first.ok()) return first.status();
    int64_t size = first->first;
    if (options.mode == "power") {
      bool any_success = false;
      for (int64_t i = 0; i < options.max_trials; ++i) {
        if (size >= options.max_val) {
          LOG(INFO) << "Reached the maximum batch size limit of " << options.max_val << ". Stopping search.";
          break;
        }
        const absl::Status status = trial();
        if (status.ok()) {
          const int64_t last_successful = size;
          if (i + 1 >= options.max_trials) {
            size = last_successful;
            break;
          }
          absl::StatusOr<std::pair<int64_t, bool>> next = adjust(std::nullopt, 2.0, kAdjustDefaultMaxVal, "succeeded");
          if (!next.ok()) return next.status();
          size = next->first;
          if (!next->second) break;
          any_success = true;
        } else if (IsOutOfMemoryStatus(status)) {
          absl::StatusOr<std::pair<int64_t, bool>> next = adjust(std::nullopt, 0.5, kAdjustDefaultMaxVal, "failed");
          if (!next.ok()) return next.status();
          size = next->first;
          if (any_success) break;
        } else {
          return status;
        }
      }
      return size;
    }
    int64_t low = 1;
    int64_t high = 0;  // Python's None.
    int64_t count = 0;
    while (true) {
      if (size >= options.max_val) {
        LOG(INFO) << "Reached the maximum batch size limit of " << options.max_val << ". Stopping search.";
        break;
      }
      const absl::Status status = trial();
      if (status.ok()) {
        const int64_t last_successful = size;
        if (++count >= options.max_trials) {
          size = last_successful;
          break;
        }
        low = size;
        absl::StatusOr<std::pair<int64_t, bool>> next;
        if (high != 0) {
          if (high - low <= 1) break;
          next = adjust((high + low) / 2, 1.0, options.max_val, "succeeded");
        } else {
          next = adjust(std::nullopt, 2.0, options.max_val, "succeeded");
        }
        if (!next.ok()) return next.status();
        size = next->first;
        if (!next->second) break;
      } else if (IsOutOfMemoryStatus(status)) {
        high = size;
        absl::StatusOr<std::pair<int64_t, bool>> next =
            adjust((high + low) / 2, 1.0, kAdjustDefaultMaxVal, "failed");
        if (!next.ok()) return next.status();
        size = next->first;
        if (high - low <= 1) break;
        // Kiln's guard where Lightning would try the same size forever (a failed size that covers the training set).
        if (!next->second) break;
      } else {
        return status;
      }
    }
    if (options.margin > 0) {
      const int64_t reduced =
          std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(size) * (1.0 - options.margin)));
      if (reduced != size) {
        LOG(INFO) << "Applying margin of " << options.margin * 100 << "%, reducing batch size from " << size << " to "
                  << reduced;
        size = reduced;
        set_batch_size(size);
      }
    }
    return size;
  }();
  snapshot.Restore();
  if (!result.ok()) return result.status();
  LOG(INFO) << "Finished batch size finder, will continue with full run using batch size " << *result;
  return std::optional<int64_t>(*result);
}

}  // namespace kiln
