// The plugin loader against real shared libraries (testing/test_plugin.c, one per variant), opened with dlopen: a
// well-formed plugin becomes an ordinary accelerator, and each broken one is a clear error naming its path.
#include "hal/plugin/plugin_loader.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "c10/core/Device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/plugin/kiln_plugin_c_api.h"
#include "hal/plugin/plugin_collectives.h"
#include "hal/plugin/plugin_library.h"
#include "hal/registry.h"
#include "hal/testing/fake_accelerator.h"
#include "torch/csrc/distributed/c10d/HashStore.hpp"

namespace kiln {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Paths as Bazel lays out the test's runfiles (the working directory is the workspace's runfiles root).
std::string TestPlugin(absl::string_view variant) { return absl::StrCat("hal/plugin/libtest_plugin_", variant, ".so"); }

std::shared_ptr<PluginAccelerator> Loaded(AcceleratorRegistry& registry, absl::string_view variant) {
  absl::StatusOr<PluginInfo> info = LoadAcceleratorPlugin(TestPlugin(variant), registry);
  EXPECT_TRUE(info.ok()) << info.status();
  if (!info.ok()) return nullptr;
  absl::StatusOr<std::shared_ptr<Accelerator>> accelerator = registry.Get(info->name);
  EXPECT_TRUE(accelerator.ok()) << accelerator.status();
  if (!accelerator.ok()) return nullptr;
  return std::dynamic_pointer_cast<PluginAccelerator>(*accelerator);
}

TEST(PluginLoaderTest, RegistersAWellFormedPluginUnderItsOwnNames) {
  AcceleratorRegistry registry;
  absl::StatusOr<PluginInfo> info = LoadAcceleratorPlugin(TestPlugin("indexed"), registry);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->name, "test_indexed");
  EXPECT_EQ(info->path, TestPlugin("indexed"));
  EXPECT_EQ(info->api_version, "1.1");  // Built against header 1.1: a PrivateUse1 plugin of 1.1 still loads.
  EXPECT_FALSE(info->has_collectives) << "a 1.1 plugin whose collectives are NULL has none";
  EXPECT_EQ(info->device_name, "") << "a 1.1 plugin registers its device itself";
  EXPECT_THAT(info->aliases, ElementsAre("test_alias"));
  EXPECT_EQ(info->device_type, c10::DeviceType::PrivateUse1);
  EXPECT_FALSE(info->devices_are_processes);
  EXPECT_EQ(info->visibility_hint, "TEST_PLUGIN_DEVICES=3");

  absl::StatusOr<AcceleratorSpec> spec = registry.Find("TEST_ALIAS");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "test_indexed");
  EXPECT_EQ(spec->priority, 7);
  EXPECT_THAT(spec->description, HasSubstr(TestPlugin("indexed")));

  absl::StatusOr<std::shared_ptr<Accelerator>> accelerator = registry.Get("test_alias");
  ASSERT_TRUE(accelerator.ok()) << accelerator.status();
  EXPECT_EQ((*accelerator)->name(), "test_indexed");
  EXPECT_EQ((*accelerator)->ProcessGroupBackend(), "gloo");
  EXPECT_THAT((*accelerator)->SupportedPrecisions(), ElementsAre(Precision::k32True));
  std::optional<PrecisionSubstitute> substitute = (*accelerator)->SubstitutePrecision(Precision::k64True);
  ASSERT_TRUE(substitute.has_value());
  EXPECT_EQ(substitute->precision, Precision::k32True);
  EXPECT_EQ(substitute->warning, "test plugin: 64-true runs as 32-true");
  EXPECT_FALSE((*accelerator)->SubstitutePrecision(Precision::kBf16Mixed).has_value());
}

TEST(PluginLoaderTest, KilnParsesDevicesOverThePluginsCount) {
  AcceleratorRegistry registry;
  std::shared_ptr<PluginAccelerator> plugin = Loaded(registry, "indexed");
  ASSERT_NE(plugin, nullptr);
  EXPECT_EQ(plugin->AutoDeviceCount(), 1);  // The plugin's auto_count, not its 3 devices.
  EXPECT_THAT(*plugin->ParseDevices("auto"), ElementsAre(0));
  EXPECT_THAT(*plugin->ParseDevices(-1), ElementsAre(0, 1, 2));
  EXPECT_THAT(*plugin->ParseDevices("0,2"), ElementsAre(0, 2));
  EXPECT_THAT(*plugin->ParseDevices(2), ElementsAre(0, 1));

  absl::StatusOr<std::vector<int>> too_many = plugin->ParseDevices(4);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_many.status().message(), HasSubstr("TEST_PLUGIN_DEVICES=3"));  // The plugin's visibility hint.
  EXPECT_EQ(plugin->ParseDevices("x").status().code(), absl::StatusCode::kInvalidArgument);

  const std::vector<c10::Device> devices = plugin->ParallelDevices({0, 2});
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0], c10::Device(c10::DeviceType::PrivateUse1, 0));
  EXPECT_EQ(devices[1], c10::Device(c10::DeviceType::PrivateUse1, 2));
}

TEST(PluginLoaderTest, APrivateUse1PluginOf1_1IsUnavailableUntilLibTorchHasItsDevice) {
  // This test links no PrivateUse1 backend, and the test plugin (1.1, which would register its device when loaded)
  // registers nothing with LibTorch.
  AcceleratorRegistry registry;
  std::shared_ptr<PluginAccelerator> plugin = Loaded(registry, "indexed");
  ASSERT_NE(plugin, nullptr);
  const absl::Status available = plugin->CheckAvailable();
  EXPECT_EQ(available.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(available.message(), HasSubstr("no privateuseone device"));
  EXPECT_THAT(available.message(), HasSubstr("must register its device"));
}

TEST(PluginLoaderTest, CallsReachThePluginAndItsErrorsComeBackAsValues) {
  AcceleratorRegistry registry;
  std::shared_ptr<PluginAccelerator> plugin = Loaded(registry, "indexed");
  ASSERT_NE(plugin, nullptr);
  EXPECT_TRUE(plugin->SetupDevice(LogicalDeviceOf(*plugin, c10::Device(c10::DeviceType::PrivateUse1, 2))).ok());
  EXPECT_TRUE(plugin->TeardownDevice(LogicalDeviceOf(*plugin, c10::Device(c10::DeviceType::PrivateUse1, 2))).ok());

  // An index the plugin does not have: its own error, with its code, prefixed by the path and the function.
  const absl::Status setup =
      plugin->SetupDevice(LogicalDeviceOf(*plugin, c10::Device(c10::DeviceType::PrivateUse1, 3)));
  EXPECT_EQ(setup.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(setup.message(), HasSubstr(absl::StrCat("accelerator plugin '", TestPlugin("indexed"),
                                                      "': Device_Setup: test plugin has no device 3")));
  // A device of another type never reaches the plugin.
  EXPECT_THAT(plugin->SetupDevice(LogicalDeviceOf(*plugin, c10::Device(c10::DeviceType::Meta))).message(),
              HasSubstr("has no device test_indexed:0 (on meta); its devices are privateuseone devices"));
}

TEST(PluginLoaderTest, StatisticsAreCopiedThroughABufferThatGrows) {
  AcceleratorRegistry registry;
  std::shared_ptr<PluginAccelerator> plugin = Loaded(registry, "indexed");
  ASSERT_NE(plugin, nullptr);
  // 40 statistics: more than the loader's first buffer of 32.
  absl::StatusOr<DeviceStats> stats =
      plugin->GetDeviceStats(LogicalDeviceOf(*plugin, c10::Device(c10::DeviceType::PrivateUse1, 2)));
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->size(), 40u);
  EXPECT_EQ(stats->at("stat_00"), 200.0);
  EXPECT_EQ(stats->at("stat_39"), 239.0);
  EXPECT_FALSE(plugin->GetDeviceStats(LogicalDeviceOf(*plugin, c10::Device(c10::DeviceType::Meta))).ok());
  EXPECT_THAT(
      plugin->GetDeviceStats(LogicalDeviceOf(*plugin, c10::Device(c10::DeviceType::PrivateUse1, 5))).status().message(),
      HasSubstr("test plugin has no device 5"));
}

struct BrokenPlugin {
  std::string path;
  absl::StatusCode code;
  std::vector<std::string> fragments;  // Each must appear in the error.
};

TEST(PluginLoaderTest, EveryBrokenPluginIsAClearErrorNamingItsPath) {
  const std::vector<BrokenPlugin> broken = {
      {TestPlugin("wrong_major"),
       absl::StatusCode::kInvalidArgument,
       {absl::StrCat("was built for plugin API version 2.", KILN_PLUGIN_API_MINOR, ", but this Kiln implements 1.",
                     KILN_PLUGIN_API_MINOR),
        "major versions must be equal"}},
      {TestPlugin("missing_symbol"), absl::StatusCode::kInvalidArgument, {"does not export KILN_GetPluginApi"}},
      {TestPlugin("null_entry"), absl::StatusCode::kInvalidArgument, {"KILN_GetPluginApi returned NULL"}},
      {TestPlugin("short_api"),
       absl::StatusCode::kInvalidArgument,
       {absl::StrCat("but its function table is ", KILN_STRUCT_SIZE(KILN_Plugin_Api, Device_Teardown),
                     " bytes (struct_size), shorter than the ", KILN_Plugin_Api_STRUCT_SIZE, " bytes")}},
      {TestPlugin("null_function"), absl::StatusCode::kInvalidArgument, {"has no Device_Stats (NULL"}},
      {TestPlugin("partial_collectives"),
       absl::StatusCode::kInvalidArgument,
       {"sets some of plugin API 1.1's collectives but not Collectives_ReduceScatter, Collectives_Barrier (NULL",
        "all or nothing: implement them, or set all eight to NULL"}},
      {TestPlugin("init_error"),
       absl::StatusCode::kFailedPrecondition,
       {"Plugin_Initialize: the test driver libtestdriver.so.1 is not installed"}},
      {TestPlugin("info_error"),
       absl::StatusCode::kInternal,
       {"Plugin_Info: the test plugin's configuration file is corrupt"}},
      {TestPlugin("bad_info"), absl::StatusCode::kInvalidArgument, {"Plugin_Info gave device_type 0", "not set"}},
      {TestPlugin("no_device_name"),
       absl::StatusCode::kInvalidArgument,
       {"Plugin_Info gave no device_name; a PRIVATEUSE1 plugin of API 1.2 must give the name LibTorch gives its "
        "device"}},
      {TestPlugin("bad_device_name"),
       absl::StatusCode::kInvalidArgument,
       {"Plugin_Info gave device_name 'Test NPU'", "a lower-case letter, then lower-case letters, digits and '_'"}},
      {TestPlugin("no_device_register"),
       absl::StatusCode::kInvalidArgument,
       {"reports plugin API 1.2 and device type PRIVATEUSE1 but has no Device_Register (NULL in its function table)",
        "implement it (with Kiln's device kit, it calls kiln::device_kit::Register)"}},
      {TestPlugin("gloo_without_collectives"),
       absl::StatusCode::kInvalidArgument,
       {"Plugin_Info names the collective backend of its PRIVATEUSE1 device \"gloo\", which is Kiln's host transport",
        "name them after the device (\"acme_npu_staged\")"}},
      {"hal/plugin/testing/not_a_plugin.so",
       absl::StatusCode::kInvalidArgument,
       {"cannot be loaded as a shared library", "invalid ELF header"}},
      {"hal/plugin/libtest_plugin_absent.so", absl::StatusCode::kNotFound, {"No such file or directory"}},
      {"hal/plugin", absl::StatusCode::kInvalidArgument, {"is not a regular file"}},
  };
  for (const BrokenPlugin& plugin : broken) {
    SCOPED_TRACE(plugin.path);
    AcceleratorRegistry registry;
    absl::StatusOr<PluginInfo> info = LoadAcceleratorPlugin(plugin.path, registry);
    ASSERT_FALSE(info.ok()) << "loaded as " << info->name;
    EXPECT_EQ(info.status().code(), plugin.code) << info.status();
    EXPECT_THAT(info.status().message(), HasSubstr(absl::StrCat("accelerator plugin '", plugin.path, "'")));
    for (const std::string& fragment : plugin.fragments) {
      EXPECT_THAT(info.status().message(), HasSubstr(fragment));
    }
    EXPECT_EQ(registry.NameList(), "(none)") << "a failed load registered something";
    // Trying again gives the same answer (and Plugin_Initialize is not run twice).
    EXPECT_EQ(LoadAcceleratorPlugin(plugin.path, registry).status(), info.status());
  }
}

TEST(PluginLoaderTest, APluginForAnOlderMinorVersionIsRefusedByAKilnThatNeedsANewerOne) {
  AcceleratorRegistry registry;
  absl::StatusOr<PluginInfo> info =
      internal::LoadAcceleratorPluginRequiringMinor(TestPlugin("v1_0"), registry, /*minimum_minor=*/1);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(info.status().message(),
              HasSubstr(absl::StrCat("accelerator plugin '", TestPlugin("v1_0"), "' was built for plugin API ",
                                     "version 1.0, but this Kiln needs 1.1 or later")));
  EXPECT_EQ(registry.NameList(), "(none)");
}

TEST(PluginLoaderTest, APluginBuiltAgainstHeader1_0StillLoadsWithoutCollectives) {
  // Its table ends after Precision_Substitute: Kiln reads nothing beyond, and keeps its Gloo-or-nothing default.
  AcceleratorRegistry registry;
  std::shared_ptr<PluginAccelerator> plugin = Loaded(registry, "v1_0");
  ASSERT_NE(plugin, nullptr);
  EXPECT_EQ(plugin->info().api_version, "1.0");
  EXPECT_FALSE(plugin->info().has_collectives);
  EXPECT_EQ(plugin->ProcessGroupBackend(), "gloo");
  CollectiveOptions options;
  options.store = c10::make_intrusive<c10d::HashStore>();
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> backend =
      plugin->MakeCollectiveBackend(LogicalDeviceOf(*plugin, c10::Device(c10::DeviceType::PrivateUse1, 0)), options);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(backend.status().message(), HasSubstr("brings no collective backend"));
}

// Plugin API 1.3: a CCL that lacks a collective says so, and Kiln's accelerator declares it; a 1.1 plugin's CCL
// claims all of them.
TEST(PluginLoaderTest, APluginDeclaresTheCollectivesItsCclLacks) {
  AcceleratorRegistry registry;
  std::shared_ptr<PluginAccelerator> lacking = Loaded(registry, "lacking_collectives");
  ASSERT_NE(lacking, nullptr);
  EXPECT_EQ(lacking->info().api_version, absl::StrCat(KILN_PLUGIN_API_MAJOR, ".", KILN_PLUGIN_API_MINOR));
  EXPECT_TRUE(lacking->info().has_collectives);
  EXPECT_FALSE(lacking->SupportedCollectives().reduce_scatter);
  EXPECT_TRUE(lacking->SupportedCollectives().allgather);
  EXPECT_EQ(lacking->SupportedCollectives().Lacking(), "_reduce_scatter_base");
  AcceleratorRegistry other;
  std::shared_ptr<PluginAccelerator> all = Loaded(other, "collectives");
  ASSERT_NE(all, nullptr);
  EXPECT_TRUE(all->SupportedCollectives().reduce_scatter);
  EXPECT_TRUE(all->SupportedCollectives().allgather);
}

TEST(PluginLoaderTest, APluginWithAllEightCollectivesLoadsAndKilnMakesItsCommunicator) {
  AcceleratorRegistry registry;
  std::shared_ptr<PluginAccelerator> plugin = Loaded(registry, "collectives");
  ASSERT_NE(plugin, nullptr);
  EXPECT_EQ(plugin->info().api_version, "1.1");
  EXPECT_TRUE(plugin->info().has_collectives);
  EXPECT_EQ(plugin->ProcessGroupBackend(), "test_ccl");
  const LogicalDevice device = LogicalDeviceOf(*plugin, c10::Device(c10::DeviceType::PrivateUse1, 0));

  // Rank 0 asks the plugin for a unique id and leaves it in the store, then joins: the test plugin's CommInit fails,
  // and its error comes back with its code, naming the path and the function.
  auto store = c10::make_intrusive<c10d::HashStore>();
  CollectiveOptions options;
  options.store = store;
  options.world_size = 2;
  options.timeout = std::chrono::milliseconds(2000);
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> rank0 = plugin->MakeCollectiveBackend(device, options);
  ASSERT_FALSE(rank0.ok());
  EXPECT_EQ(rank0.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(rank0.status().message(),
              HasSubstr(absl::StrCat("accelerator plugin '", TestPlugin("collectives"),
                                     "': Collectives_CommInit: test plugin: rank 0 of 2 cannot join: the test fabric "
                                     "is down")));
  const std::vector<uint8_t> id = store->get(kPluginUniqueIdKey);
  EXPECT_EQ(std::string(id.begin(), id.end()), std::string("test-id", 8));

  // Rank 1 reads the id from the store (CommInit checks it is the plugin's own).
  options.rank = 1;
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> rank1 = plugin->MakeCollectiveBackend(device, options);
  ASSERT_FALSE(rank1.ok());
  EXPECT_THAT(rank1.status().message(), HasSubstr("test plugin: rank 1 of 2 cannot join"));

  // Without rank 0, rank 1 waits for the id for the timeout, then says what it waited for.
  options.store = c10::make_intrusive<c10d::HashStore>();
  options.timeout = std::chrono::milliseconds(200);
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> alone = plugin->MakeCollectiveBackend(device, options);
  ASSERT_FALSE(alone.ok());
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(alone.status().message(), HasSubstr("rank 1 of 2: test_ccl (accelerator plugin '"));
  EXPECT_THAT(alone.status().message(), HasSubstr("rank 0's unique id did not arrive within 200 ms"));
}

TEST(PluginLoaderTest, TheTableOf1_2EndsWithDeviceRegister) {
  EXPECT_EQ(internal::PluginApiSizeAtMinor(0), KILN_STRUCT_SIZE(KILN_Plugin_Api, Precision_Substitute));
  EXPECT_EQ(internal::PluginApiSizeAtMinor(1), KILN_STRUCT_SIZE(KILN_Plugin_Api, Collectives_Barrier));
  EXPECT_EQ(internal::PluginApiSizeAtMinor(2), KILN_STRUCT_SIZE(KILN_Plugin_Api, Device_Register));
  EXPECT_EQ(internal::PluginApiSizeAtMinor(3), KILN_Plugin_Api_STRUCT_SIZE);  // A newer minor: Kiln's whole table.
  // The indexed test plugin's table is 1.1's: reporting 1.2 with it is refused, reporting 1.1 is fine.
  absl::StatusOr<std::shared_ptr<const PluginLibrary>> library = PluginLibrary::Open(TestPlugin("indexed"));
  ASSERT_TRUE(library.ok()) << library.status();
  KILN_Plugin_Api table = (*library)->api();
  ASSERT_EQ(table.struct_size, internal::PluginApiSizeAtMinor(1));
  EXPECT_TRUE(internal::CheckPluginApi("x/libtable.so", table, kPluginApiMinimumMinor).ok());
  EXPECT_FALSE(internal::PluginApiHasDeviceRegister(table));
  table.minor_version = 2;
  const absl::Status short_table = internal::CheckPluginApi("x/libtable.so", table, kPluginApiMinimumMinor);
  EXPECT_EQ(short_table.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(short_table.message(), HasSubstr(absl::StrCat("reports plugin API version 1.2 but its function table is ",
                                                            internal::PluginApiSizeAtMinor(1), " bytes")));
}

// A 1.2 plugin's PrivateUse1 device is registered by Kiln, through Device_Register, when it is chosen, and once per
// process.
// The test plugin is C and registers nothing with LibTorch, so Kiln's check after Device_Register fails: that failure,
// and the call counted by the plugin, show when and how often Kiln calls it. (examples/device_plugin's
// two_devices_test shows a device registered for real, and a second one refused.)
TEST(PluginLoaderTest, KilnRegistersThePrivateUse1DeviceOfA1_2PluginWhenChosenOnceAndChecksIt) {
  AcceleratorRegistry registry;
  std::shared_ptr<PluginAccelerator> plugin = Loaded(registry, "v1_2");
  ASSERT_NE(plugin, nullptr);
  EXPECT_EQ(plugin->info().api_version, "1.2");
  EXPECT_EQ(plugin->info().device_name, "test_npu");
  const LogicalDevice device = LogicalDeviceOf(*plugin, c10::Device(c10::DeviceType::PrivateUse1, 0));
  const auto register_calls = [&] {
    absl::StatusOr<DeviceStats> stats = plugin->GetDeviceStats(device);
    return stats.ok() ? stats->at("register_calls") : -1.0;
  };

  // Counting, availability and statistics register nothing; this process has no PrivateUse1 device, so the plugin's
  // can be registered, and it is available.
  EXPECT_EQ(plugin->AutoDeviceCount(), 1);
  EXPECT_TRUE(plugin->CheckAvailable().ok()) << plugin->CheckAvailable();
  EXPECT_EQ(register_calls(), 0.0);

  // Chosen: Kiln calls Device_Register, then finds no device named test_npu in LibTorch.
  absl::StatusOr<std::vector<int>> parsed = plugin->ParseDevices(1);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(parsed.status().message(),
              HasSubstr(absl::StrCat("accelerator plugin '", TestPlugin("v1_2"),
                                     "': Device_Register succeeded, but LibTorch's PrivateUse1 device is unnamed "
                                     "without a device guard, where 'test_npu' (Plugin_Info's device_name) with a "
                                     "device guard was expected")));
  EXPECT_EQ(register_calls(), 1.0);

  // Kiln keeps the outcome: choosing, listing or setting up the device again, also from another registry, does not
  // call the plugin again, and the accelerator is unavailable for that reason.
  EXPECT_EQ(plugin->ParseDevices(1).status(), parsed.status());
  EXPECT_EQ(plugin->SetupDevice(device), parsed.status());
  EXPECT_EQ(plugin->ParallelDevices({0}).size(), 1u);
  CollectiveOptions options;
  options.store = c10::make_intrusive<c10d::HashStore>();
  EXPECT_EQ(plugin->MakeCollectiveBackend(device, options).status(), parsed.status());
  AcceleratorRegistry other;
  std::shared_ptr<PluginAccelerator> again = Loaded(other, "v1_2");
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->ParseDevices(1).status(), parsed.status());
  EXPECT_EQ(register_calls(), 1.0);
  const absl::Status available = plugin->CheckAvailable();
  EXPECT_EQ(available.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(available.message(), HasSubstr("Device_Register succeeded, but LibTorch's PrivateUse1 device"));
}

TEST(PluginLoaderTest, OnlyPathsAreLoadedNeverABareNameFromTheWorkingDirectory) {
  AcceleratorRegistry registry;
  // The file exists in the working directory, yet a bare name is refused rather than searched for.
  char original[4096];
  ASSERT_NE(::getcwd(original, sizeof(original)), nullptr);
  ASSERT_EQ(::chdir("hal/plugin"), 0);
  absl::StatusOr<PluginInfo> bare = LoadAcceleratorPlugin("libtest_plugin_indexed.so", registry);
  absl::StatusOr<PluginInfo> explicit_relative = LoadAcceleratorPlugin("./libtest_plugin_indexed.so", registry);
  ASSERT_EQ(::chdir(original), 0);
  ASSERT_FALSE(bare.ok());
  EXPECT_THAT(bare.status().message(), HasSubstr("'libtest_plugin_indexed.so' is a bare file name"));
  EXPECT_THAT(bare.status().message(), HasSubstr("write ./libtest_plugin_indexed.so or an absolute path"));
  EXPECT_TRUE(explicit_relative.ok()) << explicit_relative.status();

  EXPECT_THAT(LoadAcceleratorPlugin("", registry).status().message(), HasSubstr("path is empty"));
}

TEST(PluginLoaderTest, AFailingPluginIsAnAcceleratorWhoseEveryAnswerIsAnError) {
  AcceleratorRegistry registry;
  std::shared_ptr<PluginAccelerator> plugin = Loaded(registry, "failing");
  ASSERT_NE(plugin, nullptr);
  EXPECT_EQ(plugin->AutoDeviceCount(), 0);
  const absl::Status available = plugin->CheckAvailable();
  EXPECT_EQ(available.code(), absl::StatusCode::kUnavailable);  // The plugin's own code.
  EXPECT_THAT(available.message(), HasSubstr(absl::StrCat("accelerator plugin '", TestPlugin("failing"),
                                                          "': Devices_CheckAvailable: the test device is on fire")));
  absl::StatusOr<std::vector<int>> parsed = plugin->ParseDevices(1);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(parsed.status().message(), HasSubstr("the test device is on fire (Devices_Count)"));
  // Set-up registers the device first (plugin API 1.2), and that fails.
  EXPECT_THAT(plugin->SetupDevice(LogicalDeviceOf(*plugin, c10::Device(c10::DeviceType::PrivateUse1, 0))).message(),
              HasSubstr("on fire (Device_Register)"));
  EXPECT_THAT(plugin->TeardownDevice(LogicalDeviceOf(*plugin, c10::Device(c10::DeviceType::PrivateUse1, 0))).message(),
              HasSubstr("on fire (Device_Teardown)"));
  EXPECT_THAT(
      plugin->GetDeviceStats(LogicalDeviceOf(*plugin, c10::Device(c10::DeviceType::PrivateUse1, 0))).status().message(),
      HasSubstr("on fire (Device_Stats)"));
  EXPECT_FALSE(plugin->SubstitutePrecision(Precision::k64True).has_value());
}

TEST(PluginLoaderTest, NamesAreTheRegistrysOwn) {
  AcceleratorRegistry registry;
  ASSERT_TRUE(registry
                  .Register({.name = "test_indexed",
                             .description = "already here",
                             .factory = [] { return std::make_shared<testing::FakeAccelerator>(); }})
                  .ok());
  absl::StatusOr<PluginInfo> clash = LoadAcceleratorPlugin(TestPlugin("indexed"), registry);
  ASSERT_FALSE(clash.ok());
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(
      clash.status().message(),
      HasSubstr(absl::StrCat("accelerator plugin '", TestPlugin("indexed"),
                             "' cannot be registered: accelerator name 'test_indexed' (registered in the plugin ",
                             TestPlugin("indexed"), ") is already taken by accelerator 'test_indexed'")));
  EXPECT_THAT(clash.status().message(), HasSubstr("(registered: test_indexed)"));
}

TEST(PluginLoaderTest, TheSamePluginListedTwiceIsLoadedOnce) {
  AcceleratorRegistry registry;
  absl::StatusOr<std::vector<PluginInfo>> loaded = LoadAcceleratorPlugins(
      {TestPlugin("indexed"), absl::StrCat("./", TestPlugin("indexed")), TestPlugin("failing")}, registry);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 2u);
  EXPECT_EQ((*loaded)[0].name, "test_indexed");
  EXPECT_EQ((*loaded)[1].name, "test_failing");

  // Loading it again by itself, into the same registry, is the registry's AlreadyExists.
  EXPECT_EQ(LoadAcceleratorPlugin(TestPlugin("indexed"), registry).status().code(), absl::StatusCode::kAlreadyExists);
  // A list stops at its first error, which names the path.
  AcceleratorRegistry other;
  absl::StatusOr<std::vector<PluginInfo>> stopped =
      LoadAcceleratorPlugins({TestPlugin("wrong_major"), TestPlugin("indexed")}, other);
  ASSERT_FALSE(stopped.ok());
  EXPECT_THAT(stopped.status().message(), HasSubstr(TestPlugin("wrong_major")));
}

TEST(PluginLoaderTest, TheEnvironmentListsPathsSeparatedByColons) {
  ASSERT_EQ(::unsetenv(kAcceleratorPluginsVariable), 0);
  EXPECT_TRUE(AcceleratorPluginPathsFromEnvironment().empty());
  // Empty entries are skipped: they never mean the working directory.
  ASSERT_EQ(::setenv(kAcceleratorPluginsVariable, ":/opt/a/liba.so::./libb.so:", 1), 0);
  EXPECT_THAT(AcceleratorPluginPathsFromEnvironment(), ElementsAre("/opt/a/liba.so", "./libb.so"));
  ASSERT_EQ(::unsetenv(kAcceleratorPluginsVariable), 0);
}

}  // namespace
}  // namespace kiln
