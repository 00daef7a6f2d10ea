// The cluster environment of processes started by an MPI launcher (mpirun, mpiexec).
//
// Lightning asks mpi4py; Kiln reads the variables the launchers set, so it needs no MPI library:
//   Open MPI:                  OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_LOCAL_RANK,
//                              OMPI_COMM_WORLD_LOCAL_SIZE
//   MPICH / Intel MPI (Hydra): PMI_SIZE, PMI_RANK, MPI_LOCALRANKID, MPI_LOCALNRANKS
// Open MPI's variables win when both families are set. Detected, as in Lightning, when the world size is above 1.
// The node rank is global rank / processes per node (the local size): launchers fill each node before the next by
// default; a launcher that places ranks round-robin must be given a ClusterEnvironment of the user's own.
//   MASTER_ADDR  the main process's host (default 127.0.0.1, with a warning: set it for more than one node)
//   MASTER_PORT  its port (default 12910, with a warning)
// ValidateSettings: devices x num_nodes must equal the world size, and devices the local size.
//
// Thread-safety: immutable; safe to share.
#ifndef KILN_CONNECTOR_MPI_ENVIRONMENT_H_
#define KILN_CONNECTOR_MPI_ENVIRONMENT_H_

#include <utility>

#include "connector/cluster_environment.h"
#include "connector/process_environment.h"

namespace kiln {

class MpiEnvironment final : public ClusterEnvironment {
 public:
  explicit MpiEnvironment(ProcessEnvironment environment = ProcessEnvironment::Current());

  static bool Detect(const ProcessEnvironment& environment);

  std::string name() const override { return "mpi"; }
  bool CreatesProcessesExternally() const override { return true; }
  absl::StatusOr<std::string> MainAddress() const override;
  absl::StatusOr<std::optional<int>> MainPort() const override;
  absl::StatusOr<int> WorldSize() const override { return Required(names_.world_size); }
  absl::StatusOr<int> GlobalRank() const override { return Required(names_.rank); }
  absl::StatusOr<int> LocalRank() const override { return Required(names_.local_rank); }
  absl::StatusOr<int> NodeRank() const override;
  absl::Status ValidateSettings(int num_devices, int num_nodes) const override;
  std::vector<std::string> Warnings() const override;

 private:
  // The variable names of one launcher family.
  struct Names {
    const char* world_size;
    const char* rank;
    const char* local_rank;
    const char* local_size;
  };
  absl::StatusOr<int> Required(const char* name) const;

  const ProcessEnvironment environment_;
  const Names names_;
};

}  // namespace kiln

#endif  // KILN_CONNECTOR_MPI_ENVIRONMENT_H_
