#include "hal/collectives.h"

#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "hal/compat/c10d.h"
#include "hal/compat/error_message.h"
#include "hal/shared_memory_collectives.h"
#include "torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"

namespace kiln {

std::string CollectiveSupport::Lacking() const {
  std::vector<std::string> lacking;
  if (!allgather) lacking.push_back("allgather, _allgather_base");
  if (!reduce_scatter) lacking.push_back("_reduce_scatter_base");
  return absl::StrJoin(lacking, ", ");
}

absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> MakeGlooCollectiveBackend(const CollectiveOptions& options) {
  if (options.host_endpoints.empty()) {
    return absl::InvalidArgumentError("a Gloo backend needs at least one host endpoint (CollectiveOptions)");
  }
  auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
  for (const HostEndpoint& endpoint : options.host_endpoints) {
    try {
      gloo_options->devices.push_back(endpoint.is_interface
                                          ? c10d::ProcessGroupGloo::createDeviceForInterface(endpoint.name)
                                          : c10d::ProcessGroupGloo::createDeviceForHostname(endpoint.name));
    } catch (const std::exception& e) {
      return absl::FailedPreconditionError(absl::StrCat(
          endpoint.is_interface ? "GLOO_SOCKET_IFNAME names the interface '" : "cannot use the address '",
          endpoint.name, "', which Gloo cannot use (", compat::ExceptionMessage(e),
          "); pass an interface of this host (`ip -brief address` lists them)"));
    }
  }
  c10::intrusive_ptr<c10d::Backend> gloo;
  try {
    gloo = compat::MakeGlooBackend(options.store, options.rank, options.world_size, gloo_options, options.timeout);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("gloo: the ranks did not connect: ", compat::ExceptionMessage(e)));
  }
  // Ranks on one host exchange CPU tensors through shared memory (hal/shared_memory_collectives.h).
  try {
    std::string why_not;
    c10::intrusive_ptr<c10d::Backend> backend = SharedMemoryCollectives::Wrap(options, std::move(gloo), &why_not);
    if (why_not.empty()) {
      LOG(INFO) << "gloo: rank " << options.rank << " of " << options.world_size
                << " exchanges CPU tensors through shared memory (all ranks are on this host)";
    } else {
      LOG(INFO) << "gloo: rank " << options.rank << " of " << options.world_size
                << " exchanges CPU tensors over Gloo's connections (" << why_not << ")";
    }
    return backend;
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("gloo: the ranks did not agree on shared memory: ", compat::ExceptionMessage(e)));
  }
}

}  // namespace kiln
