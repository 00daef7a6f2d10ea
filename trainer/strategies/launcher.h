// Starts the other local processes of a distributed run, like Lightning's subprocess launcher: this program is
// started again, with the same arguments, once per extra local device, with the rank variables set
// (LOCAL_RANK, NODE_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). This process goes on as local rank 0.
//
// Guarantees:
//  - The children die with this process (PR_SET_PDEATHSIG), however it ends.
//  - SIGINT and SIGTERM sent to this process are passed on to the children before this process ends.
//  - A child that exits abnormally while training runs (a crash, a kill, an error) is noticed within
//    `kPollInterval`: this process prints which rank ended and how, stops the other ranks, and exits with status 1,
//    so that no rank waits for a dead peer.
//
// Thread-safety: one launcher per process; its methods are called from the loop thread. It owns a watcher thread.
#ifndef KILN_TRAINER_STRATEGIES_LAUNCHER_H_
#define KILN_TRAINER_STRATEGIES_LAUNCHER_H_

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "connector/plan.h"

namespace kiln {

class SubprocessLauncher {
 public:
  static constexpr absl::Duration kPollInterval = absl::Milliseconds(100);

  // Starts plan.num_devices() - 1 children with local ranks 1.. and `port` as MASTER_PORT.
  static absl::StatusOr<std::unique_ptr<SubprocessLauncher>> Launch(const Plan& plan, int port);

  ~SubprocessLauncher();  // Kills children that are still running.

  // Waits up to `timeout` for every child to exit; an error names each rank that failed or did not finish.
  absl::Status Join(absl::Duration timeout);
  // Stops every child (SIGTERM, then SIGKILL after a grace period) and reaps them. Returns how the children that
  // had already ended abnormally ended ("rank 1 (local rank 1, pid 42) was killed by signal 9"), or "".
  std::string KillAll();

 private:
  struct Child {
    pid_t pid;
    int local_rank;
    int global_rank;
  };
  SubprocessLauncher() = default;
  void Watch();

  std::vector<Child> children_;
  std::atomic<bool> stop_watching_{false};
  std::thread watcher_;
};

// A TCP port that was free on this machine a moment ago (bound to port 0, then released).
absl::StatusOr<int> FindFreePort();

}  // namespace kiln

#endif  // KILN_TRAINER_STRATEGIES_LAUNCHER_H_
