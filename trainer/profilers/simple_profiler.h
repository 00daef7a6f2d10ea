// Lightning's SimpleProfiler: the wall time of every action (each hook the trainer calls, each loop action), and a
// table of them at the end in Lightning's layout and columns (Action, Mean duration (s), Num calls, Total time (s),
// Percentage %; extended=false: Action, Mean duration (s), Total time (s)). Durations are std::chrono::steady_clock's.
#ifndef KILN_TRAINER_PROFILERS_SIMPLE_PROFILER_H_
#define KILN_TRAINER_PROFILERS_SIMPLE_PROFILER_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "trainer/profilers/profiler.h"

namespace kiln {

class SimpleProfiler : public Profiler {
 public:
  explicit SimpleProfiler(std::string dirpath = "", std::string filename = "", bool extended = true);

  // An action started again before it stops (a hook that calls itself through the trainer) is timed once, from its
  // outermost start to its outermost stop. stop() of an action never started is ignored (Lightning raises).
  void start(absl::string_view action_name) override;
  void stop(absl::string_view action_name) override;
  std::string summary() override;

  // What was recorded, per action in the order first started: its name, its calls, each call's seconds.
  struct Action {
    std::string name;
    std::vector<double> durations;
  };
  const std::vector<Action>& actions() const { return actions_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Running {
    Clock::time_point start;
    int depth = 0;
  };
  bool extended_;
  Clock::time_point start_time_;  // Lightning's start_time: the percentages' 100 %, from construction to summary().
  std::vector<Action> actions_;
  absl::flat_hash_map<std::string, size_t> index_;  // Into actions_.
  absl::flat_hash_map<std::string, Running> running_;
};

// Python's format(value, ".5"): 5 significant digits, the exponent form where %g uses it, and a ".0" on a whole
// number ("1.0", "0.0024002", "4.185e-05"). Lightning's tables print every number so.
std::string PythonFloat5(double value);

}  // namespace kiln

#endif  // KILN_TRAINER_PROFILERS_SIMPLE_PROFILER_H_
