// What `LightningModule::log` records, and how the loops turn it into step and epoch metrics (Lightning's
// ResultCollection, reduced to what Kiln needs).
//
// Defaults follow Lightning: in training, a value is logged per step (on_step) and not per epoch; in validation and
// test, per epoch and not per step. With both, the step value is named `<name>_step` and the epoch value
// `<name>_epoch`. Epoch values are means weighted by batch size. Values stay tensors until read, so logging a loss
// does not force a device synchronisation on every step, and a read brings every value of one device and type to the
// host in one copy.
//
// Cost: logging is meant to be free on the step. A step value is kept as the tensor logged (no copy, no detach: it
// holds the tensor's autograd history until the next value of that name or a read, and after backward that history
// holds no activations); a number stays a number. A name logged in the same order as on the step before is found
// without a lookup or an allocation: one comparison of the name with the expected slot's. Epoch values are detached,
// since they are kept until the epoch ends.
//
// Thread-safety: owned by the loop thread.
#ifndef KILN_TRAINER_CORE_METRICS_H_
#define KILN_TRAINER_CORE_METRICS_H_

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ATen/core/Tensor.h"

namespace kiln {

// How an epoch value combines the values logged over the epoch (Lightning's reduce_fx): the mean weighted by
// batch size, the sum of the values, their largest or their smallest.
enum class Reduce { kMean, kSum, kMax, kMin };

struct LogOptions {
  bool prog_bar = false;         // Show in the progress bar.
  std::optional<bool> on_step;   // Unset: true in training, false elsewhere.
  std::optional<bool> on_epoch;  // Unset: false in training, true elsewhere.
  // Reduce across processes before recording, by reduce_fx (Lightning's sync_dist): a mean epoch value to the mean
  // over every process's examples (weighted by batch size, as on one process), a sum, max or min to the sum, max or
  // min of every process's; a step value to the mean (sum, max, min) of the processes' values.
  bool sync_dist = false;
  // The examples the value stands for, which weigh it in the epoch's mean (Lightning's batch_size). Unset: the
  // batch's own size. At least 1.
  std::optional<int64_t> batch_size;
  // How the epoch value combines the epoch's values (Lightning's reduce_fx), and how sync_dist combines the
  // processes' values. Step values are this process's latest value whatever it says.
  Reduce reduce_fx = Reduce::kMean;
};

using MetricMap = std::map<std::string, double>;

class MetricCollector {
 public:
  explicit MetricCollector(bool training) : training_(training) {}

  // Records `value` (a scalar tensor or a number) for the current batch of `batch_size` examples.
  void Log(std::string_view name, const at::Tensor& value, const LogOptions& options, int64_t batch_size);
  void Log(std::string_view name, double value, const LogOptions& options, int64_t batch_size);
  // Log's commonest call, inline where it is made (LightningModule::log): in training, a scalar tensor logged as a
  // step value only (on_step, not on_epoch, no prog_bar, no batch_size), under the name that the step before logged
  // at this point. Records it as Log would and returns true; returns false, having recorded nothing, for every other
  // call, which Log then takes. (50 such calls a step cost the tiny MLP about 3,200 instructions, callgrind's count,
  // against 9,700 when every call went through Log: docs/performance.md.)
  bool TryLogStep(std::string_view name, const at::Tensor& value, const LogOptions& options) {
    if (!training_ || next_slot_ >= slots_.size() || options.prog_bar || options.batch_size.has_value() ||
        !options.on_step.value_or(true) || options.on_epoch.value_or(false)) {
      return false;
    }
    Slot& slot = slots_[next_slot_];
    if (slot.suffixed || !SameName(slot.name, name) || value.numel() != 1) return false;
    slot.value.tensor = value;
    slot.logged = true;
    slot.sync_dist = options.sync_dist;
    slot.step_reduce = options.reduce_fx;
    ++next_slot_;
    return true;
  }

  // The latest value of each metric logged on_step. Reading converts tensors to numbers (a device sync).
  MetricMap StepMetrics() const;
  // StepMetrics, then forgets them.
  MetricMap TakeStepMetrics();
  // Names logged with prog_bar (their latest step or epoch value).
  MetricMap ProgressBarMetrics() const;
  // The values logged on_epoch since the last ResetEpoch, combined by their reduce_fx (by default the
  // batch-size-weighted mean).
  MetricMap EpochMetrics() const;
  void ResetEpoch();

  // What the loop reduces across processes, by metric name (as EpochMetrics and StepMetrics name them), each with
  // the reduce_fx it was logged with: for each epoch value logged with sync_dist, with kMean, the batch-size-weighted
  // sum of its values and the sum of the weights, so that the global mean weighs every example alike however the
  // examples were split between processes; with kSum, kMax or kMin, this process's sum, max or min (weight 1), which
  // the processes' sum, max or min combine; for each step value logged with sync_dist, the value (combined by its
  // reduce_fx: the mean, sum, max or min over processes, as Lightning's sync_dist does).
  struct EpochTotal {
    double weighted_sum = 0;
    double weight = 0;
    Reduce reduce = Reduce::kMean;
  };
  std::map<std::string, EpochTotal> SyncedEpochTotals() const;
  MetricMap SyncedStepValues() const;
  std::map<std::string, Reduce> SyncedStepReduces() const;
  // Whether any step value waiting to be read was logged with sync_dist (reads nothing from the device).
  bool HasSyncedStepValues() const;

 private:
  // A logged value: a tensor when one was logged, else the number.
  struct Value {
    at::Tensor tensor;
    double number = 0;
  };
  // Values are kept as logged and reduced when read: logging costs no arithmetic on the hot path.
  struct Accumulator {
    std::vector<at::Tensor> values;
    std::vector<double> weights;  // Batch sizes.
    double number_sum = 0;        // Batch-size-weighted sum of the numbers logged (kMean).
    std::vector<double> numbers;  // The numbers logged (the other reductions).
    int64_t count = 0;
    Reduce reduce = Reduce::kMean;
    bool prog_bar = false;
    bool sync_dist = false;
    double Mean() const;
  };
  // Everything kept for one name. Slots live for the collector's lifetime, in the order names were first logged, so
  // that a step that logs the names of the step before, in the same order, finds each in the slot after the last.
  struct Slot {
    std::string name;       // As logged.
    bool suffixed = false;  // Logged both on_step and on_epoch: the values are `<name>_step` and `<name>_epoch`.
    bool logged = false;    // Holds a step value.
    bool sync_dist = false;
    bool prog_bar = false;
    bool progress_logged = false;  // `progress` holds a value since the last ResetEpoch.
    Value value;
    Value progress;     // The latest value for the progress bar (prog_bar), kept until ResetEpoch.
    Accumulator epoch;  // The values logged on_epoch since the last ResetEpoch.
    Reduce step_reduce = Reduce::kMean;  // How sync_dist combines the step value across processes.
    std::string StepName() const { return suffixed ? name + "_step" : name; }
    std::string EpochName() const { return suffixed ? name + "_epoch" : name; }
  };
  // Whether `a` and `b` hold the same characters: a few word compares for the short names metrics have, without
  // the call into memcmp that std::string's == makes.
  static bool SameName(const std::string& a, std::string_view b) {
    const size_t size = a.size();
    if (size != b.size()) return false;
    const char* x = a.data();
    const char* y = b.data();
    const auto word = [](const char* at) {
      uint64_t value;
      std::memcpy(&value, at, sizeof(value));
      return value;
    };
    if (size >= 8) {
      for (size_t i = 0; i + 8 < size; i += 8) {
        if (word(x + i) != word(y + i)) return false;
      }
      return word(x + size - 8) == word(y + size - 8);  // The last 8 bytes, overlapping the words before.
    }
    for (size_t i = 0; i < size; ++i) {
      if (x[i] != y[i]) return false;
    }
    return true;
  }
  void Record(std::string_view name, const at::Tensor* tensor, double number, const LogOptions& options,
              int64_t batch_size);
  Slot& Find(std::string_view name, bool suffixed);
  Slot& FindAnywhere(std::string_view name, bool suffixed);
  void RecordEpoch(Slot& slot, std::string_view name, const at::Tensor* tensor, double number,
                   const LogOptions& options, int64_t batch_size);

  const bool training_;
  std::vector<Slot> slots_;
  size_t next_slot_ = 0;  // Where the next name is expected: the slot after the one logged last.
};

}  // namespace kiln

#endif  // KILN_TRAINER_CORE_METRICS_H_
