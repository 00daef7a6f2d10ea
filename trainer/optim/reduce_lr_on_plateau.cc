// ReduceLROnPlateau (reduce_lr_on_plateau.h).
#include "trainer/optim/reduce_lr_on_plateau.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "c10/util/Exception.h"

namespace kiln {
namespace {

using c10::impl::GenericDict;

// The state keys PyTorch's state_dict() holds that load_state_dict restores; the others are settings.
constexpr const char* kNumberKeys[] = {"best"};
constexpr const char* kCountKeys[] = {"num_bad_epochs", "cooldown_counter", "last_epoch"};

// A number as PyTorch may have stored it: a float, or an int (best=0 after an integer metric).
bool AsNumber(const c10::IValue& value, double* out) {
  if (value.isDouble()) {
    *out = value.toDouble();
    return true;
  }
  if (value.isInt()) {
    *out = static_cast<double>(value.toInt());
    return true;
  }
  return false;
}

const c10::IValue* Find(const GenericDict& dict, const std::string& key) {
  auto found = dict.find(c10::IValue(key));
  return found == dict.end() ? nullptr : &found->value();
}

}  // namespace

ReduceLROnPlateau::ReduceLROnPlateau(torch::optim::Optimizer& optimizer, ReduceLROnPlateauOptions options)
    : MetricScheduler(optimizer), optimizer_(optimizer), options_(std::move(options)) {
  const ReduceLROnPlateauOptions& o = options_;
  TORCH_CHECK(o.mode == "min" || o.mode == "max", "ReduceLROnPlateau: mode must be \"min\" or \"max\", got \"", o.mode,
              "\"");
  TORCH_CHECK(o.threshold_mode == "rel" || o.threshold_mode == "abs",
              "ReduceLROnPlateau: threshold_mode must be \"rel\" or \"abs\", got \"", o.threshold_mode, "\"");
  TORCH_CHECK(o.factor > 0 && o.factor < 1, "ReduceLROnPlateau: factor must be in (0, 1), got ", o.factor);
  TORCH_CHECK(o.patience >= 0, "ReduceLROnPlateau: patience must be >= 0, got ", o.patience);
  TORCH_CHECK(o.cooldown >= 0, "ReduceLROnPlateau: cooldown must be >= 0, got ", o.cooldown);
  TORCH_CHECK(o.threshold >= 0, "ReduceLROnPlateau: threshold must be >= 0, got ", o.threshold);
  TORCH_CHECK(o.min_lr >= 0, "ReduceLROnPlateau: min_lr must be >= 0, got ", o.min_lr);
  mode_worse_ = o.mode == "min" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  best_ = mode_worse_;
}

bool ReduceLROnPlateau::IsBetter(double value) const {
  const bool rel = options_.threshold_mode == "rel";
  if (options_.mode == "min")
    return rel ? value < best_ * (1.0 - options_.threshold) : value < best_ - options_.threshold;
  return rel ? value > best_ * (options_.threshold + 1.0) : value > best_ + options_.threshold;
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (IsBetter(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {  // Bad steps during the cool-down do not count.
    --cooldown_counter_;
    num_bad_epochs_ = 0;
  }
  if (num_bad_epochs_ > options_.patience) {
    for (auto& group : optimizer_.param_groups()) {
      const double old_lr = group.options().get_lr();
      const double new_lr = std::max(old_lr * options_.factor, options_.min_lr);
      if (old_lr - new_lr > options_.eps) group.options().set_lr(new_lr);
    }
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
  ++step_count_;
}

GenericDict ReduceLROnPlateau::state_dict() const {
  GenericDict state(c10::StringType::get(), c10::AnyType::get());
  const size_t groups = optimizer_.param_groups().size();
  c10::List<double> min_lrs(std::vector<double>(groups, options_.min_lr));
  c10::List<double> last_lr(get_current_lrs());
  state.insert("factor", options_.factor);
  state.insert("min_lrs", min_lrs);
  state.insert("patience", options_.patience);
  state.insert("verbose", false);
  state.insert("cooldown", options_.cooldown);
  state.insert("cooldown_counter", cooldown_counter_);
  state.insert("mode", options_.mode);
  state.insert("threshold", options_.threshold);
  state.insert("threshold_mode", options_.threshold_mode);
  state.insert("best", best_);
  state.insert("num_bad_epochs", num_bad_epochs_);
  state.insert("mode_worse", mode_worse_);
  state.insert("eps", options_.eps);
  state.insert("last_epoch", last_epoch_);
  state.insert("_last_lr", last_lr);
  return state;
}

absl::Status ReduceLROnPlateau::CheckStateDict(const GenericDict& state) const {
  for (const char* key : kNumberKeys) {
    const c10::IValue* value = Find(state, key);
    double number = 0;
    if (value == nullptr || !AsNumber(*value, &number)) {
      return absl::InvalidArgumentError(absl::StrCat("ReduceLROnPlateau state has no number '", key,
                                                     "' (a scheduler's state from PyTorch's state_dict() "
                                                     "holds one); was the checkpoint written with another scheduler?"));
    }
  }
  for (const char* key : kCountKeys) {
    const c10::IValue* value = Find(state, key);
    if (value == nullptr || !value->isInt() || value->toInt() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("ReduceLROnPlateau state has no count '", key,
                                                     "' >= 0; was the checkpoint written with another scheduler?"));
    }
  }
  if (const c10::IValue* mode = Find(state, "mode");
      mode != nullptr && mode->isString() && mode->toStringRef() != options_.mode) {
    return absl::InvalidArgumentError(absl::StrCat("ReduceLROnPlateau state was saved with mode '", mode->toStringRef(),
                                                   "', this run's is '", options_.mode,
                                                   "': its best value means the opposite here; keep the mode"));
  }
  return absl::OkStatus();
}

void ReduceLROnPlateau::load_state_dict(const GenericDict& state) {
  TORCH_CHECK(CheckStateDict(state).ok(), "ReduceLROnPlateau::load_state_dict: the state was not checked");
  AsNumber(*Find(state, "best"), &best_);
  num_bad_epochs_ = Find(state, "num_bad_epochs")->toInt();
  cooldown_counter_ = Find(state, "cooldown_counter")->toInt();
  last_epoch_ = Find(state, "last_epoch")->toInt();
  step_count_ = static_cast<unsigned>(last_epoch_);
}

}  // namespace kiln
