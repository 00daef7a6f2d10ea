// The cluster environment of processes started by IBM Spectrum LSF's job step manager (jsrun).
//
// Detected when LSB_JOBID, LSB_DJOB_RANKFILE, JSM_NAMESPACE_LOCAL_RANK and JSM_NAMESPACE_SIZE are all set, as in
// Lightning. Variables:
//   JSM_NAMESPACE_SIZE        the number of processes (the world size)
//   JSM_NAMESPACE_RANK        this process's global rank
//   JSM_NAMESPACE_LOCAL_RANK  its rank on this node
//   LSB_DJOB_RANKFILE         a file with one host per line (one line per process slot). Its first line is the
//                             launch node, which runs no process and is skipped. The main address is the next
//                             host; the node rank is this machine's host name's position among the distinct hosts
//                             that follow, in order of first appearance.
//   LSB_JOBID                 the main port is 10000 + LSB_JOBID % 1000
//   MASTER_PORT               overrides that port
// ValidateSettings: devices x num_nodes must equal JSM_NAMESPACE_SIZE.
//
// The rank file is read (through the ProcessEnvironment) on each call that needs it; it is never written.
//
// Thread-safety: immutable; safe to share.
#ifndef KILN_CONNECTOR_LSF_ENVIRONMENT_H_
#define KILN_CONNECTOR_LSF_ENVIRONMENT_H_

#include <string>
#include <utility>
#include <vector>

#include "connector/cluster_environment.h"
#include "connector/process_environment.h"

namespace kiln {

class LsfEnvironment final : public ClusterEnvironment {
 public:
  explicit LsfEnvironment(ProcessEnvironment environment = ProcessEnvironment::Current())
      : environment_(std::move(environment)) {}

  static bool Detect(const ProcessEnvironment& environment);

  std::string name() const override { return "lsf"; }
  bool CreatesProcessesExternally() const override { return true; }
  absl::StatusOr<std::string> MainAddress() const override;
  absl::StatusOr<std::optional<int>> MainPort() const override;
  absl::StatusOr<int> WorldSize() const override;
  absl::StatusOr<int> GlobalRank() const override;
  absl::StatusOr<int> LocalRank() const override;
  absl::StatusOr<int> NodeRank() const override;
  absl::Status ValidateSettings(int num_devices, int num_nodes) const override;

 private:
  // The compute hosts of the job: the rank file's lines without the launch node, blank lines dropped.
  absl::StatusOr<std::vector<std::string>> ReadHosts() const;
  absl::StatusOr<int> Required(absl::string_view name, absl::string_view what) const;

  const ProcessEnvironment environment_;
};

}  // namespace kiln

#endif  // KILN_CONNECTOR_LSF_ENVIRONMENT_H_
