#include "connector/cluster_environment.h"

#include "absl/strings/str_cat.h"

namespace kiln {

absl::Status CheckWorldSizeMatches(int world_size, absl::string_view source, int num_devices, int num_nodes) {
  if (static_cast<long long>(num_devices) * num_nodes == world_size) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("You set `devices=", num_devices, "` and `num_nodes=", num_nodes, "` in Kiln, but the product (",
                   num_devices, " * ", num_nodes, ") does not match the world size (", world_size, ", from ", source,
                   "). Set devices to the processes per node and num_nodes to the nodes your launcher started."));
}

}  // namespace kiln
