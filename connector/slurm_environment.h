// The cluster environment of processes started by SLURM's srun.
//
// Detected when SLURM_NTASKS is set, unless the job is named "bash" or "interactive" (SLURM_JOB_NAME): as in
// Lightning, a user who asked SLURM for resources and launches processes some other way names the job so, and
// another environment is detected instead. Variables:
//   SLURM_NTASKS           the number of processes (the world size)
//   SLURM_PROCID           this process's global rank
//   SLURM_LOCALID          its rank on this node
//   SLURM_NODEID           this node's rank
//   SLURM_NTASKS_PER_NODE  processes per node; required when SLURM_NTASKS > 1, and must equal `devices`
//   SLURM_NNODES           nodes in the job; must equal `num_nodes` when set
//   SLURM_NODELIST         the job's hosts ("node[3-5],gpu7"); the first is the main address (default 127.0.0.1)
//   MASTER_ADDR            overrides that address
//   SLURM_JOB_ID           the main port is 15000 + its last four digits (12910 without a job id)
//   MASTER_PORT            overrides that port
// ValidateSettings gives Lightning's messages for `--ntasks` without `--ntasks-per-node`, and for devices or
// num_nodes that disagree with the job.
//
// Thread-safety: immutable; safe to share.
#ifndef KILN_CONNECTOR_SLURM_ENVIRONMENT_H_
#define KILN_CONNECTOR_SLURM_ENVIRONMENT_H_

#include <utility>

#include "connector/cluster_environment.h"
#include "connector/process_environment.h"

namespace kiln {

class SlurmEnvironment final : public ClusterEnvironment {
 public:
  explicit SlurmEnvironment(ProcessEnvironment environment = ProcessEnvironment::Current())
      : environment_(std::move(environment)) {}

  static bool Detect(const ProcessEnvironment& environment);

  // The first host of a SLURM node list: "host0 host1" and "host0,host1" give host0, "host[5-9]" and "host[5,7]"
  // give host5 (ranges keep their digits as written: "n[007-9]" gives n007).
  static std::string RootNodeAddress(absl::string_view nodelist);

  std::string name() const override { return "slurm"; }
  bool CreatesProcessesExternally() const override { return true; }
  absl::StatusOr<std::string> MainAddress() const override;
  absl::StatusOr<std::optional<int>> MainPort() const override;
  absl::StatusOr<int> WorldSize() const override { return Required("SLURM_NTASKS"); }
  absl::StatusOr<int> GlobalRank() const override { return Required("SLURM_PROCID"); }
  absl::StatusOr<int> LocalRank() const override { return Required("SLURM_LOCALID"); }
  absl::StatusOr<int> NodeRank() const override { return Required("SLURM_NODEID"); }
  absl::Status ValidateSettings(int num_devices, int num_nodes) const override;

 private:
  absl::StatusOr<int> Required(absl::string_view name) const;

  const ProcessEnvironment environment_;
};

}  // namespace kiln

#endif  // KILN_CONNECTOR_SLURM_ENVIRONMENT_H_
