#include "connector/plan.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "connector/json.h"

namespace kiln {

std::vector<LogicalDevice> Plan::logical_devices() const {
  std::vector<LogicalDevice> logical;
  const std::string name = accelerator ? accelerator->name() : "";
  for (size_t i = 0; i < devices.size(); ++i) {
    logical.push_back({.accelerator = name,
                       .index = i < device_indices.size() ? device_indices[i] : static_cast<int>(i),
                       .compute = devices[i]});
  }
  return logical;
}

std::string Plan::ToJson() const {
  std::vector<std::string> device_names;
  for (const c10::Device& device : devices) device_names.push_back(JsonString(device.str()));
  std::vector<std::string> logical_names;
  for (const LogicalDevice& device : logical_devices()) {
    logical_names.push_back(JsonString(absl::StrCat(device.accelerator, ":", device.index)));
  }
  // One key per line, as the keys are documented.
  // clang-format off
  return absl::StrCat(
      "{\"accelerator\": ", JsonString(accelerator ? accelerator->name() : ""),
      ", \"devices\": [", absl::StrJoin(device_names, ", "), "]",
      ", \"logical_devices\": [", absl::StrJoin(logical_names, ", "), "]",
      ", \"num_devices\": ", num_devices(),
      ", \"strategy\": ", JsonString(strategy),
      ", \"process_group_backend\": ", process_group_backend ? JsonString(*process_group_backend) : "null",
      ", \"precision\": ", JsonString(PrecisionName(precision)),
      ", \"num_nodes\": ", num_nodes,
      ", \"world_size\": ", world_size,
      ", \"global_rank\": ", global_rank,
      ", \"local_rank\": ", local_rank,
      ", \"node_rank\": ", node_rank,
      ", \"cluster_environment\": ", JsonString(cluster_environment),
      ", \"creates_processes_externally\": ", creates_processes_externally ? "true" : "false",
      ", \"main_address\": ", JsonString(main_address),
      ", \"main_port\": ", main_port ? absl::StrCat(*main_port) : "null",
      ", \"launcher_store_prefix\": ", launcher_store_prefix ? JsonString(*launcher_store_prefix) : "null", "}");
  // clang-format on
}

}  // namespace kiln
