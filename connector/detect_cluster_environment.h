// Which cluster environment launched this process.
//
// Kiln asks each environment's Detect in this order and takes the first that says yes:
//   1. torchelastic  (TORCHELASTIC_RUN_ID: torchrun)
//   2. slurm         (SLURM_NTASKS, unless the job is named "bash" or "interactive")
//   3. lsf           (LSB_JOBID, LSB_DJOB_RANKFILE, JSM_NAMESPACE_LOCAL_RANK, JSM_NAMESPACE_SIZE: jsrun)
//   4. mpi           (OMPI_COMM_WORLD_SIZE or PMI_SIZE above 1)
//   5. lightning     (always: Kiln's own, LOCAL_RANK / NODE_RANK / MASTER_ADDR / MASTER_PORT)
// Lightning asks SLURM before torchrun. Kiln asks torchrun first: torchrun run inside a SLURM allocation (one srun
// task per node, each starting torchrun) leaves both sets of variables, and only torchrun's describe the process
// that reads them.
//
// Thread-safety: a pure function of `environment`.
#ifndef KILN_CONNECTOR_DETECT_CLUSTER_ENVIRONMENT_H_
#define KILN_CONNECTOR_DETECT_CLUSTER_ENVIRONMENT_H_

#include <memory>

#include "connector/cluster_environment.h"
#include "connector/process_environment.h"

namespace kiln {

// Never null. The environment keeps a copy of `environment` and reads it later.
std::shared_ptr<ClusterEnvironment> DetectClusterEnvironment(const ProcessEnvironment& environment);

}  // namespace kiln

#endif  // KILN_CONNECTOR_DETECT_CLUSTER_ENVIRONMENT_H_
