#include "connector/detect_cluster_environment.h"

#include "connector/lightning_environment.h"
#include "connector/lsf_environment.h"
#include "connector/mpi_environment.h"
#include "connector/slurm_environment.h"
#include "connector/torchelastic_environment.h"

namespace kiln {

std::shared_ptr<ClusterEnvironment> DetectClusterEnvironment(const ProcessEnvironment& environment) {
  if (TorchElasticEnvironment::Detect(environment)) return std::make_shared<TorchElasticEnvironment>(environment);
  if (SlurmEnvironment::Detect(environment)) return std::make_shared<SlurmEnvironment>(environment);
  if (LsfEnvironment::Detect(environment)) return std::make_shared<LsfEnvironment>(environment);
  if (MpiEnvironment::Detect(environment)) return std::make_shared<MpiEnvironment>(environment);
  return std::make_shared<LightningEnvironment>(environment);
}

}  // namespace kiln
