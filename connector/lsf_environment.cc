#include "connector/lsf_environment.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace kiln {
namespace {

constexpr char kRankFile[] = "LSB_DJOB_RANKFILE";
constexpr int kPortBase = 10000;

}  // namespace

bool LsfEnvironment::Detect(const ProcessEnvironment& environment) {
  for (const char* name : {"LSB_JOBID", kRankFile, "JSM_NAMESPACE_LOCAL_RANK", "JSM_NAMESPACE_SIZE"}) {
    if (!environment.Has(name)) return false;
  }
  return true;
}

absl::StatusOr<std::vector<std::string>> LsfEnvironment::ReadHosts() const {
  const std::optional<std::string> path = environment_.Get(kRankFile);
  if (!path.has_value())
    return absl::FailedPreconditionError("Did not find the environment variable `LSB_DJOB_RANKFILE`");
  if (path->empty()) return absl::FailedPreconditionError("The environment variable `LSB_DJOB_RANKFILE` is empty");
  absl::StatusOr<std::string> content = environment_.ReadFile(*path);
  if (!content.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("LSB_DJOB_RANKFILE='", *path, "' cannot be read: ", content.status().message()));
  }
  std::vector<std::string> hosts;
  for (absl::string_view line : absl::StrSplit(*content, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty()) hosts.emplace_back(line);
  }
  if (hosts.size() < 2) {
    return absl::FailedPreconditionError(
        absl::StrCat("the LSF rank file LSB_DJOB_RANKFILE='", *path, "' lists ", hosts.size(),
                     " host(s); it needs the launch node followed by at least one compute host. Run under jsrun"));
  }
  hosts.erase(hosts.begin());
  return hosts;
}

absl::StatusOr<std::string> LsfEnvironment::MainAddress() const {
  absl::StatusOr<std::vector<std::string>> hosts = ReadHosts();
  if (!hosts.ok()) return hosts.status();
  return hosts->front();
}

absl::StatusOr<std::optional<int>> LsfEnvironment::MainPort() const {
  absl::StatusOr<std::optional<int>> override_port = environment_.GetPort("MASTER_PORT");
  if (!override_port.ok() || override_port->has_value()) return override_port;
  absl::StatusOr<std::optional<int>> job_id = environment_.GetNonNegativeInt("LSB_JOBID");
  if (!job_id.ok()) return job_id.status();
  if (!job_id->has_value()) {
    return absl::FailedPreconditionError("Could not find job id in environment variable LSB_JOBID");
  }
  // Every process computes the same port from the job id.
  return kPortBase + **job_id % 1000;
}

absl::StatusOr<int> LsfEnvironment::WorldSize() const {
  return Required("JSM_NAMESPACE_SIZE", "Cannot determine world size.");
}

absl::StatusOr<int> LsfEnvironment::GlobalRank() const {
  return Required("JSM_NAMESPACE_RANK", "Cannot determine global rank.");
}

absl::StatusOr<int> LsfEnvironment::LocalRank() const {
  return Required("JSM_NAMESPACE_LOCAL_RANK", "Cannot determine local rank.");
}

absl::StatusOr<int> LsfEnvironment::NodeRank() const {
  absl::StatusOr<std::vector<std::string>> hosts = ReadHosts();
  if (!hosts.ok()) return hosts.status();
  absl::StatusOr<std::string> hostname = environment_.Hostname();
  if (!hostname.ok()) return hostname.status();
  std::vector<std::string> distinct;
  for (const std::string& host : *hosts) {
    if (std::find(distinct.begin(), distinct.end(), host) == distinct.end()) distinct.push_back(host);
  }
  auto found = std::find(distinct.begin(), distinct.end(), *hostname);
  if (found == distinct.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("this machine's host name '", *hostname, "' is not among the compute hosts of LSB_DJOB_RANKFILE='",
                     environment_.Get(kRankFile).value_or(""), "' (", absl::StrJoin(distinct, ", "),
                     "); run under jsrun on the job's own hosts"));
  }
  return static_cast<int>(found - distinct.begin());
}

absl::Status LsfEnvironment::ValidateSettings(int num_devices, int num_nodes) const {
  absl::StatusOr<int> world_size = WorldSize();
  if (!world_size.ok()) return world_size.status();
  return CheckWorldSizeMatches(*world_size, "JSM_NAMESPACE_SIZE", num_devices, num_nodes);
}

absl::StatusOr<int> LsfEnvironment::Required(absl::string_view name, absl::string_view what) const {
  absl::StatusOr<std::optional<int>> value = environment_.GetNonNegativeInt(name);
  if (!value.ok()) return value.status();
  if (value->has_value()) return **value;
  return absl::FailedPreconditionError(absl::StrCat(what, " Environment variable `", name,
                                                    "` not found. Make sure you run your executable with `jsrun`."));
}

}  // namespace kiln
