// The connector's answer: a resolved plan that the trainer (and `//tools:resolve`) act on.
//
// Thread-safety: a value type. The instances it points to are shared with whoever passed them in.
#ifndef KILN_CONNECTOR_PLAN_H_
#define KILN_CONNECTOR_PLAN_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "connector/cluster_environment.h"
#include "connector/strategy_descriptor.h"
#include "hal/accelerator.h"
#include "hal/precision.h"
#include "nlohmann/json_fwd.hpp"

namespace kiln {

struct Plan {
  std::shared_ptr<Accelerator> accelerator;
  std::vector<int> device_indices;   // What the accelerator parsed from `devices`.
  std::vector<c10::Device> devices;  // What each local process computes on (Accelerator::ParallelDevices).
  std::string strategy;              // The strategy's name: "single_device", "ddp", or a registered/instance name.
  // The user's strategy instance, untouched; null when the strategy was named or chosen by "auto".
  std::shared_ptr<StrategyDescriptor> strategy_instance;
  std::optional<std::string> process_group_backend;  // Set exactly when the strategy is distributed.
  Precision precision = Precision::k32True;
  int num_nodes = 1;
  int world_size = 1;
  int global_rank = 0;
  int local_rank = 0;
  int node_rank = 0;
  std::string cluster_environment;  // The environment's name: "lightning", "torchelastic", "slurm", ...
  // The environment the ranks came from: the user's instance, or the detected one.
  std::shared_ptr<ClusterEnvironment> cluster_environment_instance;
  bool creates_processes_externally = false;  // A launcher started the processes; Kiln must start none.
  std::string main_address;                   // Where every process meets the main one.
  std::optional<int> main_port;               // Unset: whoever starts the processes picks a free port.
  // Set when the launcher serves the store at main_address:main_port: every rank joins it under this prefix
  // (ClusterEnvironment::LauncherStorePrefix).
  std::optional<std::string> launcher_store_prefix;
  std::vector<std::string> warnings;  // Shown to the user once, in order.
  std::vector<std::string> notes;     // Informational lines (why "auto" skipped an accelerator), in order.

  int num_devices() const { return static_cast<int>(devices.size()); }
  // This process's c10 device: where its tensors live.
  c10::Device root_device() const { return devices.at(local_rank); }
  // The devices as their accelerator numbers them, one per local process: the parsed index with its c10 device.
  std::vector<LogicalDevice> logical_devices() const;
  // This process's device, as its accelerator numbers it: what the backend is asked to set up and report on.
  LogicalDevice root_logical_device() const { return logical_devices().at(local_rank); }
  // One JSON object with the keys documented for `//tools:resolve`, as JsonLine (connector/json.h) writes it.
  std::string ToJson() const;
  // The same object as a value, to be put in a larger document (fit's --summary_json).
  nlohmann::ordered_json ToJsonValue() const;
};

}  // namespace kiln

#endif  // KILN_CONNECTOR_PLAN_H_
