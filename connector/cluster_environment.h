// The cluster environment contract: who launched this process, and where it sits in the job.
//
// A cluster environment answers, from what the launcher left in the process environment, the questions Lightning's
// `ClusterEnvironment` answers: whether the processes were created outside Kiln, the address and port of the main
// process, the world size, and this process's global, local and node ranks. It also checks that the user's
// `devices` and `num_nodes` agree with the job (ValidateSettings).
//
// Implementations, one file each: LightningEnvironment ("lightning", Kiln's own and the fallback),
// TorchElasticEnvironment ("torchelastic"), SlurmEnvironment ("slurm"), LsfEnvironment ("lsf") and MpiEnvironment
// ("mpi"). DetectClusterEnvironment (detect_cluster_environment.h) picks one. Users may pass their own instance in
// ConnectorOptions::cluster_environment.
//
// Contract for implementers:
//  - Every method reads through the ProcessEnvironment the instance was built with, never getenv directly, and
//    writes nothing (no setenv: Lightning's SLURM and LSF environments set MASTER_ADDR/MASTER_PORT; Kiln's do not).
//  - Methods report bad or missing variables as an error Status naming the variable, its value and the fix. None
//    may throw.
//  - The const methods may be called from several threads at once. SetWorldSize/SetGlobalRank are called by the
//    connector while it resolves a plan.
#ifndef KILN_CONNECTOR_CLUSTER_ENVIRONMENT_H_
#define KILN_CONNECTOR_CLUSTER_ENVIRONMENT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln {

class ClusterEnvironment {
 public:
  virtual ~ClusterEnvironment() = default;

  // The name the plan reports: "lightning", "torchelastic", "slurm", "lsf", "mpi", or a user environment's own.
  // Never empty.
  virtual std::string name() const = 0;

  // True when a launcher (srun, torchrun, jsrun, mpirun, or the user) starts one process per device, so Kiln must
  // not start any itself.
  virtual bool CreatesProcessesExternally() const = 0;

  // The host through which every process connects to the main one.
  virtual absl::StatusOr<std::string> MainAddress() const = 0;

  // The port of the main process; nullopt when the environment does not give one. When Kiln starts the processes,
  // its launcher then picks a free port. When they were started externally (Kiln's own environment with LOCAL_RANK
  // set but no MASTER_PORT, for example), a run that needs the port fails when it joins the process group, with an
  // error naming MASTER_PORT; a single-process run never needs it.
  virtual absl::StatusOr<std::optional<int>> MainPort() const = 0;

  // Set when the launcher itself serves the rendezvous store at MainAddress:MainPort (torchrun's agent, which sets
  // TORCHELASTIC_USE_AGENT_STORE=True): the prefix under which this attempt's processes share it. Every rank, rank 0
  // included, then joins that store as a client instead of serving one. Unset (the default): rank 0 serves it.
  virtual absl::StatusOr<std::optional<std::string>> LauncherStorePrefix() const { return std::nullopt; }

  // The number of processes across all devices and nodes.
  virtual absl::StatusOr<int> WorldSize() const = 0;
  // Lightning's `set_world_size`: the connector proposes devices x num_nodes. Environments whose scheduler decides
  // the world size ignore it (the default).
  virtual void SetWorldSize(int size) { (void)size; }

  // This process's rank across all nodes and devices.
  virtual absl::StatusOr<int> GlobalRank() const = 0;
  // Lightning's `set_global_rank`: the connector proposes node_rank x devices + local_rank. Environments whose
  // scheduler assigns ranks ignore it (the default).
  virtual void SetGlobalRank(int rank) { (void)rank; }

  // This process's rank on its node, and its node's rank.
  virtual absl::StatusOr<int> LocalRank() const = 0;
  virtual absl::StatusOr<int> NodeRank() const = 0;

  // Checks the user's `devices` (processes per node) and `num_nodes` against the job; InvalidArgument or
  // FailedPrecondition, in Lightning's words where it has them, when they disagree. The default accepts anything.
  virtual absl::Status ValidateSettings(int num_devices, int num_nodes) const {
    (void)num_devices;
    (void)num_nodes;
    return absl::OkStatus();
  }

  // What the user should know about how this environment filled a gap (a default taken for a missing variable),
  // in Lightning's words. The connector adds these to Plan::warnings. The default has none.
  virtual std::vector<std::string> Warnings() const { return {}; }
};

// Lightning's world-size check (TorchElasticEnvironment.validate_settings), shared by the environments whose
// scheduler fixes the world size: InvalidArgument unless num_devices * num_nodes == world_size. `source` names
// where the world size came from (e.g. "WORLD_SIZE") and is added to the message.
absl::Status CheckWorldSizeMatches(int world_size, absl::string_view source, int num_devices, int num_nodes);

}  // namespace kiln

#endif  // KILN_CONNECTOR_CLUSTER_ENVIRONMENT_H_
