// The processes of one program on several devices, as Lightning runs a script: started once, at the first entry
// point that needs them, and met again at every later one (fit, then test; validate, test, predict; two Trainers).
//
// - Launching (rank 0 of a run that starts its own processes): the other local processes are this program started
//   again (SubprocessLauncher, launcher.h), once per program. This process then carries the rank variables in its own
//   environment (LOCAL_RANK=0, NODE_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as Lightning's launcher sets them,
//   so that every later entry point, on this Trainer or another, finds the processes already there.
// - Meeting: the first entry point connects this process to the program's store (rank 0 serves it, or the
//   launcher's agent does) and checks every rank in; each entry point then agrees with every rank on which entry
//   point it is (the n-th of the program, fit or test, ...), and gets the store under a prefix of its own, on which
//   its process groups meet. Ranks that call different entry points, or a rank whose program ended before this
//   entry point, fail every rank at once with an error naming the rank and the entry point; a rank that never
//   comes fails them within the timeout.
// - Ending: when the program exits, this process says so in the store (its peers waiting for it fail at once), and
//   rank 0 waits for the processes it started (within the last timeout) and exits non-zero, naming them, when one
//   failed; rank 0 serving the store keeps it until every rank has ended.
//
// Thread-safety: one per process (Get); its methods are called from the loop thread of an entry point.
#ifndef KILN_TRAINER_STRATEGIES_DISTRIBUTED_PROGRAM_H_
#define KILN_TRAINER_STRATEGIES_DISTRIBUTED_PROGRAM_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "c10/util/intrusive_ptr.h"
#include "connector/plan.h"

namespace c10d {
class Store;
}  // namespace c10d

namespace kiln {

class SubprocessLauncher;

class DistributedProgram {
 public:
  // This process's program. Never destroyed: it lives until the process exits.
  static DistributedProgram& Get();

  // The entry point that the next Meet agrees on ("fit", "validate", "test", "predict"); the trainer names it before
  // it sets its strategy up.
  void BeginEntryPoint(absl::string_view name);

  // For a run whose processes this one starts (plan.creates_processes_externally is false): picks the main port when
  // the plan has none (a free one; several nodes must set MASTER_PORT), starts the other local processes when there
  // are any, and puts the rank variables into this process's environment, so that later entry points meet the same
  // processes. Fills plan->main_port. Once per program: later plans come from that environment.
  absl::Status Launch(Plan& plan);

  // Joins the program's store (the first time; within `timeout`) and agrees the current entry point with every rank.
  // Returns the store under this entry point's own prefix. Errors: DeadlineExceeded when the ranks did not all come
  // within `timeout` (the message says who and where); FailedPrecondition when a rank called another entry point or
  // ended its program, when this plan's processes are not the program's, or when the program's other processes were
  // stopped after a failure.
  absl::StatusOr<c10::intrusive_ptr<c10d::Store>> Meet(const Plan& plan, absl::Duration timeout);

  // After a failed entry point: stops the processes this one started (no later entry point can meet them) and
  // returns how those that had already ended had ended ("rank 1 (local rank 1, pid 42) was killed by signal 9"), or
  // "" when none had, or when this process started none.
  std::string Stop(const absl::Status& why);

  // How many entry points met so far in this program.
  int entry_points() const { return entries_; }

 private:
  DistributedProgram() = default;
  // Connects the store and checks every rank in (the first Meet).
  absl::Status Join(const Plan& plan, absl::Duration timeout);
  // The entry point's agreement: every rank's name for the entry_points()-th entry point, or why not.
  absl::Status Agree(absl::Time deadline);
  // At exit (std::atexit): tells the peers, then waits for the started processes or for every rank's end.
  void Exit();
  static void ExitHandler();

  std::unique_ptr<SubprocessLauncher> launcher_;
  c10::intrusive_ptr<c10d::Store> store_;  // The program's store (under the launcher's prefix, if it serves it).
  bool serves_store_ = false;
  std::string where_;  // "address:port", for messages and to check that later plans meet at the same place.
  int rank_ = 0;
  int world_size_ = 1;
  absl::Duration timeout_ = absl::Minutes(30);
  // The entry point being set up (a strategy set up without a Trainer names none).
  std::string entry_ = "a strategy's set-up";
  std::string last_entry_;  // The last one that met.
  int entries_ = 0;
  std::optional<std::string> stopped_;  // Why the started processes were stopped.
  bool exit_registered_ = false;
};

}  // namespace kiln

#endif  // KILN_TRAINER_STRATEGIES_DISTRIBUTED_PROGRAM_H_
