// Lightning's AdvancedProfiler, in C++'s terms. Lightning's runs Python's cProfile inside each action and prints
// pstats' table of every Python function called during it. C++ has no interpreter to hook every function, so Kiln's
// records the actions themselves as a call tree: for each action, how often it ran, its inclusive time (cumtime:
// start to stop) and its exclusive time (tottime: less the time of the actions nested in it), and the same for each
// action nested directly inside it (a hook inside run_training_batch). The report has Lightning's shape ("Profile
// stats for: <action>", then a pstats-style table ordered by cumulative time), with action names where pstats has
// "filename:lineno(function)". For time inside LibTorch's operators, use the "pytorch" profiler.
#ifndef KILN_TRAINER_PROFILERS_ADVANCED_PROFILER_H_
#define KILN_TRAINER_PROFILERS_ADVANCED_PROFILER_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "trainer/profilers/profiler.h"

namespace kiln {

class AdvancedProfiler : public Profiler {
 public:
  explicit AdvancedProfiler(std::string dirpath = "", std::string filename = "");

  // Actions stop in the reverse order they start (the trainer's always do); a stop that does not match the innermost
  // running action is ignored.
  void start(absl::string_view action_name) override;
  void stop(absl::string_view action_name) override;
  std::string summary() override;

  // Calls and seconds of one action, or of one action nested directly inside another.
  struct Stats {
    int64_t calls = 0;
    double inclusive = 0;  // cumtime
    double exclusive = 0;  // tottime
  };
  struct Action {
    std::string name;
    Stats stats;
    std::vector<std::string> child_order;              // Nested actions, in the order first seen.
    absl::flat_hash_map<std::string, Stats> children;  // By name.
  };
  const std::vector<Action>& actions() const { return actions_; }
  const Action* Find(absl::string_view name) const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Frame {
    std::string name;
    Clock::time_point start;
    double nested = 0;  // Seconds of the actions nested in it so far.
  };
  std::vector<Frame> stack_;
  std::vector<Action> actions_;
  absl::flat_hash_map<std::string, size_t> index_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_PROFILERS_ADVANCED_PROFILER_H_
