#include "connector/connector.h"

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "connector/lightning_environment.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/testing/fake_accelerator.h"

namespace kiln {
namespace {

using ::kiln::testing::FakeAccelerator;
using ::kiln::testing::FakeAcceleratorOptions;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

using Variables = std::map<std::string, std::string>;

// A third-party accelerator as a plugin would write one: its devices are its own (PrivateUse1), not the host's,
// it prefers its own collective backend, and it counts how often it is probed.
struct ThirdPartyOptions {
  std::string name = "npu";
  int device_count = 4;
  std::string unavailable_reason;
  bool throw_when_probed = false;
  std::string process_group_backend = "hccl";
  std::vector<Precision> precisions = {Precision::k32True, Precision::k16Mixed, Precision::kBf16Mixed,
                                       Precision::k16True};
};

class ThirdPartyAccelerator final : public Accelerator {
 public:
  explicit ThirdPartyAccelerator(ThirdPartyOptions options) : options_(std::move(options)) {}

  std::string name() const override { return options_.name; }
  absl::StatusOr<std::vector<int>> ParseDevices(const Devices& devices) const override {
    return ParseDeviceIndices(devices, options_.device_count, options_.name);
  }
  int AutoDeviceCount() const override {
    ++probes_;
    if (options_.throw_when_probed) throw std::runtime_error("driver crashed");
    return options_.device_count;
  }
  absl::Status CheckAvailable() const override {
    ++probes_;
    if (options_.throw_when_probed) throw std::runtime_error("driver crashed");
    if (options_.unavailable_reason.empty()) return absl::OkStatus();
    return absl::FailedPreconditionError(options_.unavailable_reason);
  }
  std::vector<c10::Device> ParallelDevices(const std::vector<int>& indices) const override {
    std::vector<c10::Device> devices;
    for (int index : indices) devices.emplace_back(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(index));
    return devices;
  }
  absl::Status SetupDevice(const LogicalDevice&) override { return absl::OkStatus(); }
  absl::Status TeardownDevice(const LogicalDevice&) override { return absl::OkStatus(); }
  absl::StatusOr<DeviceStats> GetDeviceStats(const LogicalDevice&) const override { return DeviceStats{}; }
  std::string ProcessGroupBackend() const override { return options_.process_group_backend; }
  std::vector<Precision> SupportedPrecisions() const override { return options_.precisions; }

  int probes() const { return probes_; }

 private:
  const ThirdPartyOptions options_;
  mutable std::atomic<int> probes_{0};
};

// A strategy instance as a trainer-side strategy would describe itself.
class TestStrategy final : public StrategyDescriptor {
 public:
  TestStrategy(std::string name, bool distributed, std::optional<std::string> backend = std::nullopt)
      : name_(std::move(name)), distributed_(distributed), backend_(std::move(backend)) {}
  std::string name() const override { return name_; }
  bool IsDistributed() const override { return distributed_; }
  std::optional<std::string> ProcessGroupBackend() const override { return backend_; }

 private:
  std::string name_;
  bool distributed_;
  std::optional<std::string> backend_;
};

// A user's own cluster environment: fixed ranks.
class FixedClusterEnvironment final : public ClusterEnvironment {
 public:
  FixedClusterEnvironment(int world_size, int global_rank, int local_rank, int node_rank)
      : world_size_(world_size), global_rank_(global_rank), local_rank_(local_rank), node_rank_(node_rank) {}
  std::string name() const override { return "my_cluster"; }
  bool CreatesProcessesExternally() const override { return true; }
  absl::StatusOr<std::string> MainAddress() const override { return "head.example"; }
  absl::StatusOr<std::optional<int>> MainPort() const override { return 4242; }
  absl::StatusOr<int> WorldSize() const override { return world_size_; }
  absl::StatusOr<int> GlobalRank() const override { return global_rank_; }
  absl::StatusOr<int> LocalRank() const override { return local_rank_; }
  absl::StatusOr<int> NodeRank() const override { return node_rank_; }

 private:
  int world_size_, global_rank_, local_rank_, node_rank_;
};

constexpr char kHostSubstituteWarning[] = "host: fp16 autocast runs as bf16-mixed here";

FakeAcceleratorOptions HostOptions() {
  FakeAcceleratorOptions options;
  options.name = "host";
  options.device_count = 1;
  options.process_group_backend = "host_collective";
  options.precisions = {Precision::k32True, Precision::k64True, Precision::kBf16Mixed, Precision::kBf16True};
  options.substitute = PrecisionSubstitute{Precision::kBf16Mixed, kHostSubstituteWarning};
  return options;
}

class ConnectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Register("host", 0, {}, [] { return std::make_shared<FakeAccelerator>(HostOptions()); });
    Register("npu", 5, {"virtual_npu"}, [] { return std::make_shared<ThirdPartyAccelerator>(ThirdPartyOptions{}); });
    Register("absent", 50, {}, [] {
      return std::make_shared<ThirdPartyAccelerator>(
          ThirdPartyOptions{.name = "absent", .device_count = 8, .unavailable_reason = "no absent device here"});
    });
    Register("broken", 40, {}, [] {
      return std::make_shared<ThirdPartyAccelerator>(ThirdPartyOptions{.name = "broken", .throw_when_probed = true});
    });
    Register("empty", 30, {}, [] {
      return std::make_shared<ThirdPartyAccelerator>(ThirdPartyOptions{.name = "empty", .device_count = 0});
    });
    ASSERT_TRUE(strategies_.Register({"ddp_spawn", "test: spawned ddp", true}).ok());
    ASSERT_TRUE(strategies_.Register({"solo", "test: one device", false}).ok());
  }

  void Register(std::string name, int priority, std::vector<std::string> aliases,
                std::function<std::shared_ptr<Accelerator>()> factory) {
    AcceleratorSpec spec;
    spec.name = std::move(name);
    spec.priority = priority;
    spec.aliases = std::move(aliases);
    spec.factory = std::move(factory);
    ASSERT_TRUE(registry_.Register(std::move(spec)).ok());
  }

  absl::StatusOr<Plan> Resolve(const ConnectorOptions& options, const Variables& variables = {},
                               const std::string& hostname = "localhost") {
    return ResolvePlan(options, registry_, strategies_, ProcessEnvironment::FromMap(variables, hostname));
  }

  AcceleratorRegistry registry_;
  StrategyRegistry strategies_;
};

std::vector<std::string> DeviceNames(const Plan& plan) {
  std::vector<std::string> names;
  for (const c10::Device& device : plan.devices) names.push_back(device.str());
  return names;
}

std::string Describe(const ConnectorOptions& options) {
  return absl::StrCat("accelerator=", options.accelerator.instance() ? "<instance>" : options.accelerator.name(),
                      " devices=", options.devices.ToString(),
                      " strategy=", options.strategy.instance() ? "<instance>" : options.strategy.name(),
                      " precision=", options.precision, " num_nodes=", options.num_nodes);
}

struct FlagCase {
  ConnectorOptions options;
  std::string accelerator;
  std::vector<int> indices;
  std::vector<std::string> devices;
  std::string strategy;
  std::optional<std::string> backend;
  int world_size;
};

TEST_F(ConnectorTest, ResolvesAcceleratorDevicesAndStrategy) {
  const std::vector<std::string> npu4 = {"privateuseone:0", "privateuseone:1", "privateuseone:2", "privateuseone:3"};
  const std::vector<FlagCase> cases = {
      // "auto" skips the unavailable, the throwing and the device-less accelerators of higher priority.
      {{}, "npu", {0, 1, 2, 3}, npu4, "ddp", "hccl", 4},
      {{.accelerator = " Auto "}, "npu", {0, 1, 2, 3}, npu4, "ddp", "hccl", 4},
      {{.accelerator = "host"}, "host", {0}, {"cpu"}, "single_device", std::nullopt, 1},
      {{.accelerator = "HOST", .devices = 1}, "host", {0}, {"cpu"}, "single_device", std::nullopt, 1},
      {{.accelerator = "virtual_npu", .devices = 2}, "npu", {0, 1}, {npu4[0], npu4[1]}, "ddp", "hccl", 2},
      {{.accelerator = "Virtual_NPU", .devices = "2"}, "npu", {0, 1}, {npu4[0], npu4[1]}, "ddp", "hccl", 2},
      // One device of a third-party accelerator: single_device on that accelerator's own device.
      {{.accelerator = "npu", .devices = "3,"}, "npu", {3}, {npu4[3]}, "single_device", std::nullopt, 1},
      {{.accelerator = "npu", .devices = "[1, 2]", .strategy = "DDP"},
       "npu",
       {1, 2},
       {npu4[1], npu4[2]},
       "ddp",
       "hccl",
       2},
      {{.accelerator = "npu", .devices = {2, 0}}, "npu", {2, 0}, {npu4[2], npu4[0]}, "ddp", "hccl", 2},
      {{.accelerator = "npu", .devices = "0,3"}, "npu", {0, 3}, {npu4[0], npu4[3]}, "ddp", "hccl", 2},
      {{.accelerator = "npu", .devices = 1, .num_nodes = 2}, "npu", {0}, {npu4[0]}, "ddp", "hccl", 2},
      {{.accelerator = "npu", .devices = -1, .num_nodes = 3}, "npu", {0, 1, 2, 3}, npu4, "ddp", "hccl", 12},
      {{.accelerator = "npu", .devices = "-1"}, "npu", {0, 1, 2, 3}, npu4, "ddp", "hccl", 4},
      {{.accelerator = "npu", .devices = "auto", .num_nodes = 2}, "npu", {0, 1, 2, 3}, npu4, "ddp", "hccl", 8},
      // An explicit ddp never falls back to a single device.
      {{.accelerator = "npu", .devices = 1, .strategy = "ddp"}, "npu", {0}, {npu4[0]}, "ddp", "hccl", 1},
      {{.accelerator = "host", .devices = 1, .strategy = "ddp"}, "host", {0}, {"cpu"}, "ddp", "host_collective", 1},
      {{.accelerator = "auto", .devices = 1, .strategy = "single_device"},
       "npu",
       {0},
       {npu4[0]},
       "single_device",
       std::nullopt,
       1},
      {{.accelerator = "npu", .devices = 2, .strategy = "ddp_spawn"},
       "npu",
       {0, 1},
       {npu4[0], npu4[1]},
       "ddp_spawn",
       "hccl",
       2},
      {{.accelerator = "npu", .devices = 1, .strategy = "Solo"}, "npu", {0}, {npu4[0]}, "solo", std::nullopt, 1},
      {{.accelerator = "npu", .devices = 1, .strategy = " auto "},
       "npu",
       {0},
       {npu4[0]},
       "single_device",
       std::nullopt,
       1},
  };
  for (const FlagCase& c : cases) {
    SCOPED_TRACE(Describe(c.options));
    absl::StatusOr<Plan> plan = Resolve(c.options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->accelerator->name(), c.accelerator);
    EXPECT_EQ(plan->device_indices, c.indices);
    EXPECT_EQ(DeviceNames(*plan), c.devices);
    EXPECT_EQ(plan->strategy, c.strategy);
    EXPECT_EQ(plan->strategy_instance, nullptr);
    EXPECT_EQ(plan->process_group_backend, c.backend);
    EXPECT_EQ(plan->world_size, c.world_size);
    EXPECT_EQ(plan->root_device(), plan->devices.front());
    EXPECT_EQ(plan->cluster_environment, "lightning");
  }
}

TEST_F(ConnectorTest, AutoSaysWhyItSkippedEachAccelerator) {
  absl::StatusOr<Plan> plan = Resolve({});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->notes, ElementsAre("accelerator=\"auto\" skips 'absent': no absent device here",
                                       "accelerator=\"auto\" skips 'broken': CheckAvailable threw: driver crashed",
                                       "accelerator=\"auto\" skips 'empty': it counts no devices"));
}

TEST_F(ConnectorTest, AThirdPartyAcceleratorWinsAutoByPriorityAlone) {
  AcceleratorRegistry registry;
  for (const auto& [name, priority] : std::vector<std::pair<std::string, int>>{{"alpha", 1}, {"omega", 9}}) {
    AcceleratorSpec spec;
    spec.name = name;
    spec.priority = priority;
    spec.factory = [name = name] {
      return std::make_shared<ThirdPartyAccelerator>(ThirdPartyOptions{.name = name, .device_count = 3});
    };
    ASSERT_TRUE(registry.Register(spec).ok());
  }
  absl::StatusOr<Plan> plan = ResolvePlan({}, registry, strategies_, ProcessEnvironment::FromMap({}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->accelerator->name(), "omega");
  EXPECT_EQ(plan->num_devices(), 3);
  EXPECT_THAT(plan->notes, IsEmpty());
}

struct PrecisionCase {
  ConnectorOptions options;
  Precision expected;
  std::vector<std::string> warnings;
  std::vector<std::string> notes;
};

TEST_F(ConnectorTest, ResolvesPrecisionsThroughTheAccelerator) {
  const std::string legacy16 =
      "'16' is supported for historical reasons but its usage is discouraged. Please set your precision to "
      "'16-mixed' instead!";
  const std::string legacy_bf16 =
      "'bf16' is supported for historical reasons but its usage is discouraged. Please set your precision to "
      "'bf16-mixed' instead!";
  const std::string amp16 = "Using 16-bit Automatic Mixed Precision (AMP)";
  const std::string amp_bf16 = "Using bfloat16 Automatic Mixed Precision (AMP)";
  const std::vector<PrecisionCase> cases = {
      {{.accelerator = "host", .precision = "32"}, Precision::k32True, {}, {}},
      {{.accelerator = "host", .precision = "64"}, Precision::k64True, {}, {}},
      {{.accelerator = "host", .precision = "64-true"}, Precision::k64True, {}, {}},
      {{.accelerator = "host", .precision = "BF16-True"}, Precision::kBf16True, {}, {}},
      // The host accelerator offers bf16-mixed for 16-mixed; the connector only relays its answer.
      {{.accelerator = "host", .precision = "16-mixed"}, Precision::kBf16Mixed, {kHostSubstituteWarning}, {amp_bf16}},
      {{.accelerator = "host", .precision = "16"},
       Precision::kBf16Mixed,
       {legacy16, kHostSubstituteWarning},
       {amp_bf16}},
      {{.accelerator = "host", .precision = "bf16"}, Precision::kBf16Mixed, {legacy_bf16}, {amp_bf16}},
      {{.accelerator = "npu", .precision = "16-mixed"}, Precision::k16Mixed, {}, {amp16}},
      {{.accelerator = "npu", .precision = "16"}, Precision::k16Mixed, {legacy16}, {amp16}},
      {{.accelerator = "npu", .precision = "bf16-mixed"}, Precision::kBf16Mixed, {}, {amp_bf16}},
      {{.accelerator = "npu", .precision = "16-true"}, Precision::k16True, {}, {}},
      {{.accelerator = "npu", .precision = " 32-TRUE "}, Precision::k32True, {}, {}},
  };
  for (const PrecisionCase& c : cases) {
    SCOPED_TRACE(Describe(c.options));
    ConnectorOptions options = c.options;
    options.devices = 1;
    absl::StatusOr<Plan> plan = Resolve(options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(PrecisionName(plan->precision), PrecisionName(c.expected));
    EXPECT_THAT(plan->warnings, ElementsAreArray(c.warnings));
    EXPECT_THAT(plan->notes, ElementsAreArray(c.notes));
  }
}

TEST(ParsePrecisionFlagTest, MapsLightningsSpellings) {
  const std::vector<std::pair<std::string, Precision>> cases = {
      {"32-true", Precision::k32True},   {"64-true", Precision::k64True},
      {"16-mixed", Precision::k16Mixed}, {"bf16-mixed", Precision::kBf16Mixed},
      {"16-true", Precision::k16True},   {"bf16-true", Precision::kBf16True},
      {"32", Precision::k32True},        {"64", Precision::k64True},
      {"16", Precision::k16Mixed},       {"bf16", Precision::kBf16Mixed},
  };
  for (const auto& [spelling, precision] : cases) {
    std::vector<std::string> warnings;
    absl::StatusOr<Precision> parsed = ParsePrecisionFlag(spelling, &warnings);
    ASSERT_TRUE(parsed.ok()) << spelling;
    EXPECT_EQ(*parsed, precision) << spelling;
    // Lightning warns about the legacy 16 and bf16 only.
    EXPECT_EQ(warnings.size(), spelling == "16" || spelling == "bf16" ? 1u : 0u) << spelling;
  }
}

struct EnvironmentCase {
  std::string what;
  Variables variables;
  std::string hostname;
  ConnectorOptions options;
  std::string cluster_environment;
  int world_size, global_rank, local_rank, node_rank;
  bool creates_processes_externally;
  std::string main_address;
  std::optional<int> main_port;
  std::string strategy;
};

// Writes an LSF rank file (launch node, then two slots on each of two hosts) and returns its path.
std::string LsfRankFile() {
  const std::string path = ::testing::TempDir() + "/connector_test_rankfile";
  std::ofstream(path) << "launch\nbatch0\nbatch0\nbatch1\nbatch1\n";
  return path;
}

TEST_F(ConnectorTest, RanksComeFromTheDetectedClusterEnvironment) {
  const Variables torchrun = {{"TORCHELASTIC_RUN_ID", "r1"}, {"WORLD_SIZE", "8"}, {"RANK", "5"},
                              {"LOCAL_RANK", "1"},           {"GROUP_RANK", "1"}, {"MASTER_ADDR", "node0"},
                              {"MASTER_PORT", "29400"}};
  const Variables srun = {{"SLURM_NTASKS", "8"},
                          {"SLURM_NTASKS_PER_NODE", "2"},
                          {"SLURM_NNODES", "4"},
                          {"SLURM_PROCID", "5"},
                          {"SLURM_LOCALID", "1"},
                          {"SLURM_NODEID", "2"},
                          {"SLURM_NODELIST", "gpu[12-15]"},
                          {"SLURM_JOB_ID", "4123456"}};
  const Variables srun_one = {{"SLURM_NTASKS", "1"},
                              {"SLURM_PROCID", "0"},
                              {"SLURM_LOCALID", "0"},
                              {"SLURM_NODEID", "0"},
                              {"SLURM_JOB_ID", "77"}};
  Variables interactive = srun;
  interactive["SLURM_JOB_NAME"] = "interactive";
  const Variables jsrun = {{"LSB_JOBID", "2500"},
                           {"LSB_DJOB_RANKFILE", LsfRankFile()},
                           {"JSM_NAMESPACE_SIZE", "4"},
                           {"JSM_NAMESPACE_RANK", "3"},
                           {"JSM_NAMESPACE_LOCAL_RANK", "1"}};
  const Variables mpirun = {
      {"OMPI_COMM_WORLD_SIZE", "4"},       {"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"MASTER_ADDR", "rank0"},      {"MASTER_PORT", "23456"}};
  const Variables hydra = {{"PMI_SIZE", "2"},        {"PMI_RANK", "1"},        {"MPI_LOCALRANKID", "1"},
                           {"MPI_LOCALNRANKS", "2"}, {"MASTER_ADDR", "rank0"}, {"MASTER_PORT", "23456"}};
  const std::vector<EnvironmentCase> cases = {
      {"nothing set",
       {},
       "localhost",
       {.accelerator = "npu", .devices = 2},
       "lightning",
       2,
       0,
       0,
       0,
       false,
       "127.0.0.1",
       std::nullopt,
       "ddp"},
      {"processes started by hand",
       {{"LOCAL_RANK", "1"}, {"NODE_RANK", "1"}},
       "localhost",
       {.accelerator = "npu", .devices = 2, .num_nodes = 2},
       "lightning",
       4,
       3,
       1,
       1,
       true,
       "127.0.0.1",
       std::nullopt,
       "ddp"},
      {"GROUP_RANK as the node rank",
       {{"LOCAL_RANK", "0"}, {"GROUP_RANK", "1"}},
       "localhost",
       {.accelerator = "npu", .devices = 4, .num_nodes = 2},
       "lightning",
       8,
       4,
       0,
       1,
       true,
       "127.0.0.1",
       std::nullopt,
       "ddp"},
      {"main address and port",
       {{"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "29500"}},
       "localhost",
       {.accelerator = "npu", .devices = 1},
       "lightning",
       1,
       0,
       0,
       0,
       false,
       "10.1.2.3",
       29500,
       "single_device"},
      {"torchrun",
       torchrun,
       "localhost",
       {.accelerator = "npu", .devices = 4, .num_nodes = 2},
       "torchelastic",
       8,
       5,
       1,
       1,
       true,
       "node0",
       29400,
       "ddp"},
      {"srun",
       srun,
       "localhost",
       {.accelerator = "npu", .devices = 2, .num_nodes = 4},
       "slurm",
       8,
       5,
       1,
       2,
       true,
       "gpu12",
       18456,
       "ddp"},
      {"srun with one task",
       srun_one,
       "localhost",
       {.accelerator = "npu", .devices = 1},
       "slurm",
       1,
       0,
       0,
       0,
       true,
       "127.0.0.1",
       15077,
       "single_device"},
      {"interactive SLURM job",
       interactive,
       "localhost",
       {.accelerator = "npu", .devices = 1},
       "lightning",
       1,
       0,
       0,
       0,
       false,
       "127.0.0.1",
       std::nullopt,
       "single_device"},
      {"jsrun",
       jsrun,
       "batch1",
       {.accelerator = "npu", .devices = 2, .num_nodes = 2},
       "lsf",
       4,
       3,
       1,
       1,
       true,
       "batch0",
       10500,
       "ddp"},
      {"Open MPI",
       mpirun,
       "localhost",
       {.accelerator = "npu", .devices = 2, .num_nodes = 2},
       "mpi",
       4,
       3,
       1,
       1,
       true,
       "rank0",
       23456,
       "ddp"},
      {"MPICH",
       hydra,
       "localhost",
       {.accelerator = "npu", .devices = 2},
       "mpi",
       2,
       1,
       1,
       0,
       true,
       "rank0",
       23456,
       "ddp"},
  };
  for (const EnvironmentCase& c : cases) {
    SCOPED_TRACE(c.what);
    absl::StatusOr<Plan> plan = Resolve(c.options, c.variables, c.hostname);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->cluster_environment, c.cluster_environment);
    ASSERT_NE(plan->cluster_environment_instance, nullptr);
    EXPECT_EQ(plan->cluster_environment_instance->name(), c.cluster_environment);
    EXPECT_EQ(plan->world_size, c.world_size);
    EXPECT_EQ(plan->global_rank, c.global_rank);
    EXPECT_EQ(plan->local_rank, c.local_rank);
    EXPECT_EQ(plan->node_rank, c.node_rank);
    EXPECT_EQ(plan->creates_processes_externally, c.creates_processes_externally);
    EXPECT_EQ(plan->main_address, c.main_address);
    EXPECT_EQ(plan->main_port, c.main_port);
    EXPECT_EQ(plan->strategy, c.strategy);
    EXPECT_EQ(plan->root_device(), plan->devices[c.local_rank]);
  }
}

TEST_F(ConnectorTest, EnvironmentWarningsReachThePlan) {
  absl::StatusOr<Plan> plan =
      Resolve({.accelerator = "npu", .devices = 2},
              {{"TORCHELASTIC_RUN_ID", "r"}, {"WORLD_SIZE", "2"}, {"RANK", "1"}, {"LOCAL_RANK", "1"}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->warnings, ElementsAre("MASTER_ADDR environment variable is not defined. Set as localhost",
                                          "MASTER_PORT environment variable is not defined. Set as 12910"));
}

TEST_F(ConnectorTest, VariablesGivenToATestNeverReachTheProcess) {
  const std::vector<const char*> names = {"SLURM_NTASKS", "SLURM_PROCID", "MASTER_ADDR", "LOCAL_RANK"};
  for (const char* name : names) ASSERT_EQ(std::getenv(name), nullptr) << name << " is set in the test process";
  absl::StatusOr<Plan> plan =
      Resolve({.accelerator = "npu", .devices = 1},
              {{"SLURM_NTASKS", "1"}, {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "0"}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->cluster_environment, "slurm");
  // Lightning's SLURM environment exports MASTER_ADDR and MASTER_PORT; Kiln's writes nothing.
  for (const char* name : names) EXPECT_EQ(std::getenv(name), nullptr) << name;
  absl::StatusOr<Plan> real = ResolvePlan({.accelerator = "npu", .devices = 1}, registry_);
  ASSERT_TRUE(real.ok()) << real.status();
  EXPECT_EQ(real->cluster_environment, "lightning");
}

struct ErrorCase {
  ConnectorOptions options;
  Variables variables;
  absl::StatusCode code;
  std::string message_part;
};

TEST_F(ConnectorTest, RejectsBadInputWithClearErrors) {
  const Variables torchrun4 = {{"TORCHELASTIC_RUN_ID", "r"}, {"WORLD_SIZE", "4"}, {"RANK", "0"}, {"LOCAL_RANK", "0"}};
  Variables torchrun_bad_rank = torchrun4;
  torchrun_bad_rank["WORLD_SIZE"] = "2";
  torchrun_bad_rank["RANK"] = "9";
  const Variables ntasks_only = {{"SLURM_NTASKS", "4"}};
  const Variables srun8 = {{"SLURM_NTASKS", "8"}, {"SLURM_NTASKS_PER_NODE", "4"}, {"SLURM_NNODES", "2"},
                           {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"},         {"SLURM_NODEID", "0"}};
  const Variables srun6_no_nodes = {{"SLURM_NTASKS", "6"},
                                    {"SLURM_NTASKS_PER_NODE", "3"},
                                    {"SLURM_PROCID", "0"},
                                    {"SLURM_LOCALID", "0"},
                                    {"SLURM_NODEID", "0"}};
  const Variables mpirun = {{"OMPI_COMM_WORLD_SIZE", "4"},
                            {"OMPI_COMM_WORLD_RANK", "0"},
                            {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                            {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}};
  const Variables jsrun = {{"LSB_JOBID", "1"},
                           {"LSB_DJOB_RANKFILE", LsfRankFile()},
                           {"JSM_NAMESPACE_SIZE", "2"},
                           {"JSM_NAMESPACE_RANK", "0"},
                           {"JSM_NAMESPACE_LOCAL_RANK", "0"}};
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  constexpr auto kPrecondition = absl::StatusCode::kFailedPrecondition;
  const std::vector<ErrorCase> cases = {
      // num_nodes.
      {{.num_nodes = 0}, {}, kInvalid, "num_nodes=0 is not valid; pass an int >= 1"},
      {{.num_nodes = -3}, {}, kInvalid, "num_nodes=-3 is not valid"},
      // precision.
      {{.precision = "8-true"},
       {},
       kInvalid,
       "precision '8-true' is not supported; expected one of 32-true, 64-true, 16-mixed, bf16-mixed, 16-true, "
       "bf16-true (or the legacy 32, 64, 16, bf16)"},
      {{.accelerator = "npu", .precision = "64-true"},
       {},
       kInvalid,
       "precision '64-true' is not supported by the npu accelerator; it supports 32-true, 16-mixed, bf16-mixed, "
       "16-true. Pass one of these."},
      {{.accelerator = "npu", .precision = "bf16-true"},
       {},
       kInvalid,
       "precision 'bf16-true' is not supported by the npu accelerator"},
      // A substitute the accelerator does not declare either is no way out.
      {{.accelerator = std::make_shared<FakeAccelerator>(
            FakeAcceleratorOptions{.name = "odd",
                                   .precisions = {Precision::k32True},
                                   .substitute = PrecisionSubstitute{Precision::k16True, "odd substitute"}}),
        .devices = 1,
        .precision = "16-mixed"},
       {},
       kInvalid,
       "precision '16-mixed' is not supported by the odd accelerator; it supports 32-true. Pass one of these."},
      // strategy.
      {{.strategy = "fsdp_v9"},
       {},
       kInvalid,
       "You selected an invalid strategy name: `strategy='fsdp_v9'`. It must be \"auto\", a registered strategy "
       "name (ddp, ddp_find_unused_parameters_false, ddp_find_unused_parameters_true, ddp_spawn, fsdp, "
       "fsdp_cpu_offload, model_parallel, single_device, solo) or a strategy instance"},
      {{.accelerator = "npu", .devices = 2, .strategy = "single_device"},
       {},
       kInvalid,
       "strategy='single_device' runs on one device, but 2 device(s) on 1 node(s) were requested; pass devices=1 "
       "and num_nodes=1, or a distributed strategy such as strategy='ddp'"},
      {{.accelerator = "npu", .devices = 1, .strategy = "single_device", .num_nodes = 2},
       {},
       kInvalid,
       "but 1 device(s) on 2 node(s) were requested"},
      {{.accelerator = "npu", .devices = 3, .strategy = "solo"}, {}, kInvalid, "strategy='solo' runs on one device"},
      // accelerator.
      {{.accelerator = "tpu"},
       {},
       kInvalid,
       "accelerator: unknown accelerator 'tpu'; registered: absent, broken, empty, host, npu. Pick one of these, or "
       "\"auto\"."},
      {{.accelerator = "absent"},
       {},
       kPrecondition,
       "accelerator 'absent' can not run on your system since the accelerator is not available (no absent device "
       "here). The following accelerator(s) is available and can be passed into `accelerator` argument of "
       "`Trainer`: empty, host, npu."},
      {{.accelerator = "broken"},
       {},
       kPrecondition,
       "accelerator 'broken' can not run on your system since the accelerator is not available (CheckAvailable "
       "threw: driver crashed)"},
      {{.accelerator = "empty"}, {}, kPrecondition, "devices: devices='auto' asks for every empty device, but none"},
      // devices: "no devices" is refused for every accelerator, before availability is asked.
      {{.accelerator = "absent", .devices = 0},
       {},
       kInvalid,
       "`Trainer(devices=0)` value is not a valid input using absent accelerator."},
      {{.devices = 0}, {}, kInvalid, "`Trainer(devices=0)` value is not a valid input using auto accelerator."},
      {{.accelerator = "npu", .devices = "0"},
       {},
       kInvalid,
       "`Trainer(devices='0')` value is not a valid input using npu accelerator."},
      {{.accelerator = "npu", .devices = std::vector<int>{}},
       {},
       kInvalid,
       "`Trainer(devices=[])` value is not a valid input using npu accelerator."},
      {{.accelerator = "host", .devices = " 0 "}, {}, kInvalid, "`Trainer(devices=' 0 ')` value is not a valid input"},
      // devices: what the accelerator's parser refuses.
      {{.accelerator = "npu", .devices = 9}, {}, kInvalid, "devices: 9 npu devices requested, but only 4 are visible"},
      {{.accelerator = "npu", .devices = "7,"},
       {},
       kInvalid,
       "devices: npu device 7 requested, but only 4 are visible"},
      {{.accelerator = "npu", .devices = "0,0"}, {}, kInvalid, "device index 0 appears twice in devices='0,0'"},
      {{.accelerator = "npu", .devices = "x"}, {}, kInvalid, "invalid devices value 'x'"},
      {{.accelerator = "npu", .devices = -2}, {}, kInvalid, "invalid devices value -2: a negative count other than -1"},
      {{.accelerator = "host", .devices = 2}, {}, kInvalid, "devices: 2 host devices requested, but only 1 is visible"},
      // cluster environments.
      {{.accelerator = "npu", .devices = 2},
       torchrun4,
       kInvalid,
       "torchelastic cluster environment: You set `devices=2` and `num_nodes=1` in Kiln, but the product (2 * 1) "
       "does not match the world size (4, from WORLD_SIZE)."},
      {{.accelerator = "npu", .devices = 2},
       torchrun_bad_rank,
       kInvalid,
       "torchelastic cluster environment: this process has global rank 9, outside the world of 2 process(es)"},
      {{.accelerator = "npu", .devices = 4},
       ntasks_only,
       kInvalid,
       "slurm cluster environment: You set `--ntasks=4` in your SLURM bash script, but this variable is not "
       "supported. HINT: Use `--ntasks-per-node=4` instead."},
      {{.accelerator = "npu", .devices = 2, .num_nodes = 2},
       srun8,
       kInvalid,
       "You set `devices=2` in Kiln, but the number of tasks per node configured in SLURM `--ntasks-per-node=4` does "
       "not match. HINT: Set `devices=4`."},
      {{.accelerator = "npu", .devices = 4, .num_nodes = 1},
       srun8,
       kInvalid,
       "You set `num_nodes=1` in Kiln, but the number of nodes configured in SLURM `--nodes=2` does not match. HINT: "
       "Set `num_nodes=2`."},
      {{.accelerator = "npu", .devices = 3},
       srun6_no_nodes,
       kInvalid,
       "slurm cluster environment: You set `devices=3` and `num_nodes=1` in Kiln, but the product (3 * 1) does not "
       "match the world size (6, from the slurm cluster environment)."},
      {{.accelerator = "npu", .devices = 2, .num_nodes = 2},
       mpirun,
       kInvalid,
       "mpi cluster environment: You set `devices=2` in Kiln, but MPI started 4 process(es) on this node"},
      {{.accelerator = "npu", .devices = 2},
       jsrun,
       kPrecondition,
       "lsf cluster environment: this machine's host name 'localhost' is not among the compute hosts"},
      {{.accelerator = "npu", .devices = 2},
       {{"LOCAL_RANK", "2"}},
       kInvalid,
       "lightning cluster environment: this process has local rank 2, but devices=2 runs 2 process(es) per node "
       "(local ranks 0..1); set devices to the number of processes started on each node"},
      {{.accelerator = "npu", .devices = 2},
       {{"NODE_RANK", "1"}},
       kInvalid,
       "lightning cluster environment: this process runs on node rank 1, but num_nodes=1 (node ranks 0..0)"},
      {{.accelerator = "npu", .devices = 2},
       {{"LOCAL_RANK", "one"}},
       kInvalid,
       "lightning cluster environment: environment variable LOCAL_RANK='one' is not a non-negative integer"},
      {{.accelerator = "npu", .devices = 2},
       {{"MASTER_PORT", "0"}},
       kInvalid,
       "environment variable MASTER_PORT='0' is not a TCP port"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(Describe(c.options) + " " + ::testing::PrintToString(c.variables));
    absl::StatusOr<Plan> plan = Resolve(c.options, c.variables);
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), c.code) << plan.status();
    EXPECT_THAT(plan.status().message(), HasSubstr(c.message_part));
  }
}

TEST_F(ConnectorTest, AutoWithNothingAvailableSaysSo) {
  AcceleratorRegistry empty;
  absl::StatusOr<Plan> plan = ResolvePlan({}, empty, strategies_, ProcessEnvironment::FromMap({}));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(plan.status().message(), HasSubstr("accelerator=\"auto\" found no available accelerator among the "
                                                 "registered ones ((none)); link a backend or pass"));
}

TEST_F(ConnectorTest, NoDevicesIsRefusedBeforeAnyProbe) {
  for (const Devices& devices : std::vector<Devices>{0, "0", std::vector<int>{}}) {
    auto accelerator = std::make_shared<ThirdPartyAccelerator>(ThirdPartyOptions{.name = "probed"});
    EXPECT_FALSE(Resolve({.accelerator = accelerator, .devices = devices}).ok()) << devices.ToString();
    EXPECT_EQ(accelerator->probes(), 0) << devices.ToString();
    EXPECT_TRUE(Resolve({.accelerator = accelerator, .devices = 1}).ok());
    EXPECT_GT(accelerator->probes(), 0);
  }
}

TEST_F(ConnectorTest, AcceleratorInstancesNeedNoRegistration) {
  auto instance = std::make_shared<ThirdPartyAccelerator>(ThirdPartyOptions{.name = "unregistered", .device_count = 3});
  absl::StatusOr<Plan> plan = Resolve({.accelerator = instance, .devices = "2"});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->accelerator.get(), instance.get());
  EXPECT_EQ(DeviceNames(*plan), (std::vector<std::string>{"privateuseone:0", "privateuseone:1"}));
  EXPECT_FALSE(registry_.Find("unregistered").ok());

  auto single = std::make_shared<ThirdPartyAccelerator>(ThirdPartyOptions{.name = "unregistered", .device_count = 3});
  plan = Resolve({.accelerator = single, .devices = "2,"});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->strategy, "single_device");
  EXPECT_EQ(plan->root_device(), c10::Device(c10::DeviceType::PrivateUse1, 2));

  auto unavailable =
      std::make_shared<ThirdPartyAccelerator>(ThirdPartyOptions{.name = "gone", .unavailable_reason = "unplugged"});
  EXPECT_THAT(Resolve({.accelerator = unavailable}).status().message(),
              HasSubstr("accelerator 'gone' can not run on your system since the accelerator is not available "
                        "(unplugged). The following accelerator(s) is available and can be passed into `accelerator` "
                        "argument of `Trainer`: empty, host, npu."));

  auto no_backend =
      std::make_shared<ThirdPartyAccelerator>(ThirdPartyOptions{.name = "lonely", .process_group_backend = ""});
  EXPECT_TRUE(Resolve({.accelerator = no_backend, .devices = 1}).ok());
  EXPECT_THAT(Resolve({.accelerator = no_backend, .devices = 2}).status().message(),
              HasSubstr("strategy='ddp' needs a collective backend, but the lonely accelerator names none"));
}

TEST_F(ConnectorTest, StrategyInstancesAreCarriedThroughUntouched) {
  struct Case {
    std::shared_ptr<TestStrategy> strategy;
    Devices devices;
    std::optional<std::string> backend;  // nullopt: an error is expected.
  };
  const std::vector<Case> cases = {
      {std::make_shared<TestStrategy>("pipeline", true), 2, "hccl"},
      {std::make_shared<TestStrategy>("pipeline", true, "custom_ccl"), 2, "custom_ccl"},
      {std::make_shared<TestStrategy>("pipeline", true, "custom_ccl"), 1, "custom_ccl"},
      {std::make_shared<TestStrategy>("on_one", false), 1, std::nullopt},
      {std::make_shared<TestStrategy>("on_one", false), 2, std::nullopt},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.strategy->name() + " " + c.devices.ToString());
    absl::StatusOr<Plan> plan = Resolve({.accelerator = "npu", .devices = c.devices, .strategy = c.strategy});
    const bool expect_error = !c.strategy->IsDistributed() && c.devices.ToString() != "1";
    if (expect_error) {
      EXPECT_THAT(plan.status().message(), HasSubstr("strategy='on_one' runs on one device, but 2 device(s)"));
      continue;
    }
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->strategy, c.strategy->name());
    EXPECT_EQ(plan->strategy_instance.get(), c.strategy.get());
    EXPECT_EQ(plan->process_group_backend, c.backend);
  }
  EXPECT_THAT(Resolve({.strategy = std::make_shared<TestStrategy>("", true)}).status().message(),
              HasSubstr("the strategy instance passed as `strategy` has an empty name()"));
}

TEST_F(ConnectorTest, ProcessGroupBackendOptionChoosesTheDistributedBackend) {
  // The npu accelerator brings "hccl"; the option replaces it for a named or automatic distributed strategy.
  for (const char* strategy : {"auto", "ddp", "ddp_find_unused_parameters_true"}) {
    SCOPED_TRACE(strategy);
    absl::StatusOr<Plan> plan =
        Resolve({.accelerator = "npu", .devices = 2, .strategy = strategy, .process_group_backend = "host_ccl"});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->process_group_backend, "host_ccl");
  }
  absl::StatusOr<Plan> unset = Resolve({.accelerator = "npu", .devices = 2, .strategy = "ddp"});
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_EQ(unset->process_group_backend, "hccl") << "unset, the accelerator's backend";

  // An instance without a backend of its own takes the option; one insisting on the same backend agrees with it.
  absl::StatusOr<Plan> plain = Resolve({.accelerator = "npu", .devices = 2,
                                        .strategy = std::make_shared<TestStrategy>("pipeline", true),
                                        .process_group_backend = "host_ccl"});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->process_group_backend, "host_ccl");
  absl::StatusOr<Plan> same = Resolve({.accelerator = "npu", .devices = 2,
                                       .strategy = std::make_shared<TestStrategy>("pipeline", true, "host_ccl"),
                                       .process_group_backend = "host_ccl"});
  ASSERT_TRUE(same.ok()) << same.status();

  // One insisting on another backend is refused, naming both.
  absl::StatusOr<Plan> conflict = Resolve({.accelerator = "npu", .devices = 2,
                                           .strategy = std::make_shared<TestStrategy>("pipeline", true, "custom_ccl"),
                                           .process_group_backend = "host_ccl"});
  EXPECT_EQ(conflict.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(conflict.status().message(),
              HasSubstr("process_group_backend='host_ccl' conflicts with strategy 'pipeline', which insists on "
                        "'custom_ccl'"));

  // On one device there is no process group: the option changes nothing.
  absl::StatusOr<Plan> single = Resolve({.accelerator = "npu", .devices = 1, .process_group_backend = "host_ccl"});
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_FALSE(single->process_group_backend.has_value());
}

TEST_F(ConnectorTest, ClusterEnvironmentInstancesReplaceDetection) {
  // Variables that would detect SLURM are ignored when the user passes an environment.
  const Variables srun = {{"SLURM_NTASKS", "1"}};
  absl::StatusOr<Plan> plan = Resolve({.accelerator = "npu",
                                       .devices = 2,
                                       .num_nodes = 2,
                                       .cluster_environment = std::make_shared<FixedClusterEnvironment>(4, 2, 0, 1)},
                                      srun);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->cluster_environment, "my_cluster");
  EXPECT_EQ(plan->global_rank, 2);
  EXPECT_EQ(plan->node_rank, 1);
  EXPECT_EQ(plan->main_address, "head.example");
  EXPECT_EQ(plan->main_port, 4242);
  EXPECT_TRUE(plan->creates_processes_externally);

  // The connector proposes the world size and global rank, as Lightning's strategies do.
  auto lightning = std::make_shared<LightningEnvironment>(ProcessEnvironment::FromMap({{"LOCAL_RANK", "1"}}));
  plan = Resolve({.accelerator = "npu", .devices = 3, .cluster_environment = lightning});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->cluster_environment_instance.get(), lightning.get());
  EXPECT_EQ(*lightning->WorldSize(), 3);
  EXPECT_EQ(*lightning->GlobalRank(), 1);

  EXPECT_THAT(Resolve({.accelerator = "npu",
                       .devices = 2,
                       .cluster_environment = std::make_shared<FixedClusterEnvironment>(3, 0, 0, 0)})
                  .status()
                  .message(),
              HasSubstr("my_cluster cluster environment: You set `devices=2` and `num_nodes=1` in Kiln, but the "
                        "product (2 * 1) does not match the world size (3, from the my_cluster cluster environment)"));
}

TEST_F(ConnectorTest, PlanAsJson) {
  absl::StatusOr<Plan> plan = Resolve({.accelerator = "npu", .devices = "0,1"});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->ToJson(),
            "{\"accelerator\": \"npu\", \"devices\": [\"privateuseone:0\", \"privateuseone:1\"], \"logical_devices\": "
            "[\"npu:0\", \"npu:1\"], \"num_devices\": 2, "
            "\"strategy\": \"ddp\", \"process_group_backend\": \"hccl\", \"precision\": \"32-true\", \"num_nodes\": 1, "
            "\"world_size\": 2, \"global_rank\": 0, \"local_rank\": 0, \"node_rank\": 0, \"cluster_environment\": "
            "\"lightning\", \"creates_processes_externally\": false, \"main_address\": \"127.0.0.1\", \"main_port\": "
            "null, \"launcher_store_prefix\": null}");
  plan = Resolve({.accelerator = "npu", .devices = 1}, {{"MASTER_ADDR", "a\"b"}, {"MASTER_PORT", "80"}});
  ASSERT_TRUE(plan.ok());
  EXPECT_THAT(plan->ToJson(), HasSubstr("\"process_group_backend\": null"));
  EXPECT_THAT(plan->ToJson(), HasSubstr("\"main_address\": \"a\\\"b\", \"main_port\": 80, "));
}

// A backend whose devices all compute on the host CPU keeps its own numbering in the plan (the c10 devices alone
// read "cpu", "cpu").
TEST_F(ConnectorTest, DevicesThatShareAComputeDeviceKeepTheirIndices) {
  Register("sim", 0, {},
           [] { return std::make_shared<FakeAccelerator>(FakeAcceleratorOptions{.name = "sim", .device_count = 3}); });
  absl::StatusOr<Plan> plan = Resolve({.accelerator = "sim", .devices = "0,2", .strategy = "ddp"});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->ToJson(),
              HasSubstr("\"devices\": [\"cpu\", \"cpu\"], \"logical_devices\": [\"sim:0\", \"sim:2\"]"));
  ASSERT_EQ(plan->logical_devices().size(), 2u);
  EXPECT_EQ(plan->logical_devices()[1].index, 2);
  EXPECT_EQ(plan->logical_devices()[1].ToString(), "sim:2 (on cpu)");
  EXPECT_EQ(plan->root_logical_device().ToString(), "sim:0 (on cpu)");
}

}  // namespace
}  // namespace kiln
