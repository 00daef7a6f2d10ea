// Two device plugins in one process, loaded through Kiln's plugin loader: the same source built as alpha_npu and
// beta_npu (build.sh), each with its own copy of Kiln's device kit. LibTorch has one PrivateUse1 device per process.
// Loading registers nothing; the first device chosen is registered, by Kiln calling its Device_Register; the second is
// refused before any of it is registered, naming both. Its own binary: a registration lasts as long as the process.
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "ATen/detail/PrivateUse1HooksInterface.h"
#include "absl/strings/str_cat.h"
#include "c10/core/DeviceType.h"
#include "c10/core/impl/DeviceGuardImplInterface.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/accelerator.h"
#include "hal/device_kit/device_kit.h"
#include "hal/plugin/plugin_accelerator.h"
#include "hal/plugin/plugin_loader.h"
#include "hal/registry.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

// Paths as Bazel lays out the test's runfiles (the working directory is the workspace's runfiles root).
constexpr char kAlpha[] = "examples/device_plugin/libalpha_npu_plugin.so";
constexpr char kBeta[] = "examples/device_plugin/libbeta_npu_plugin.so";

std::shared_ptr<PluginAccelerator> Load(AcceleratorRegistry& registry, const std::string& path) {
  absl::StatusOr<PluginInfo> info = LoadAcceleratorPlugin(path, registry);
  EXPECT_TRUE(info.ok()) << info.status();
  if (!info.ok()) return nullptr;
  absl::StatusOr<std::shared_ptr<Accelerator>> accelerator = registry.Get(info->name);
  EXPECT_TRUE(accelerator.ok()) << accelerator.status();
  return accelerator.ok() ? std::dynamic_pointer_cast<PluginAccelerator>(*accelerator) : nullptr;
}

// The plugin's own count of its Device_Register calls, through Device_Stats (which never registers).
double RegisterCalls(const PluginAccelerator& plugin) {
  const LogicalDevice device = LogicalDeviceOf(plugin, c10::Device(c10::DeviceType::PrivateUse1, 0));
  absl::StatusOr<DeviceStats> stats = plugin.GetDeviceStats(device);
  EXPECT_TRUE(stats.ok()) << stats.status();
  return stats.ok() ? stats->at("register_calls") : -1;
}

// What this process's LibTorch has registered for PrivateUse1, as one line for comparisons.
std::string LibTorchState() {
  const bool named = c10::is_privateuse1_backend_registered();
  return absl::StrCat("named=", named ? c10::get_privateuse1_backend() : "(no)",
                      " hooks=", at::isPrivateUse1HooksRegistered(),
                      " guard=", c10::impl::hasDeviceGuardImpl(c10::DeviceType::PrivateUse1));
}

TEST(TwoDevicePluginsTest, TheFirstChosenIsRegisteredAndTheSecondIsRefusedNamingBoth) {
  AcceleratorRegistry registry;
  std::shared_ptr<PluginAccelerator> alpha = Load(registry, kAlpha);
  std::shared_ptr<PluginAccelerator> beta = Load(registry, kBeta);
  ASSERT_NE(alpha, nullptr);
  ASSERT_NE(beta, nullptr);
  // The version of the header it was built with (1.2 introduced registration when chosen).
  EXPECT_EQ(alpha->info().api_version, absl::StrCat(KILN_PLUGIN_API_MAJOR, ".", KILN_PLUGIN_API_MINOR));
  EXPECT_EQ(alpha->info().device_name, "alpha_npu");
  EXPECT_EQ(beta->info().device_name, "beta_npu");

  // Both libraries are loaded (their static initialisers ran) and nothing is registered with LibTorch: each waits to
  // be chosen. Probing them (counting, availability, statistics) registers nothing either.
  EXPECT_EQ(LibTorchState(), "named=(no) hooks=0 guard=0");
  EXPECT_EQ(alpha->AutoDeviceCount(), 2);
  EXPECT_TRUE(alpha->CheckAvailable().ok()) << alpha->CheckAvailable();
  EXPECT_TRUE(beta->CheckAvailable().ok()) << beta->CheckAvailable();
  EXPECT_EQ(RegisterCalls(*alpha), 0);
  EXPECT_EQ(RegisterCalls(*beta), 0);
  EXPECT_EQ(LibTorchState(), "named=(no) hooks=0 guard=0");
  EXPECT_EQ(device_kit::RegisteredName(), "");

  // Choosing alpha registers it, once, and Kiln's own copy of the kit records who holds PrivateUse1.
  absl::StatusOr<std::vector<int>> indices = alpha->ParseDevices(-1);
  ASSERT_TRUE(indices.ok()) << indices.status();
  EXPECT_EQ(LibTorchState(), "named=alpha_npu hooks=1 guard=1");
  EXPECT_EQ(device_kit::RegisteredName(), "alpha_npu");
  const std::vector<LogicalDevice> devices = LogicalDevices(*alpha, *indices);
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[1].compute.str(), "alpha_npu:1");
  for (const LogicalDevice& device : devices) ASSERT_TRUE(alpha->SetupDevice(device).ok()) << device.ToString();
  EXPECT_TRUE(alpha->CheckAvailable().ok()) << alpha->CheckAvailable();
  EXPECT_EQ(RegisterCalls(*alpha), 1);

  // Tensors on alpha_npu:1 compute as on the CPU (through the CPU's kernels), and its statistics count their bytes.
  const at::Tensor a = at::randn({16, 8});
  const at::Tensor b = at::randn({8, 4});
  const at::Tensor on_device = at::matmul(a.to(c10::Device("alpha_npu:1")), b.to(c10::Device("alpha_npu:1"))).relu();
  EXPECT_EQ(on_device.device().str(), "alpha_npu:1");
  EXPECT_TRUE(at::equal(on_device.cpu(), at::matmul(a, b).relu()));
  absl::StatusOr<DeviceStats> stats = alpha->GetDeviceStats(devices[1]);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_GE(stats->at("memory_allocated_bytes"), 16 * 4 * sizeof(float));
  EXPECT_GE(stats->at("memory_total_blocks"), 3);
  EXPECT_GT(stats->at("cpu_fallback_calls"), 0);

  // Beta, chosen or set up now, is refused before anything of it is registered: the error names both devices and
  // both plugins, and says what to do; Kiln never calls beta's Device_Register.
  const LogicalDevice beta_device = LogicalDeviceOf(*beta, c10::Device(c10::DeviceType::PrivateUse1, 0));
  for (const absl::Status& refused : {beta->ParseDevices(1).status(), beta->SetupDevice(beta_device),
                                      beta->CheckAvailable()}) {
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
    EXPECT_THAT(refused.message(), HasSubstr(absl::StrCat("accelerator plugin '", kBeta, "'")));
    EXPECT_THAT(refused.message(), HasSubstr("cannot register the out-of-tree device 'beta_npu'"));
    EXPECT_THAT(refused.message(), HasSubstr(absl::StrCat("device is 'alpha_npu' already (accelerator plugin ", kAlpha,
                                                          ")")));
    EXPECT_THAT(refused.message(), HasSubstr("use one of the two in a process"));
  }
  // Listing beta's devices tries to register it too, and is refused the same way.
  EXPECT_EQ(beta->ParallelDevices({0}).size(), 1u);
  EXPECT_EQ(RegisterCalls(*beta), 0) << "Kiln called the refused plugin's Device_Register";
  EXPECT_EQ(LibTorchState(), "named=alpha_npu hooks=1 guard=1");
  EXPECT_EQ(device_kit::RegisteredName(), "alpha_npu");

  // Alpha, chosen again (another run's plan, the same process), is not registered again, and still computes.
  ASSERT_TRUE(alpha->ParseDevices(1).ok());
  ASSERT_TRUE(alpha->SetupDevice(devices[0]).ok());
  EXPECT_EQ(RegisterCalls(*alpha), 1);
  EXPECT_TRUE(at::equal((a.to(c10::Device("alpha_npu:0")) * 2).cpu(), a * 2));
  for (const LogicalDevice& device : devices) EXPECT_TRUE(alpha->TeardownDevice(device).ok()) << device.ToString();
}

}  // namespace
}  // namespace kiln
