#include "connector/slurm_environment.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

constexpr int kPortWithoutJobId = 12910;
constexpr int kPortBase = 15000;

bool IsInteractiveJob(const ProcessEnvironment& environment) {
  const std::optional<std::string> job_name = environment.Get("SLURM_JOB_NAME");
  return job_name == "bash" || job_name == "interactive";
}

}  // namespace

bool SlurmEnvironment::Detect(const ProcessEnvironment& environment) {
  return environment.Has("SLURM_NTASKS") && !IsInteractiveJob(environment);
}

std::string SlurmEnvironment::RootNodeAddress(absl::string_view nodelist) {
  // Keep the characters of the first host; inside a bracket, keep only the first entry of the range or list.
  std::string host;
  bool in_bracket = false;
  bool bracket_entry_done = false;
  for (char c : absl::StripAsciiWhitespace(nodelist)) {
    if (in_bracket) {
      if (c == ']') {
        in_bracket = false;
      } else if (c == ',' || c == '-') {
        bracket_entry_done = true;
      } else if (!bracket_entry_done) {
        host += c;
      }
      continue;
    }
    if (c == ' ' || c == ',') break;
    if (c == '[') {
      in_bracket = true;
      bracket_entry_done = false;
      continue;
    }
    host += c;
  }
  return host;
}

absl::StatusOr<std::string> SlurmEnvironment::MainAddress() const {
  // As Lightning's SLURMEnvironment: a MASTER_ADDR the user set wins (an empty one counts as unset).
  if (const std::string address = environment_.Get("MASTER_ADDR").value_or(""); !address.empty()) return address;
  const std::string root = RootNodeAddress(environment_.Get("SLURM_NODELIST").value_or(""));
  return root.empty() ? "127.0.0.1" : root;
}

absl::StatusOr<std::optional<int>> SlurmEnvironment::MainPort() const {
  absl::StatusOr<std::optional<int>> override_port = environment_.GetPort("MASTER_PORT");
  if (!override_port.ok() || override_port->has_value()) return override_port;
  const std::optional<std::string> job_id = environment_.Get("SLURM_JOB_ID");
  if (!job_id.has_value()) return kPortWithoutJobId;
  // Every process of the job computes the same port from the job id, so they meet without talking first.
  const absl::string_view digits = absl::string_view(*job_id).substr(job_id->size() > 4 ? job_id->size() - 4 : 0);
  int last_digits = 0;
  if (!absl::SimpleAtoi(digits, &last_digits) || last_digits < 0) {
    return absl::InvalidArgumentError(absl::StrCat("environment variable SLURM_JOB_ID='", *job_id,
                                                   "' does not end in digits, so no port can be derived from it; "
                                                   "set MASTER_PORT"));
  }
  return kPortBase + last_digits;
}

absl::Status SlurmEnvironment::ValidateSettings(int num_devices, int num_nodes) const {
  absl::StatusOr<int> ntasks = environment_.GetNonNegativeIntOr("SLURM_NTASKS", 1);
  if (!ntasks.ok()) return ntasks.status();
  if (*ntasks > 1 && !environment_.Has("SLURM_NTASKS_PER_NODE")) {
    return absl::InvalidArgumentError(
        absl::StrCat("You set `--ntasks=", *ntasks,
                     "` in your SLURM bash script, but this variable is not supported. HINT: Use "
                     "`--ntasks-per-node=",
                     *ntasks, "` instead."));
  }
  if (IsInteractiveJob(environment_)) return absl::OkStatus();
  absl::StatusOr<std::optional<int>> per_node = environment_.GetNonNegativeInt("SLURM_NTASKS_PER_NODE");
  if (!per_node.ok()) return per_node.status();
  if (per_node->has_value() && **per_node != num_devices) {
    return absl::InvalidArgumentError(absl::StrCat("You set `devices=", num_devices,
                                                   "` in Kiln, but the number of tasks per node configured in SLURM "
                                                   "`--ntasks-per-node=",
                                                   **per_node, "` does not match. HINT: Set `devices=", **per_node,
                                                   "`."));
  }
  absl::StatusOr<std::optional<int>> nodes = environment_.GetNonNegativeInt("SLURM_NNODES");
  if (!nodes.ok()) return nodes.status();
  if (nodes->has_value() && **nodes != num_nodes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "You set `num_nodes=", num_nodes, "` in Kiln, but the number of nodes configured in SLURM `--nodes=", **nodes,
        "` does not match. HINT: Set `num_nodes=", **nodes, "`."));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> SlurmEnvironment::Required(absl::string_view name) const {
  absl::StatusOr<std::optional<int>> value = environment_.GetNonNegativeInt(name);
  if (!value.ok()) return value.status();
  if (value->has_value()) return **value;
  return absl::FailedPreconditionError(absl::StrCat(
      "SLURM_NTASKS is set, so this process looks started by srun, but ", name,
      " is not set; launch with srun, or name the job 'interactive' (srun --job-name=interactive) to launch the "
      "processes another way"));
}

}  // namespace kiln
