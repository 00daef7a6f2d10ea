#include "connector/plan.h"

#include "absl/strings/str_cat.h"
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

nlohmann::ordered_json Plan::ToJsonValue() const {
  nlohmann::ordered_json device_names = nlohmann::ordered_json::array();
  for (const c10::Device& device : devices) device_names.push_back(device.str());
  nlohmann::ordered_json logical_names = nlohmann::ordered_json::array();
  for (const LogicalDevice& device : logical_devices()) {
    logical_names.push_back(absl::StrCat(device.accelerator, ":", device.index));
  }
  // In the documented order; absent optionals are null.
  nlohmann::ordered_json json;
  json["accelerator"] = accelerator ? accelerator->name() : "";
  json["devices"] = std::move(device_names);
  json["logical_devices"] = std::move(logical_names);
  json["num_devices"] = num_devices();
  json["strategy"] = strategy;
  json["process_group_backend"] = process_group_backend ? nlohmann::ordered_json(*process_group_backend) : nullptr;
  json["precision"] = std::string(PrecisionName(precision));
  json["num_nodes"] = num_nodes;
  json["world_size"] = world_size;
  json["global_rank"] = global_rank;
  json["local_rank"] = local_rank;
  json["node_rank"] = node_rank;
  json["cluster_environment"] = cluster_environment;
  json["creates_processes_externally"] = creates_processes_externally;
  json["main_address"] = main_address;
  json["main_port"] = main_port ? nlohmann::ordered_json(*main_port) : nullptr;
  json["launcher_store_prefix"] = launcher_store_prefix ? nlohmann::ordered_json(*launcher_store_prefix) : nullptr;
  return json;
}

std::string Plan::ToJson() const { return JsonLine(ToJsonValue()); }

}  // namespace kiln
