// The connector's answer: a resolved plan that the trainer (and `//tools:resolve`) act on.
#ifndef KILN_CONNECTOR_PLAN_H_
#define KILN_CONNECTOR_PLAN_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hal/accelerator.h"
#include "hal/precision.h"

namespace kiln {

struct Plan {
  std::shared_ptr<Accelerator> accelerator;
  std::vector<int> device_indices;     // What the accelerator parsed from `devices`.
  std::vector<c10::Device> devices;    // One per local process (Accelerator::ParallelDevices).
  std::string strategy;                // "single_device" or "ddp".
  std::optional<std::string> process_group_backend;  // Unset for the single-device strategy.
  Precision precision = Precision::k32True;
  int num_nodes = 1;
  int world_size = 1;
  int global_rank = 0;
  int local_rank = 0;
  int node_rank = 0;
  std::string cluster_environment;     // "lightning", ...
  std::vector<std::string> warnings;   // Shown to the user once, in order.

  int num_devices() const { return static_cast<int>(devices.size()); }
  // This process's device.
  c10::Device root_device() const { return devices.at(local_rank); }
  // One JSON object with the keys documented for `//tools:resolve`.
  std::string ToJson() const;
};

}  // namespace kiln

#endif  // KILN_CONNECTOR_PLAN_H_
