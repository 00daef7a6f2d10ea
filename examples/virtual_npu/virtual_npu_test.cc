// The virtual NPU's own tests: the device computes (and matches the CPU exactly), its allocator counts what it
// hands out, and the accelerator reports those numbers. Kiln's conformance suite runs separately
// (:conformance_test).
#include <chrono>
#include <sstream>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/device_kit/device_kit.h"
#include "hal/registry.h"
#include "torch/nn/modules/linear.h"
#include "torch/serialize/input-archive.h"
#include "torch/serialize/output-archive.h"
#include "virtual_npu_accelerator.h"

namespace virtual_npu {
namespace {

using ::kiln::device_kit::CpuFallbackCalls;
using ::kiln::device_kit::DeviceToHostCopies;
using ::kiln::device_kit::GetMemoryStats;
using ::kiln::device_kit::MemoryStats;
using ::testing::HasSubstr;

const c10::Device kNpu0(kDeviceType, 0);
const c10::Device kNpu1(kDeviceType, 1);

// These tests use the device directly, not through the accelerator, which registers it when it is chosen
// (device.h): registered here first, as choosing it would.
const absl::Status kNamed = RegistrationStatus();

TEST(ConfigurationTest, DeviceCountAndPriorityComeFromTheEnvironment) {
  EXPECT_EQ(*ParseDeviceCount(nullptr), 2);
  EXPECT_EQ(*ParseDeviceCount(""), 2);
  EXPECT_EQ(*ParseDeviceCount("5"), 5);
  EXPECT_EQ(*ParseDeviceCount("64"), 64);
  for (const char* bad : {"0", "-1", "65", "two", "2x"}) {
    SCOPED_TRACE(bad);
    absl::StatusOr<int> count = ParseDeviceCount(bad);
    ASSERT_FALSE(count.ok());
    EXPECT_THAT(count.status().message(), HasSubstr(absl::StrCat("VIRTUAL_NPU_DEVICES='", bad, "'")));
    EXPECT_THAT(count.status().message(), HasSubstr("from 1 to 64"));
  }
  EXPECT_EQ(*ParseMemoryLimit(nullptr), 0) << "unset: no limit";
  EXPECT_EQ(*ParseMemoryLimit(""), 0);
  EXPECT_EQ(*ParseMemoryLimit("1048576"), 1048576);
  for (const char* bad : {"0", "-5", "1G", "lots"}) {
    SCOPED_TRACE(bad);
    absl::StatusOr<int64_t> limit = ParseMemoryLimit(bad);
    ASSERT_FALSE(limit.ok());
    EXPECT_THAT(limit.status().message(), HasSubstr(absl::StrCat("VIRTUAL_NPU_MEMORY_LIMIT='", bad, "'")));
    EXPECT_THAT(limit.status().message(), HasSubstr("integer >= 1"));
  }
  EXPECT_EQ(*ParsePriority(nullptr), -10);
  EXPECT_EQ(*ParsePriority("100"), 100);
  EXPECT_EQ(*ParsePriority("-3"), -3);
  EXPECT_THAT(ParsePriority("high").status().message(), HasSubstr("VIRTUAL_NPU_PRIORITY='high' is not an integer"));
}

TEST(RegistrationTest, RegistersWithItsAliasAndDefaultPriority) {
  absl::StatusOr<kiln::AcceleratorSpec> spec = kiln::AcceleratorRegistry::Default().Find("vnpu");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "virtual_npu");
  EXPECT_EQ(spec->priority, -10) << "the test runs without VIRTUAL_NPU_PRIORITY";
  EXPECT_EQ(c10::impl::getDeviceGuardImpl(kDeviceType)->deviceCount(), 2);
}

TEST(DeviceTest, TensorsLiveOnTheDeviceAndComputeLikeTheCpu) {
  const at::Tensor cpu = at::arange(12, at::kFloat).reshape({3, 4});
  const at::Tensor npu = cpu.to(kNpu0);
  EXPECT_EQ(npu.device(), kNpu0);
  EXPECT_EQ(npu.sizes(), cpu.sizes());
  EXPECT_NE(npu.data_ptr(), cpu.data_ptr()) << "to(device) must copy into the device's memory";

  // Views share the device tensor's storage: transposes, slices, view and reshape.
  const at::Tensor transposed = npu.t();
  EXPECT_EQ(transposed.device(), kNpu0);
  EXPECT_EQ(transposed.storage().data(), npu.storage().data());
  EXPECT_TRUE(at::equal(transposed.to(at::kCPU), cpu.t()));
  EXPECT_TRUE(at::equal(npu.slice(1, 1, 3).to(at::kCPU), cpu.slice(1, 1, 3)));
  EXPECT_TRUE(at::equal(npu.view({4, 3}).to(at::kCPU), cpu.view({4, 3})));
  EXPECT_TRUE(at::equal(npu.t().reshape({12}).to(at::kCPU), cpu.t().reshape({12})));

  // Operators run through the CPU fallback, in place and out of place, and results stay on the device.
  const int64_t fallback_before = CpuFallbackCalls();
  at::Tensor result = at::matmul(npu, npu.t()).relu_();
  EXPECT_EQ(result.device(), kNpu0);
  EXPECT_TRUE(at::equal(result.to(at::kCPU), at::matmul(cpu, cpu.t()).relu_()));
  EXPECT_GT(CpuFallbackCalls(), fallback_before);
  at::Tensor copied = at::empty({3, 4}, at::TensorOptions().dtype(at::kDouble).device(kNpu0));
  copied.copy_(npu);  // npu -> npu, float -> double
  EXPECT_TRUE(at::equal(copied.to(at::kCPU), cpu.to(at::kDouble)));
  copied.resize_({20});
  EXPECT_EQ(copied.numel(), 20);
  EXPECT_EQ(copied.device(), kNpu0);
}

TEST(DeviceTest, AutogradAndModulesMatchTheCpuExactly) {
  torch::manual_seed(7);
  torch::nn::Linear cpu_layer(5, 3);
  torch::nn::Linear npu_layer(5, 3);
  {
    torch::NoGradGuard no_grad;
    npu_layer->weight.copy_(cpu_layer->weight);
    npu_layer->bias.copy_(cpu_layer->bias);
  }
  npu_layer->to(kNpu1);
  EXPECT_EQ(npu_layer->weight.device(), kNpu1) << "module->to(device) must move the parameters in place";
  const at::Tensor input = at::randn({8, 5});
  const at::Tensor cpu_loss = cpu_layer->forward(input).pow(2).mean();
  const at::Tensor npu_loss = npu_layer->forward(input.to(kNpu1)).pow(2).mean();
  cpu_loss.backward();
  npu_loss.backward();
  EXPECT_EQ(npu_layer->weight.grad().device(), kNpu1);
  EXPECT_EQ(npu_loss.item<float>(), cpu_loss.item<float>());
  EXPECT_TRUE(at::equal(npu_layer->weight.grad().to(at::kCPU), cpu_layer->weight.grad()));
  EXPECT_TRUE(at::equal(npu_layer->bias.grad().to(at::kCPU), cpu_layer->bias.grad()));
}

TEST(AllocatorTest, CountsBytesInUseAndPeakPerDevice) {
  VirtualNpuAccelerator accelerator;
  ASSERT_TRUE(accelerator.SetupDevice(kiln::LogicalDeviceOf(accelerator, kNpu1)).ok());  // Resets device 1's peak.
  const MemoryStats before = GetMemoryStats(1);
  const MemoryStats other_before = GetMemoryStats(0);
  {
    at::Tensor a = at::empty({1000}, at::TensorOptions().dtype(at::kFloat).device(kNpu1));
    at::Tensor b = at::empty({250}, at::TensorOptions().dtype(at::kDouble).device(kNpu1));
    const MemoryStats during = GetMemoryStats(1);
    EXPECT_EQ(during.allocated_bytes - before.allocated_bytes, 4000 + 2000);
    EXPECT_EQ(during.active_blocks - before.active_blocks, 2);
    EXPECT_EQ(during.peak_allocated_bytes, during.allocated_bytes);

    absl::StatusOr<kiln::DeviceStats> stats = accelerator.GetDeviceStats(kiln::LogicalDeviceOf(accelerator, kNpu1));
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->at("memory_allocated_bytes"), static_cast<double>(during.allocated_bytes));
    EXPECT_EQ(stats->at("memory_allocated_peak_bytes"), static_cast<double>(during.peak_allocated_bytes));
    EXPECT_EQ(stats->at("memory_active_blocks"), static_cast<double>(during.active_blocks));
    EXPECT_EQ(stats->at("memory_total_blocks"), static_cast<double>(during.total_blocks));
    EXPECT_EQ(stats->count("cpu_fallback_calls"), 1u);
    EXPECT_EQ(stats->at("device_to_host_copies"), static_cast<double>(DeviceToHostCopies()));
  }
  const MemoryStats after = GetMemoryStats(1);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes) << "freed tensors must give their bytes back";
  EXPECT_EQ(after.peak_allocated_bytes - before.allocated_bytes, 6000) << "the peak remembers both tensors";
  EXPECT_EQ(after.total_blocks - before.total_blocks, 2);
  EXPECT_EQ(GetMemoryStats(0).total_blocks, other_before.total_blocks) << "device 0 allocated nothing";
  ASSERT_TRUE(accelerator.SetupDevice(kiln::LogicalDeviceOf(accelerator, kNpu1)).ok());
  EXPECT_EQ(GetMemoryStats(1).peak_allocated_bytes, after.allocated_bytes) << "set-up resets the peak";
  EXPECT_TRUE(accelerator.TeardownDevice(kiln::LogicalDeviceOf(accelerator, kNpu1)).ok());
}

TEST(DeviceTest, CountsTheHostsReadsOfItsMemoryAndNotTheFallbacksCopies) {
  const int64_t start = DeviceToHostCopies();
  const at::Tensor host = at::arange(4, at::kFloat);
  const at::Tensor on_device = host.to(kNpu1);       // Host to device: not a read.
  const at::Tensor sum = (on_device * 2 + 1).sum();  // Through the fallback, which copies to the CPU and back.
  EXPECT_EQ(DeviceToHostCopies(), start) << "writing to the device and computing on it read nothing";
  EXPECT_EQ(sum.item<float>(), 16.0f);
  EXPECT_EQ(DeviceToHostCopies(), start + 1) << "item() reads the device";
  EXPECT_TRUE(at::equal(on_device.to(at::kCPU), host));
  EXPECT_EQ(DeviceToHostCopies(), start + 2) << "a copy to the CPU reads the device";
}

// The device carries the backend's name (c10::register_privateuse1_backend) in everything LibTorch prints and parses.
TEST(DeviceTest, Name) {
  EXPECT_TRUE(kNamed.ok()) << kNamed;
  const std::string name = kDeviceName;
  EXPECT_EQ(c10::Device(kDeviceType, 1).str(), name + ":1");
  EXPECT_EQ(c10::Device(name + ":1"), c10::Device(kDeviceType, 1));
  std::ostringstream printed;
  printed << at::ones({1}, at::TensorOptions().device(c10::Device(kDeviceType, 0))).device();
  EXPECT_EQ(printed.str(), name + ":0");
}

TEST(AcceleratorTest, RefusesDevicesItDoesNotHave) {
  VirtualNpuAccelerator accelerator;
  EXPECT_EQ(accelerator.AutoDeviceCount(), 1);
  EXPECT_EQ(*accelerator.ParseDevices("auto"), (std::vector<int>{0}));
  EXPECT_EQ(*accelerator.ParseDevices(-1), (std::vector<int>{0, 1}));
  EXPECT_EQ(*accelerator.ParseDevices("1,"), (std::vector<int>{1}));
  absl::StatusOr<std::vector<int>> beyond = accelerator.ParseDevices(3);
  ASSERT_FALSE(beyond.ok());
  EXPECT_THAT(beyond.status().message(), HasSubstr("3 virtual_npu devices requested, but only 2 are visible"));
  EXPECT_THAT(beyond.status().message(), HasSubstr("VIRTUAL_NPU_DEVICES=unset (2 devices)"));
  const c10::Device missing(kDeviceType, 2);
  absl::Status setup = accelerator.SetupDevice(kiln::LogicalDeviceOf(accelerator, missing));
  EXPECT_EQ(setup.code(), absl::StatusCode::kInvalidArgument);
  const std::string name = "virtual_npu";
  EXPECT_THAT(setup.message(), HasSubstr("'" + name + ":2' is not a virtual_npu device; this process has 2 (" + name +
                                         ":0 to " + name + ":1"));
  EXPECT_FALSE(accelerator.GetDeviceStats(kiln::LogicalDeviceOf(accelerator, c10::Device(c10::DeviceType::CPU))).ok());
  EXPECT_THROW(at::empty({1}, at::TensorOptions().device(missing)), c10::Error);
}

// The device's own trace (Accelerator::StartDeviceTrace/StopDeviceTrace, which the pytorch profiler merges into its
// trace): the copies made while it records, each named as CUDA's traces name it and stamped within the time they were
// made; nothing before StartDeviceTrace or after StopDeviceTrace, and nothing of the other device.
TEST(AcceleratorTest, TracesTheCopiesOfItsDeviceWhileAsked) {
  VirtualNpuAccelerator accelerator;
  const kiln::LogicalDevice npu1 = kiln::LogicalDeviceOf(accelerator, kNpu1);
  ASSERT_TRUE(accelerator.SetupDevice(npu1).ok());
  const at::Tensor host = at::randn({16, 8});
  const at::Tensor untraced = host.to(kNpu1);  // Before the trace: not recorded.
  const auto now_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  ASSERT_TRUE(accelerator.StartDeviceTrace(npu1).ok());
  const int64_t before = now_ns();
  const at::Tensor on_device = host.to(kNpu1);
  const at::Tensor other_device = host.to(kNpu0);  // Device 0 does not trace.
  const at::Tensor back = on_device.to(at::kCPU);
  const int64_t after = now_ns();
  absl::StatusOr<std::vector<kiln::DeviceTraceEvent>> events = accelerator.StopDeviceTrace(npu1);
  ASSERT_TRUE(events.ok()) << events.status();
  const at::Tensor after_trace = host.to(kNpu1);  // After it: not recorded.
  EXPECT_TRUE(at::equal(back, host));
  std::vector<std::string> names;
  for (const kiln::DeviceTraceEvent& event : *events) {
    names.push_back(event.name);
    EXPECT_EQ(event.category, "gpu_memcpy");
    EXPECT_EQ(event.device_index, 1);
    EXPECT_GE(event.start_ns, before);
    EXPECT_GE(event.duration_ns, 0);
    EXPECT_LE(event.start_ns + event.duration_ns, after);
  }
  EXPECT_THAT(names, ::testing::ElementsAre("Memcpy HtoD", "Memcpy DtoH"));
  // Stopped, it records nothing more: a new trace starts empty.
  ASSERT_TRUE(accelerator.StartDeviceTrace(npu1).ok());
  events = accelerator.StopDeviceTrace(npu1);
  ASSERT_TRUE(events.ok());
  EXPECT_TRUE(events->empty());
  // A device this process does not have is refused, naming it.
  const absl::Status missing =
      accelerator.StartDeviceTrace(kiln::LogicalDeviceOf(accelerator, c10::Device(kDeviceType, 2)));
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(accelerator.TeardownDevice(npu1).ok());
}

TEST(SerializationTest, DeviceTensorsSaveAndLoadLikeCheckpointsDo) {
  const at::Tensor cpu = at::randn({4, 3});
  std::ostringstream bytes;
  {
    torch::serialize::OutputArchive archive;
    archive.write("t", cpu.to(kNpu0), /*is_buffer=*/true);
    archive.save_to(bytes);
  }
  // LibTorch restores them straight onto the named device; Kiln's trainer loads with the CPU as the map location, so
  // that a checkpoint loads on a machine without the device, which must work too.
  {
    torch::serialize::InputArchive archive;
    std::istringstream input(bytes.str());
    archive.load_from(input);
    at::Tensor loaded;
    archive.read("t", loaded, /*is_buffer=*/true);
    EXPECT_EQ(loaded.device(), kNpu0);
    EXPECT_TRUE(at::equal(loaded.to(at::kCPU), cpu));
  }
  torch::serialize::InputArchive archive;
  std::istringstream input(bytes.str());
  archive.load_from(input, c10::Device(c10::DeviceType::CPU));
  at::Tensor loaded;
  archive.read("t", loaded, /*is_buffer=*/true);
  EXPECT_TRUE(loaded.is_cpu());
  EXPECT_TRUE(at::equal(loaded, cpu));
}

}  // namespace
}  // namespace virtual_npu
