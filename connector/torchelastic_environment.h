// The cluster environment of processes started by torchrun (torch.distributed.run, formerly torchelastic).
//
// Detected when TORCHELASTIC_RUN_ID is set, as `torch.distributed.is_torchelastic_launched()` does. Variables:
//   WORLD_SIZE   the number of processes (required)
//   RANK         this process's global rank (required)
//   LOCAL_RANK   its rank on this node (required)
//   GROUP_RANK   this node's rank (default 0)
//   MASTER_ADDR  the main process's host (default 127.0.0.1, with Lightning's warning)
//   MASTER_PORT  its port (default 12910, with Lightning's warning)
//   TORCHELASTIC_USE_AGENT_STORE  "True" when torchrun's agent serves the store on MASTER_PORT (its default, static
//                rendezvous); every rank then joins it as a client under "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>",
//                as torch.distributed's env:// rendezvous does
// ValidateSettings: devices x num_nodes must equal WORLD_SIZE (Lightning's check and message).
//
// Thread-safety: immutable; safe to share.
#ifndef KILN_CONNECTOR_TORCHELASTIC_ENVIRONMENT_H_
#define KILN_CONNECTOR_TORCHELASTIC_ENVIRONMENT_H_

#include <utility>

#include "connector/cluster_environment.h"
#include "connector/process_environment.h"

namespace kiln {

class TorchElasticEnvironment final : public ClusterEnvironment {
 public:
  explicit TorchElasticEnvironment(ProcessEnvironment environment = ProcessEnvironment::Current())
      : environment_(std::move(environment)) {}

  static bool Detect(const ProcessEnvironment& environment) { return environment.Has("TORCHELASTIC_RUN_ID"); }

  std::string name() const override { return "torchelastic"; }
  bool CreatesProcessesExternally() const override { return true; }
  absl::StatusOr<std::string> MainAddress() const override;
  absl::StatusOr<std::optional<int>> MainPort() const override;
  absl::StatusOr<std::optional<std::string>> LauncherStorePrefix() const override;
  absl::StatusOr<int> WorldSize() const override { return Required("WORLD_SIZE"); }
  absl::StatusOr<int> GlobalRank() const override { return Required("RANK"); }
  absl::StatusOr<int> LocalRank() const override { return Required("LOCAL_RANK"); }
  absl::StatusOr<int> NodeRank() const override { return environment_.GetNonNegativeIntOr("GROUP_RANK", 0); }
  absl::Status ValidateSettings(int num_devices, int num_nodes) const override;
  std::vector<std::string> Warnings() const override;

 private:
  absl::StatusOr<int> Required(absl::string_view name) const;

  const ProcessEnvironment environment_;
};

}  // namespace kiln

#endif  // KILN_CONNECTOR_TORCHELASTIC_ENVIRONMENT_H_
