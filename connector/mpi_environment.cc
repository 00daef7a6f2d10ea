#include "connector/mpi_environment.h"

#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

constexpr char kOpenMpiWorldSize[] = "OMPI_COMM_WORLD_SIZE";
constexpr char kHydraWorldSize[] = "PMI_SIZE";
constexpr char kDefaultAddress[] = "127.0.0.1";
constexpr int kDefaultPort = 12910;

int WorldSizeOrZero(const ProcessEnvironment& environment, const char* name) {
  absl::StatusOr<std::optional<int>> size = environment.GetNonNegativeInt(name);
  return size.ok() ? size->value_or(0) : 0;
}

}  // namespace

MpiEnvironment::MpiEnvironment(ProcessEnvironment environment)
    : environment_(std::move(environment)),
      names_(environment_.Has(kOpenMpiWorldSize) || !environment_.Has(kHydraWorldSize)
                 ? Names{kOpenMpiWorldSize, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                         "OMPI_COMM_WORLD_LOCAL_SIZE"}
                 : Names{kHydraWorldSize, "PMI_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"}) {}

bool MpiEnvironment::Detect(const ProcessEnvironment& environment) {
  // A malformed size does not detect MPI here; an MpiEnvironment passed explicitly reports it.
  return WorldSizeOrZero(environment, kOpenMpiWorldSize) > 1 || WorldSizeOrZero(environment, kHydraWorldSize) > 1;
}

absl::StatusOr<std::string> MpiEnvironment::MainAddress() const {
  // An empty MASTER_ADDR names no host: it counts as unset (an empty address would reach the process group).
  const std::string address = environment_.Get("MASTER_ADDR").value_or("");
  return address.empty() ? kDefaultAddress : address;
}

absl::StatusOr<std::optional<int>> MpiEnvironment::MainPort() const {
  absl::StatusOr<std::optional<int>> port = environment_.GetPort("MASTER_PORT");
  if (!port.ok()) return port.status();
  return port->value_or(kDefaultPort);
}

absl::StatusOr<int> MpiEnvironment::NodeRank() const {
  absl::StatusOr<int> rank = GlobalRank();
  if (!rank.ok()) return rank.status();
  absl::StatusOr<int> local_size = Required(names_.local_size);
  if (!local_size.ok()) return local_size.status();
  if (*local_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", names_.local_size, "='0' is not a process count; run under mpirun"));
  }
  return *rank / *local_size;
}

absl::Status MpiEnvironment::ValidateSettings(int num_devices, int num_nodes) const {
  absl::StatusOr<int> world_size = WorldSize();
  if (!world_size.ok()) return world_size.status();
  if (absl::Status status = CheckWorldSizeMatches(*world_size, names_.world_size, num_devices, num_nodes);
      !status.ok()) {
    return status;
  }
  absl::StatusOr<int> local_size = Required(names_.local_size);
  if (!local_size.ok()) return local_size.status();
  if (*local_size != num_devices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "You set `devices=", num_devices, "` in Kiln, but MPI started ", *local_size, " process(es) on this node (",
        names_.local_size, "=", *local_size, "). HINT: Set `devices=", *local_size,
        "`, or start as many processes per node as devices (mpirun -npernode)."));
  }
  return absl::OkStatus();
}

std::vector<std::string> MpiEnvironment::Warnings() const {
  std::vector<std::string> warnings;
  if (environment_.Get("MASTER_ADDR").value_or("").empty()) {
    warnings.push_back(
        "MASTER_ADDR environment variable is not defined. Set as localhost (set MASTER_ADDR to the "
        "host of rank 0 when the job spans several nodes)");
  }
  if (!environment_.Has("MASTER_PORT")) {
    warnings.push_back(absl::StrCat("MASTER_PORT environment variable is not defined. Set as ", kDefaultPort));
  }
  return warnings;
}

absl::StatusOr<int> MpiEnvironment::Required(const char* name) const {
  absl::StatusOr<std::optional<int>> value = environment_.GetNonNegativeInt(name);
  if (!value.ok()) return value.status();
  if (value->has_value()) return **value;
  return absl::FailedPreconditionError(absl::StrCat("the MPI environment needs ", name,
                                                    ", which is not set; start "
                                                    "the processes with mpirun or mpiexec, which set it"));
}

}  // namespace kiln
