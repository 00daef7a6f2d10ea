// Lightning's profilers (lightning.pytorch.profilers): what a run spends its time on, by action, named as Lightning
// names them. The trainer times every hook it calls ("[LightningModule]MyModel.on_train_epoch_start",
// "[Callback]ModelCheckpoint{...}.on_train_epoch_end", "[Strategy]SingleDeviceStrategy.training_step") and its loops'
// actions ("run_training_epoch", "run_training_batch", "[_TrainingEpochLoop].train_dataloader_next") through one
// Profiler, which TrainerOptions::profiler chooses: "simple" (simple_profiler.h), "advanced" (advanced_profiler.h) or
// "pytorch" (pytorch_profiler.h); none by default, which costs the loops one null test per hook.
//
// A profiler of one's own derives from Profiler and implements start and stop (and summary, to report).
// Not thread-safe: the trainer calls it from the thread that runs the entry point.
#ifndef KILN_TRAINER_PROFILERS_PROFILER_H_
#define KILN_TRAINER_PROFILERS_PROFILER_H_

#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hal/accelerator.h"

namespace kiln {

// What an entry point tells its profiler when it starts (Lightning's Profiler.setup).
struct ProfilerSetup {
  std::string stage;                // "fit", "validate", "test", "predict".
  std::optional<int> local_rank;    // This process's local rank when the run has several processes; else unset.
  std::string log_dir;              // The first logger's log_dir (default_root_dir without one): dirpath's default.
  Accelerator* accelerator = nullptr;  // The run's accelerator and this process's device (device-side traces).
  std::optional<LogicalDevice> device;
};

class Profiler {
 public:
  // `dirpath` and `filename` as Lightning's: with a filename, describe() writes the report to
  // <dirpath>/<stage>-<filename>[-<local_rank>].txt (dirpath defaults to the run's log_dir), appending to what an
  // earlier entry point of the program wrote there; without one, rank zero prints it on standard output.
  explicit Profiler(std::string dirpath = "", std::string filename = "");
  virtual ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Starts and stops timing `action_name`. Actions nest (a hook inside run_training_batch); the same name is not
  // started twice before it stops. Must not throw.
  virtual void start(absl::string_view action_name) = 0;
  virtual void stop(absl::string_view action_name) = 0;
  // The report of what was recorded since setup, in Lightning's layout; empty for none.
  virtual std::string summary() { return ""; }

  // Lightning's setup and teardown, once per entry point: the stage, the rank, the log folder. A profiler that
  // holds a resource (pytorch's LibTorch profiler) takes and releases it here; errors are values.
  virtual absl::Status setup(const ProfilerSetup& setup);
  virtual absl::Status teardown();
  // Writes summary() (see the constructor), then teardown(). A file is replaced whole and durably
  // (WriteFileDurably) with what it held and the new report.
  absl::Status describe();

  const std::string& dirpath() const { return dirpath_; }
  const std::string& filename() const { return filename_; }
  // This entry point's stage and local rank (after setup), as Lightning's _stage and _local_rank.
  const std::string& stage() const { return stage_; }
  std::optional<int> local_rank() const { return local_rank_; }

 protected:
  // Lightning's _prepare_filename: "<stage>-<filename>-<local_rank>[-<action_name>]<extension>", each part present
  // only when set, with characters a file name cannot hold made '_'; "profile<extension>" when nothing is set.
  std::string PrepareFilename(absl::string_view action_name = "", absl::string_view extension = ".txt") const;
  // Where a file named `name` goes: <dirpath>/<name>, with the folder made; empty when there is no dirpath.
  absl::StatusOr<std::string> OutputPath(absl::string_view name) const;
  // Lightning's _stats_to_str: "<STAGE> Profiler Report" and, per action, "Profile stats for: <action>[ rank: N]" and
  // its text.
  std::string StatsToString(const std::vector<std::pair<std::string, std::string>>& stats) const;

 private:
  std::string dirpath_;
  std::string filename_;
  std::string stage_;
  std::optional<int> local_rank_;
};

// Times one action for as long as it lives (Lightning's `with profiler.profile(name)`) when `profiler` is not null;
// with a null profiler it does nothing. `name` must outlive it (a literal, or a string the caller holds).
class ProfileAction {
 public:
  ProfileAction(Profiler* profiler, absl::string_view name) : profiler_(profiler), name_(name) {
    if (profiler_ != nullptr) profiler_->start(name_);
  }
  ~ProfileAction() { Stop(); }
  // Stops timing now, before the end of the scope (then the destructor does nothing).
  void Stop() {
    if (profiler_ != nullptr) profiler_->stop(name_);
    profiler_ = nullptr;
  }
  ProfileAction(const ProfileAction&) = delete;
  ProfileAction& operator=(const ProfileAction&) = delete;

 private:
  Profiler* profiler_;
  absl::string_view name_;
};

// Lightning's `Trainer(profiler=...)`: a profiler's name ("simple", "advanced", "pytorch"; empty for none) or a
// profiler object of the program's own (a class derived from Profiler), which the Trainer then uses as it is: its
// dirpath and filename are its own, and it may be read after the run (its counts, its summary()). The Trainer shares
// the object; it calls it from the thread that runs each entry point, one entry point at a time.
class ProfilerFlag {
 public:
  ProfilerFlag() = default;
  ProfilerFlag(const char* name) : name_(name) {}             // NOLINT(google-explicit-constructor)
  ProfilerFlag(std::string name) : name_(std::move(name)) {}  // NOLINT(google-explicit-constructor)
  template <typename T, typename = std::enable_if_t<std::is_base_of_v<Profiler, T>>>
  ProfilerFlag(std::shared_ptr<T> instance)  // NOLINT(google-explicit-constructor)
      : instance_(std::move(instance)) {}

  // The name, when a name was given (empty with an instance, and for none).
  const std::string& name() const { return name_; }
  // The object, when one was given (then name() is empty).
  const std::shared_ptr<Profiler>& instance() const { return instance_; }
  // Neither a name nor an object: no profiler (Lightning's None).
  bool empty() const { return name_.empty() && instance_ == nullptr; }

 private:
  std::string name_;
  std::shared_ptr<Profiler> instance_;
};

// The names TrainerOptions::profiler accepts, in order: simple, advanced, pytorch.
const std::vector<std::string>& ProfilerNames();

// The profiler `name` names (one of ProfilerNames()), writing to `dirpath`/`filename` as the constructor says;
// InvalidArgument naming the value and the accepted ones otherwise.
absl::StatusOr<std::unique_ptr<Profiler>> MakeProfiler(absl::string_view name, std::string dirpath = "",
                                                       std::string filename = "");

// The class name Lightning's action names use for `type_name`, a C++ type's demangled name: its last component
// ("MyModel" for "app::MyModel", "Mlp" for "kiln::Mlp"), template arguments kept.
std::string ShortTypeName(absl::string_view type_name);

}  // namespace kiln

#endif  // KILN_TRAINER_PROFILERS_PROFILER_H_
