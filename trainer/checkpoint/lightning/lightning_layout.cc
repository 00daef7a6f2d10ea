// Lightning's loops and callback states in a checkpoint (lightning_layout.h).
#include "trainer/checkpoint/lightning/lightning_layout.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "ATen/ATen.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "trainer/checkpoint/format/snapshot_dict.h"

namespace kiln {
namespace {

using c10::impl::GenericDict;

// The keys of Lightning's loops and callback states, made once (never destroyed, as interned keys are not): a
// checkpoint's loops entry is 44 dictionaries, made at every save.
struct LayoutKeys {
  DictKey ready{"ready"}, completed{"completed"}, started{"started"}, processed{"processed"};
  DictKey total{"total"}, current{"current"}, is_last_batch{"is_last_batch"};
  DictKey state_dict{"state_dict"}, batch_progress{"batch_progress"};
  DictKey batches_that_stepped{"_batches_that_stepped"}, step{"step"}, zero_grad{"zero_grad"}, optimizer{"optimizer"};
  DictKey epoch_loop_state_dict{"epoch_loop.state_dict"}, epoch_loop_batch_progress{"epoch_loop.batch_progress"};
  DictKey epoch_loop_scheduler_progress{"epoch_loop.scheduler_progress"};
  DictKey automatic_state_dict{"epoch_loop.automatic_optimization.state_dict"};
  DictKey automatic_optim_progress{"epoch_loop.automatic_optimization.optim_progress"};
  DictKey manual_state_dict{"epoch_loop.manual_optimization.state_dict"};
  DictKey manual_optim_step_progress{"epoch_loop.manual_optimization.optim_step_progress"};
  DictKey val_loop_state_dict{"epoch_loop.val_loop.state_dict"};
  DictKey val_loop_batch_progress{"epoch_loop.val_loop.batch_progress"};
  DictKey epoch_progress{"epoch_progress"};
  DictKey fit_loop{"fit_loop"}, validate_loop{"validate_loop"}, test_loop{"test_loop"}, predict_loop{"predict_loop"};
  DictKey best_model_score{"best_model_score"}, time_elapsed{"time_elapsed"}, train{"train"};
};

const LayoutKeys& Keys() {
  static const LayoutKeys* const keys = new LayoutKeys();
  return *keys;
}

// One of Lightning's progress trackers, in its field order: ready and completed, then started and processed where
// the tracker has them (`fields`: 2, 3 or 4).
struct Counts {
  int64_t ready = 0, started = 0, processed = 0, completed = 0;
  int fields = 4;
};

// A tracker whose every count is `n` (a run that finished n batches, or steps).
Counts Finished(int64_t n, int fields = 4) { return Counts{n, n, n, n, fields}; }

template <typename Sink>
void WriteCounts(Sink& out, const LayoutKeys& keys, const Counts& counts) {
  out.BeginDict(counts.fields);
  WriteKey(out, keys.ready);
  out.Int(counts.ready);
  WriteKey(out, keys.completed);
  out.Int(counts.completed);
  if (counts.fields >= 3) {
    WriteKey(out, keys.started);
    out.Int(counts.started);
  }
  if (counts.fields >= 4) {
    WriteKey(out, keys.processed);
    out.Int(counts.processed);
  }
  out.EndDict();
}

// A tracker's {"total", "current"}, and "is_last_batch" where `is_last_batch` is given.
template <typename Sink>
void WriteProgress(Sink& out, const LayoutKeys& keys, const Counts& total, const Counts& current,
                   const bool* is_last_batch = nullptr) {
  out.BeginDict(is_last_batch != nullptr ? 3 : 2);
  WriteKey(out, keys.total);
  WriteCounts(out, keys, total);
  WriteKey(out, keys.current);
  WriteCounts(out, keys, current);
  if (is_last_batch != nullptr) {
    WriteKey(out, keys.is_last_batch);
    out.Bool(*is_last_batch);
  }
  out.EndDict();
}

template <typename Sink>
void WriteEmptyDict(Sink& out) {
  out.BeginDict();
  out.EndDict();
}

// An evaluation loop's entry (validate_loop, test_loop, predict_loop): Kiln keeps no progress for them across a
// checkpoint, as Lightning keeps none that it resumes from.
template <typename Sink>
void WriteEvaluationLoop(Sink& out, const LayoutKeys& keys, bool has_last_batch) {
  const bool last_batch = false;
  out.BeginDict(2);
  WriteKey(out, keys.state_dict);
  WriteEmptyDict(out);
  WriteKey(out, keys.batch_progress);
  WriteProgress(out, keys, Finished(0), Finished(0), has_last_batch ? &last_batch : nullptr);
  out.EndDict();
}

// dict[path...] as a count in [0, kMaxCheckpointCounter); `fallback` when absent, not an integer or out of range.
int64_t FindCount(const GenericDict& dict, const std::vector<std::string>& path, int64_t fallback) {
  c10::IValue level(dict);
  for (const std::string& key : path) {
    if (!level.isGenericDict()) return fallback;
    const GenericDict current = level.toGenericDict();
    auto found = current.find(c10::IValue(key));
    if (found == current.end()) return fallback;
    level = found->value();
  }
  if (!level.isInt()) return fallback;
  const int64_t value = level.toInt();
  return value >= 0 && value < kMaxCheckpointCounter ? value : fallback;
}

// The value types Lightning's own callbacks keep, for the keys Kiln's same-named callbacks write as text.
enum class Kind { kTensor, kInt, kScores };
struct TypedKey {
  const char* callback;  // The state key's start: the callback's class.
  const char* key;
  Kind kind;
};
constexpr TypedKey kTypedKeys[] = {
    {"ModelCheckpoint{", "best_model_score", Kind::kTensor}, {"ModelCheckpoint{", "best_k_models", Kind::kScores},
    {"ModelCheckpoint{", "last_saved_step", Kind::kInt},     {"EarlyStopping{", "best_score", Kind::kTensor},
    {"EarlyStopping{", "wait_count", Kind::kInt},            {"EarlyStopping{", "stopped_epoch", Kind::kInt},
    {"EarlyStopping{", "patience", Kind::kInt},
};

const TypedKey* FindTypedKey(const std::string& state_key, const std::string& key) {
  for (const TypedKey& typed : kTypedKeys) {
    if (absl::StartsWith(state_key, typed.callback) && key == typed.key) return &typed;
  }
  return nullptr;
}

// Text as Lightning's type; the text itself when it does not parse (the callback then reports it on load).
c10::IValue Typed(Kind kind, const std::string& text) {
  switch (kind) {
    case Kind::kTensor: {
      double number = 0;
      if (absl::SimpleAtod(text, &number)) return at::scalar_tensor(number, at::kDouble);
      break;
    }
    case Kind::kInt: {
      int64_t number = 0;
      if (absl::SimpleAtoi(text, &number)) return number;
      break;
    }
    case Kind::kScores: {
      GenericDict scores = NewDict();
      for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
        std::vector<std::string> fields = absl::StrSplit(line, absl::MaxSplits('\t', 1));
        double score = 0;
        if (fields.size() != 2 || !absl::SimpleAtod(fields[1], &score)) return text;
        Put(scores, fields[0], at::scalar_tensor(score, at::kDouble));
      }
      return scores;
    }
  }
  return text;
}

std::string Number(double value) { return absl::StrFormat("%.17g", value); }

// One value of a callback's state as Kiln's text into `text`; false for what Kiln does not read back (None, and
// dictionaries only Lightning reads).
bool AsText(const std::string& state_key, const std::string& key, const c10::IValue& value, std::string* text) {
  if (value.isString()) {
    *text = value.toStringRef();
  } else if (value.isInt()) {
    *text = absl::StrCat(value.toInt());
  } else if (value.isDouble()) {
    *text = Number(value.toDouble());
  } else if (value.isBool()) {
    *text = value.toBool() ? "true" : "false";
  } else if (value.isTensor() && value.toTensor().numel() == 1) {
    *text = Number(value.toTensor().to(at::kDouble).item<double>());
  } else if (value.isGenericDict()) {
    const TypedKey* typed = FindTypedKey(state_key, key);
    if (typed == nullptr || typed->kind != Kind::kScores) return false;  // Lightning's own, such as Timer's.
    text->clear();
    for (const auto& entry : value.toGenericDict()) {
      std::string score;
      TORCH_CHECK(entry.key().isString() && AsText(state_key, key, entry.value(), &score), "the state of callback ",
                  state_key, ": '", key, "' holds a ", entry.value().tagKind(), " where a score was expected");
      absl::StrAppend(text, entry.key().toStringRef(), "\t", score, "\n");
    }
  } else if (value.isNone()) {
    return false;
  } else {
    TORCH_CHECK(false, "the state of callback ", state_key, " holds a ", value.tagKind(), " under '", key,
                "' where text or a number was expected");
  }
  return true;
}

}  // namespace

namespace {

// Lightning's loops (lightning_layout.h), into either sink.
template <typename Sink>
void WriteLoops(Sink& out, const LightningLoopPosition& position, const LightningCounters& counters,
                int64_t scheduler_steps) {
  const LayoutKeys& keys = Keys();
  const int64_t epoch = position.current_epoch;
  const int64_t done = position.batches_done;
  // Mid-epoch, a batch whose on_train_batch_end hooks have not returned yet is started but not completed.
  const int64_t completed = position.epoch_ended ? done : std::min(done, counters.batches_completed);
  const int64_t total = std::max(counters.batches_total, done);
  // Lightning counts an epoch as processed once its batches are, and completed once on_train_epoch_end has run and
  // the next one is about to start.
  const int64_t processed_epochs = position.epoch_ended ? epoch + 1 : epoch;
  const Counts epochs{epoch + 1, epoch + 1, processed_epochs, epoch};
  const int64_t steps = position.global_step;
  const bool val_last_batch = counters.val_batches_last_run > 0;

  out.BeginDict(4);
  WriteKey(out, keys.fit_loop);
  out.BeginDict(11);
  WriteKey(out, keys.state_dict);
  WriteEmptyDict(out);
  WriteKey(out, keys.epoch_loop_state_dict);
  out.BeginDict(1);
  WriteKey(out, keys.batches_that_stepped);
  out.Int(counters.batches_that_stepped);
  out.EndDict();
  WriteKey(out, keys.epoch_loop_batch_progress);
  WriteProgress(out, keys, Counts{total, total, total, total - (done - completed)},
                Counts{done, done, done, completed}, &position.epoch_ended);
  WriteKey(out, keys.epoch_loop_scheduler_progress);
  WriteProgress(out, keys, Finished(scheduler_steps, 2), Finished(counters.scheduler_steps_in_epoch, 2));
  WriteKey(out, keys.automatic_state_dict);
  WriteEmptyDict(out);
  WriteKey(out, keys.automatic_optim_progress);
  out.BeginDict(1);
  WriteKey(out, keys.optimizer);
  out.BeginDict(2);
  WriteKey(out, keys.step);
  WriteProgress(out, keys, Finished(steps, 2), Finished(counters.steps_in_epoch, 2));
  // zero_grad's tracker has "started" but no "processed".
  WriteKey(out, keys.zero_grad);
  WriteProgress(out, keys, Finished(steps, 3), Finished(counters.steps_in_epoch, 3));
  out.EndDict();
  out.EndDict();
  WriteKey(out, keys.manual_state_dict);
  WriteEmptyDict(out);
  WriteKey(out, keys.manual_optim_step_progress);
  WriteProgress(out, keys, Finished(0, 2), Finished(0, 2));
  WriteKey(out, keys.val_loop_state_dict);
  WriteEmptyDict(out);
  WriteKey(out, keys.val_loop_batch_progress);
  WriteProgress(out, keys, Finished(counters.val_batches_in_epoch), Finished(counters.val_batches_last_run),
                &val_last_batch);
  WriteKey(out, keys.epoch_progress);
  WriteProgress(out, keys, epochs, epochs);
  out.EndDict();
  WriteKey(out, keys.validate_loop);
  WriteEvaluationLoop(out, keys, /*has_last_batch=*/true);
  WriteKey(out, keys.test_loop);
  WriteEvaluationLoop(out, keys, /*has_last_batch=*/true);
  WriteKey(out, keys.predict_loop);
  WriteEvaluationLoop(out, keys, /*has_last_batch=*/false);
  out.EndDict();
}

// A callback's state (lightning_layout.h), into either sink.
template <typename Sink>
void WriteCallbackState(Sink& out, const std::string& state_key, const CallbackState& state) {
  const LayoutKeys& keys = Keys();
  out.BeginDict(state.size() + 1);
  for (const auto& [key, text] : state) {
    out.Key(key);
    const TypedKey* typed = FindTypedKey(state_key, key);
    if (typed == nullptr) {
      out.String(text);
    } else {
      out.Value(Typed(typed->kind, text));
    }
  }
  // Lightning's ModelCheckpoint reads its best score whether or not there is one.
  if (absl::StartsWith(state_key, "ModelCheckpoint{") && state.count("best_model_score") == 0) {
    WriteKey(out, keys.best_model_score);
    out.None();
  }
  if (state_key == "Timer") {
    // Lightning's Timer resumes from the training time under "time_elapsed".
    auto found = state.find("time_elapsed_seconds");
    double seconds = 0;
    if (found != state.end() && absl::SimpleAtod(found->second, &seconds)) {
      WriteKey(out, keys.time_elapsed);
      out.BeginDict(1);
      WriteKey(out, keys.train);
      out.Double(seconds);
      out.EndDict();
    }
  }
  out.EndDict();
}

}  // namespace

void LightningLoops(PickleWriter& out, const LightningLoopPosition& position, const LightningCounters& counters,
                    int64_t scheduler_steps) {
  WriteLoops(out, position, counters, scheduler_steps);
}

void LightningLoops(ValueBuilder& out, const LightningLoopPosition& position, const LightningCounters& counters,
                    int64_t scheduler_steps) {
  WriteLoops(out, position, counters, scheduler_steps);
}

GenericDict LightningLoops(const LightningLoopPosition& position, const LightningCounters& counters,
                           int64_t scheduler_steps) {
  ValueBuilder out;
  WriteLoops(out, position, counters, scheduler_steps);
  return out.Finish().toGenericDict();
}

LightningCounters ReadLightningCounters(const GenericDict& checkpoint, const LightningLoopPosition& position) {
  LightningCounters counters;
  const auto count = [&](std::vector<std::string> path, int64_t fallback) {
    path.insert(path.begin(), {"loops", "fit_loop"});
    return FindCount(checkpoint, path, fallback);
  };
  counters.batches_total = std::max(count({"epoch_loop.batch_progress", "total", "ready"}, 0), position.batches_done);
  counters.batches_completed = position.batches_done;
  counters.steps_in_epoch =
      count({"epoch_loop.automatic_optimization.optim_progress", "optimizer", "step", "current", "completed"},
                std::min(position.global_step, position.batches_done));
  counters.scheduler_steps_in_epoch = count({"epoch_loop.scheduler_progress", "current", "completed"}, 0);
  counters.val_batches_in_epoch = count({"epoch_loop.val_loop.batch_progress", "total", "completed"}, 0);
  counters.val_batches_last_run = count({"epoch_loop.val_loop.batch_progress", "current", "completed"}, 0);
  if (position.epoch_ended) {
    // The next epoch starts with its own counts.
    counters.batches_completed = 0;
    counters.steps_in_epoch = 0;
    counters.scheduler_steps_in_epoch = 0;
    counters.val_batches_in_epoch = 0;
  }
  return counters;
}

void LightningCallbackState(PickleWriter& out, const std::string& state_key, const CallbackState& state) {
  WriteCallbackState(out, state_key, state);
}

void LightningCallbackState(ValueBuilder& out, const std::string& state_key, const CallbackState& state) {
  WriteCallbackState(out, state_key, state);
}

GenericDict LightningCallbackState(const std::string& state_key, const CallbackState& state) {
  ValueBuilder out;
  WriteCallbackState(out, state_key, state);
  return out.Finish().toGenericDict();
}

CallbackState KilnCallbackState(const std::string& state_key, const c10::IValue& value) {
  TORCH_CHECK(value.isGenericDict(), "'callbacks' holds a ", value.tagKind(), " where the state of callback ",
              state_key, " was expected");
  CallbackState state;
  for (const auto& item : value.toGenericDict()) {
    TORCH_CHECK(item.key().isString(), "the state of callback ", state_key, " has a key that is not text");
    std::string text;
    if (AsText(state_key, item.key().toStringRef(), item.value(), &text)) state[item.key().toStringRef()] = text;
  }
  return state;
}

std::string CurrentStateKey(const std::string& state_key) {
  if (!absl::StartsWith(state_key, "ModelCheckpoint{") || !absl::EndsWith(state_key, "}") ||
      absl::StrContains(state_key, "'train_time_interval'")) {
    return state_key;
  }
  return absl::StrCat(state_key.substr(0, state_key.size() - 1), ", 'train_time_interval': None}");
}

}  // namespace kiln
