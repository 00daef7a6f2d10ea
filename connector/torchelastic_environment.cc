#include "connector/torchelastic_environment.h"

#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

constexpr char kDefaultAddress[] = "127.0.0.1";
constexpr int kDefaultPort = 12910;

}  // namespace

absl::StatusOr<std::string> TorchElasticEnvironment::MainAddress() const {
  // An empty MASTER_ADDR names no host: it counts as unset (an empty address would reach the process group).
  const std::string address = environment_.Get("MASTER_ADDR").value_or("");
  return address.empty() ? kDefaultAddress : address;
}

absl::StatusOr<std::optional<int>> TorchElasticEnvironment::MainPort() const {
  absl::StatusOr<std::optional<int>> port = environment_.GetPort("MASTER_PORT");
  if (!port.ok()) return port.status();
  return port->value_or(kDefaultPort);
}

absl::StatusOr<std::optional<std::string>> TorchElasticEnvironment::LauncherStorePrefix() const {
  // torch.distributed compares the text with "True" exactly; so does Kiln.
  if (environment_.Get("TORCHELASTIC_USE_AGENT_STORE").value_or("") != "True") return std::nullopt;
  absl::StatusOr<int> attempt = Required("TORCHELASTIC_RESTART_COUNT");
  if (!attempt.ok()) return attempt.status();
  return std::optional<std::string>(absl::StrCat("/worker/attempt_", *attempt));
}

absl::Status TorchElasticEnvironment::ValidateSettings(int num_devices, int num_nodes) const {
  absl::StatusOr<int> world_size = WorldSize();
  if (!world_size.ok()) return world_size.status();
  return CheckWorldSizeMatches(*world_size, "WORLD_SIZE", num_devices, num_nodes);
}

std::vector<std::string> TorchElasticEnvironment::Warnings() const {
  std::vector<std::string> warnings;
  if (environment_.Get("MASTER_ADDR").value_or("").empty()) {
    warnings.push_back("MASTER_ADDR environment variable is not defined. Set as localhost");
  }
  if (!environment_.Has("MASTER_PORT")) {
    warnings.push_back(absl::StrCat("MASTER_PORT environment variable is not defined. Set as ", kDefaultPort));
  }
  return warnings;
}

absl::StatusOr<int> TorchElasticEnvironment::Required(absl::string_view name) const {
  absl::StatusOr<std::optional<int>> value = environment_.GetNonNegativeInt(name);
  if (!value.ok()) return value.status();
  if (value->has_value()) return **value;
  return absl::FailedPreconditionError(
      absl::StrCat("TORCHELASTIC_RUN_ID='", environment_.Get("TORCHELASTIC_RUN_ID").value_or(""),
                   "' says torchrun started this process, but ", name,
                   " is not set; launch with torchrun, which sets it, or unset TORCHELASTIC_RUN_ID"));
}

}  // namespace kiln
