// Kiln's own cluster environment ("lightning", after Lightning's LightningEnvironment): a single machine, or a
// cluster that nothing manages, and the fallback when no scheduler is detected.
//
// Variables:
//   LOCAL_RANK   this process's rank on its node (default 0). When set, the user (or a launcher such as
//                torch.distributed.launch) started the processes, so Kiln starts none.
//   NODE_RANK    this node's rank (default: GROUP_RANK, then 0).
//   MASTER_ADDR  the main process's host (default 127.0.0.1).
//   MASTER_PORT  its port (default: none; whoever starts the processes picks a free one).
// The world size and global rank are not read: the connector sets them from devices x num_nodes and the ranks.
//
// Thread-safety: safe to share; the values set by SetWorldSize/SetGlobalRank are guarded by a mutex.
#ifndef KILN_CONNECTOR_LIGHTNING_ENVIRONMENT_H_
#define KILN_CONNECTOR_LIGHTNING_ENVIRONMENT_H_

#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "connector/cluster_environment.h"
#include "connector/process_environment.h"

namespace kiln {

class LightningEnvironment final : public ClusterEnvironment {
 public:
  explicit LightningEnvironment(ProcessEnvironment environment = ProcessEnvironment::Current())
      : environment_(std::move(environment)) {}

  // Always true: this is the fallback.
  static bool Detect(const ProcessEnvironment& environment) {
    (void)environment;
    return true;
  }

  std::string name() const override { return "lightning"; }
  bool CreatesProcessesExternally() const override { return environment_.Has("LOCAL_RANK"); }
  absl::StatusOr<std::string> MainAddress() const override;
  absl::StatusOr<std::optional<int>> MainPort() const override;
  absl::StatusOr<int> WorldSize() const override;
  void SetWorldSize(int size) override;
  absl::StatusOr<int> GlobalRank() const override;
  void SetGlobalRank(int rank) override;
  absl::StatusOr<int> LocalRank() const override;
  absl::StatusOr<int> NodeRank() const override;

 private:
  const ProcessEnvironment environment_;
  mutable absl::Mutex mutex_;
  int world_size_ ABSL_GUARDED_BY(mutex_) = 1;
  int global_rank_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace kiln

#endif  // KILN_CONNECTOR_LIGHTNING_ENVIRONMENT_H_
