#include "trainer/core/metrics.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <utility>

#include "ATen/ATen.h"
#include "c10/core/GradMode.h"
#include "c10/macros/Macros.h"
#include "c10/util/Exception.h"

namespace kiln {
namespace {

// The value of a one-element tensor in host memory, read in place: CPU ops have finished when they return, so this
// needs neither a dispatch nor a copy. False for element types it does not read.
bool ReadOnHost(const at::Tensor& tensor, double& number) {
  const void* data = tensor.data_ptr();
  switch (tensor.scalar_type()) {
    case at::kFloat: number = *static_cast<const float*>(data); return true;
    case at::kDouble: number = *static_cast<const double*>(data); return true;
    case at::kHalf: number = static_cast<float>(*static_cast<const at::Half*>(data)); return true;
    case at::kBFloat16: number = static_cast<float>(*static_cast<const at::BFloat16*>(data)); return true;
    case at::kLong: number = static_cast<double>(*static_cast<const int64_t*>(data)); return true;
    case at::kInt: number = *static_cast<const int32_t*>(data); return true;
    case at::kShort: number = *static_cast<const int16_t*>(data); return true;
    case at::kChar: number = *static_cast<const int8_t*>(data); return true;
    case at::kByte: number = *static_cast<const uint8_t*>(data); return true;
    case at::kBool: number = *static_cast<const bool*>(data) ? 1 : 0; return true;
    default: return false;  // Read by the copy below.
  }
}

// The values of `values` as numbers. Tensors in host memory are read in place; the others are brought to the host
// in one copy per device, type and shape rather than one synchronising read each.
std::vector<double> Read(const std::vector<const at::Tensor*>& values) {
  c10::NoGradGuard no_grad;  // Step values keep their autograd history (metrics.h); reading records none.
  std::vector<double> numbers(values.size());
  std::vector<bool> done(values.size(), false);
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i]->device().is_cpu() && values[i]->layout() == at::kStrided) {
      done[i] = ReadOnHost(*values[i], numbers[i]);
    }
  }
  for (size_t first = 0; first < values.size(); ++first) {
    if (done[first]) continue;
    const at::Tensor& lead = *values[first];
    std::vector<size_t> group;
    std::vector<at::Tensor> tensors;
    for (size_t i = first; i < values.size(); ++i) {
      const at::Tensor& tensor = *values[i];
      if (done[i] || tensor.device() != lead.device() || tensor.scalar_type() != lead.scalar_type() ||
          tensor.sizes() != lead.sizes()) {
        continue;
      }
      group.push_back(i);
      tensors.push_back(tensor);
      done[i] = true;
    }
    if (group.size() == 1) {
      numbers[first] = lead.item<double>();
      continue;
    }
    const at::Tensor host = at::stack(tensors).reshape({-1}).to(at::kCPU, at::kDouble).contiguous();
    const double* data = host.data_ptr<double>();
    for (size_t j = 0; j < group.size(); ++j) numbers[group[j]] = data[j];
  }
  return numbers;
}

// The value `value_of` gives for each slot (null: none), named by `name_of`, the tensors read together (Read).
template <typename Slot, typename ValueOf, typename NameOf>
MetricMap ReadSlots(const std::vector<Slot>& slots, ValueOf value_of, NameOf name_of) {
  std::vector<std::pair<const Slot*, decltype(value_of(slots.front()))>> picked;
  std::vector<const at::Tensor*> tensors;
  for (const Slot& slot : slots) {
    const auto* value = value_of(slot);
    if (value == nullptr) continue;
    picked.emplace_back(&slot, value);
    if (value->tensor.defined()) tensors.push_back(&value->tensor);
  }
  const std::vector<double> numbers = Read(tensors);
  MetricMap metrics;
  size_t next = 0;
  for (const auto& [slot, value] : picked) {
    metrics[name_of(*slot)] = value->tensor.defined() ? numbers[next++] : value->number;
  }
  return metrics;
}

[[noreturn]] void NotAScalar(std::string_view name, const at::Tensor& value) {
  TORCH_CHECK(false, "log('", name, "'): expected a scalar, got a tensor of shape ", value.sizes());
  __builtin_unreachable();
}

}  // namespace

// The slot of `name`: on the fast path, the one after the last found (a step logs its names in the order of the
// step before), inline in Record; else FindAnywhere.
inline MetricCollector::Slot& MetricCollector::Find(std::string_view name, bool suffixed) {
  if (next_slot_ < slots_.size()) {
    Slot& expected = slots_[next_slot_];
    if (C10_LIKELY(expected.suffixed == suffixed && SameName(expected.name, name))) {
      ++next_slot_;
      return expected;
    }
  }
  return FindAnywhere(name, suffixed);
}

MetricCollector::Slot& MetricCollector::FindAnywhere(std::string_view name, bool suffixed) {
  const size_t size = slots_.size();
  for (size_t index = 0; index < size; ++index) {
    Slot& slot = slots_[index];
    if (slot.suffixed == suffixed && SameName(slot.name, name)) {
      next_slot_ = index + 1;
      return slot;
    }
  }
  Slot& added = slots_.emplace_back();
  added.name = std::string(name);
  added.suffixed = suffixed;
  next_slot_ = slots_.size();
  return added;
}

inline void MetricCollector::Record(std::string_view name, const at::Tensor* tensor, double number,
                                    const LogOptions& options, int64_t batch_size) {
  const bool on_step = options.on_step.value_or(training_);
  const bool on_epoch = options.on_epoch.value_or(!training_);
  if (!on_step && !on_epoch) return;
  Slot& slot = Find(name, /*suffixed=*/on_step && on_epoch);
  if (on_step) {
    if (tensor != nullptr) {
      slot.value.tensor = *tensor;
    } else {
      slot.value.tensor.reset();
      slot.value.number = number;
    }
    slot.logged = true;
    slot.sync_dist = options.sync_dist;
    slot.step_reduce = options.reduce_fx;
    if (options.prog_bar) {
      slot.prog_bar = true;
      slot.progress = slot.value;
      slot.progress_logged = true;
    }
  }
  if (on_epoch) RecordEpoch(slot, name, tensor, number, options, batch_size);
}

void MetricCollector::RecordEpoch(Slot& slot, std::string_view name, const at::Tensor* tensor, double number,
                                  const LogOptions& options, int64_t batch_size) {
  Accumulator& accumulator = slot.epoch;
  TORCH_CHECK_VALUE(accumulator.count == 0 || accumulator.reduce == options.reduce_fx, "log('", name,
                    "'): logged with another reduce_fx earlier in the epoch; log each name with one reduce_fx");
  accumulator.reduce = options.reduce_fx;
  if (tensor != nullptr) {
    accumulator.values.push_back(tensor->detach());
    accumulator.weights.push_back(static_cast<double>(batch_size));
  } else if (options.reduce_fx == Reduce::kMean) {
    accumulator.number_sum += number * static_cast<double>(batch_size);
  } else {
    accumulator.numbers.push_back(number);
  }
  accumulator.count += batch_size;
  accumulator.prog_bar = options.prog_bar;
  accumulator.sync_dist = options.sync_dist;
}

void MetricCollector::Log(std::string_view name, const at::Tensor& value, const LogOptions& options,
                          int64_t batch_size) {
  if (C10_UNLIKELY(value.numel() != 1)) NotAScalar(name, value);
  Record(name, &value, 0, options, batch_size);
}

void MetricCollector::Log(std::string_view name, double value, const LogOptions& options, int64_t batch_size) {
  Record(name, nullptr, value, options, batch_size);
}

double MetricCollector::Accumulator::Mean() const {
  if (reduce != Reduce::kMean) {
    // Every value, unweighted: the numbers, and the tensors read in one copy.
    std::vector<double> all = numbers;
    if (!values.empty()) {
      const at::Tensor stacked = at::stack(values).reshape({-1}).to(at::kDouble).to(at::kCPU).contiguous();
      all.insert(all.end(), stacked.data_ptr<double>(), stacked.data_ptr<double>() + stacked.numel());
    }
    switch (reduce) {
      case Reduce::kSum:
        return std::accumulate(all.begin(), all.end(), 0.0);
      case Reduce::kMax:
        return *std::max_element(all.begin(), all.end());
      case Reduce::kMin:
        return *std::min_element(all.begin(), all.end());
      case Reduce::kMean:
        break;
    }
  }
  double sum = number_sum;
  if (!values.empty()) {
    const at::Tensor stacked = at::stack(values).reshape({-1}).to(at::kDouble);
    const at::Tensor weight = at::tensor(weights, at::TensorOptions().dtype(at::kDouble)).to(stacked.device());
    sum += (stacked * weight).sum().item<double>();
  }
  return sum / static_cast<double>(count);
}

std::map<std::string, MetricCollector::EpochTotal> MetricCollector::SyncedEpochTotals() const {
  std::map<std::string, EpochTotal> totals;
  for (const Slot& slot : slots_) {
    const Accumulator& accumulator = slot.epoch;
    if (!accumulator.sync_dist || accumulator.count == 0) continue;
    const double value = accumulator.Mean();
    if (accumulator.reduce != Reduce::kMean) {
      totals[slot.EpochName()] = {value, 1.0, accumulator.reduce};
      continue;
    }
    totals[slot.EpochName()] = {value * static_cast<double>(accumulator.count),
                                static_cast<double>(accumulator.count), Reduce::kMean};
  }
  return totals;
}

MetricMap MetricCollector::SyncedStepValues() const {
  MetricMap all = StepMetrics();
  MetricMap values;
  for (const Slot& slot : slots_) {
    if (slot.logged && slot.sync_dist) values[slot.StepName()] = all.at(slot.StepName());
  }
  return values;
}

std::map<std::string, Reduce> MetricCollector::SyncedStepReduces() const {
  std::map<std::string, Reduce> reduces;
  for (const Slot& slot : slots_) {
    if (slot.logged && slot.sync_dist) reduces[slot.StepName()] = slot.step_reduce;
  }
  return reduces;
}

bool MetricCollector::HasSyncedStepValues() const {
  for (const Slot& slot : slots_) {
    if (slot.logged && slot.sync_dist) return true;
  }
  return false;
}

MetricMap MetricCollector::StepMetrics() const {
  return ReadSlots(
      slots_, [](const Slot& slot) { return slot.logged ? &slot.value : nullptr; },
      [](const Slot& slot) { return slot.StepName(); });
}

MetricMap MetricCollector::TakeStepMetrics() {
  MetricMap metrics = StepMetrics();
  for (Slot& slot : slots_) {
    slot.logged = false;
    slot.value = Value();
  }
  return metrics;
}

MetricMap MetricCollector::ProgressBarMetrics() const {
  MetricMap metrics = ReadSlots(
      slots_, [](const Slot& slot) { return slot.progress_logged ? &slot.progress : nullptr; },
      [](const Slot& slot) { return slot.StepName(); });
  for (const Slot& slot : slots_) {
    if (slot.epoch.prog_bar && slot.epoch.count > 0) metrics[slot.EpochName()] = slot.epoch.Mean();
  }
  return metrics;
}

MetricMap MetricCollector::EpochMetrics() const {
  MetricMap metrics;
  for (const Slot& slot : slots_) {
    if (slot.epoch.count > 0) metrics[slot.EpochName()] = slot.epoch.Mean();
  }
  return metrics;
}

void MetricCollector::ResetEpoch() {
  for (Slot& slot : slots_) {
    slot.epoch.values.clear();  // Keeps the capacity: the next epoch logs as many.
    slot.epoch.weights.clear();
    slot.epoch.number_sum = 0;
    slot.epoch.numbers.clear();
    slot.epoch.count = 0;
    slot.progress_logged = false;
    slot.progress = Value();
  }
}

}  // namespace kiln
