// The kit against a device whose memory the host cannot read as tensors: ScrambledDevice keeps every byte inverted,
// so any path that read or wrote device memory other than through Device::Copy would give wrong numbers here.
#include "hal/device_kit/device_kit.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "ATen/ATen.h"
#include "ATen/autocast_mode.h"
#include "c10/core/DeviceGuard.h"
#include "gtest/gtest.h"
#include "torch/nn/modules/linear.h"

namespace kiln::device_kit {
namespace {

constexpr size_t kMemoryLimit = 64 << 20;  // Per device, to show out-of-memory errors.

// A fake device (this machine has no out-of-tree hardware): two devices in host memory holding each byte inverted.
class ScrambledDevice final : public Device {
 public:
  std::string Name() const override { return "kit_test_npu"; }
  int Count() const noexcept override { return 2; }
  void* Allocate(int index, size_t bytes) override { return bytes > kMemoryLimit ? nullptr : std::malloc(bytes); }
  void Free(int index, void* data) noexcept override { std::free(data); }
  void Copy(void* dst, const void* src, size_t bytes, CopyKind kind, int index) override {
    auto* out = static_cast<unsigned char*>(dst);
    const auto* in = static_cast<const unsigned char*>(src);
    if (kind == CopyKind::kDeviceToDevice) {
      std::memmove(out, in, bytes);
      return;
    }
    for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(~in[i]);
  }
  void SetCurrent(int index) override { current = index; }
  int64_t MemoryCapacity(int index) const noexcept override { return static_cast<int64_t>(kMemoryLimit); }
  int current = -1;
};

std::shared_ptr<ScrambledDevice>& TheDevice() {
  static auto* const device = new std::shared_ptr<ScrambledDevice>(std::make_shared<ScrambledDevice>());
  return *device;
}

class DeviceKitTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(CheckCanRegister("kit_test_npu"), "");
    ASSERT_EQ(Register(TheDevice()), "");
  }
  const c10::Device device0{c10::DeviceType::PrivateUse1, 0};
  const c10::Device device1{c10::DeviceType::PrivateUse1, 1};
};

TEST_F(DeviceKitTest, RegistersOnceAndRefusesASecondDeviceNamingBoth) {
  EXPECT_EQ(PrivateUse1Name(), "kit_test_npu");
  EXPECT_EQ(RegisteredName(), "kit_test_npu");
  EXPECT_EQ(Register(TheDevice()), "");  // The same object again.
  const std::string twice = Register(std::make_shared<ScrambledDevice>());
  EXPECT_NE(twice.find("twice"), std::string::npos) << twice;
  const std::string other = CheckCanRegister("acme_npu");
  EXPECT_NE(other.find("'acme_npu'"), std::string::npos) << other;
  EXPECT_NE(other.find("'kit_test_npu'"), std::string::npos) << other;
  EXPECT_EQ(CheckCanRegister("kit_test_npu"), "");
}

TEST_F(DeviceKitTest, CopiesEveryLayoutAndDtypeThroughTheDevice) {
  const at::Tensor host = at::randn({5, 7});
  const at::Tensor on_device = host.to(device0);
  EXPECT_EQ(on_device.device(), device0);
  EXPECT_TRUE(at::equal(on_device.cpu(), host));
  // Non-contiguous both ways, a dtype change on the way, a broadcast into a device tensor.
  EXPECT_TRUE(at::equal(on_device.t().cpu(), host.t()));
  EXPECT_TRUE(at::equal(host.t().to(device0).cpu(), host.t()));
  EXPECT_TRUE(at::equal(host.to(device0, at::kDouble).cpu(), host.to(at::kDouble)));
  at::Tensor target = at::zeros({5, 7}, at::TensorOptions().device(device0));
  target.t().copy_(host.t());
  EXPECT_TRUE(at::equal(target.cpu(), host));
  at::Tensor rows = at::zeros({3, 7}, at::TensorOptions().device(device0));
  rows.copy_(host[0]);
  EXPECT_TRUE(at::equal(rows.cpu(), host[0].expand({3, 7})));
  // Device to device: on one device, between devices, into a strided slice.
  EXPECT_TRUE(at::equal(on_device.clone().cpu(), host));
  EXPECT_TRUE(at::equal(on_device.to(device1).cpu(), host));
  at::Tensor wide = at::zeros({5, 14}, at::TensorOptions().device(device0));
  wide.narrow(1, 7, 7).copy_(on_device);
  EXPECT_TRUE(at::equal(wide.cpu().narrow(1, 7, 7), host));
  EXPECT_EQ(wide.cpu().narrow(1, 0, 7).abs().sum().item<float>(), 0.0f);
}

TEST_F(DeviceKitTest, OperatorsWithoutKernelsGiveTheCpusNumbers) {
  const at::Tensor a = at::randn({4, 6});
  const at::Tensor b = at::randn({6, 3});
  const at::Tensor expected = (at::mm(a, b) * 2 + 1).relu().sum(0);
  const at::Tensor got = (at::mm(a.to(device0), b.to(device0)) * 2 + 1).relu().sum(0);
  EXPECT_EQ(got.device(), device0);
  EXPECT_TRUE(at::equal(got.cpu(), expected));
  const int64_t reads = DeviceToHostCopies();
  EXPECT_FLOAT_EQ(got.sum().item<float>(), expected.sum().item<float>());
  EXPECT_EQ(DeviceToHostCopies(), reads + 1) << "item() reads the device once";
  EXPECT_GT(CpuFallbackCalls(), 0);
  // In place, views and resize_ keep the device's memory right.
  at::Tensor x = a.to(device0);
  x.view({24}).mul_(3);
  EXPECT_TRUE(at::equal(x.cpu(), a * 3));
  x.resize_({8, 6});
  EXPECT_TRUE(at::equal(x.cpu().narrow(0, 0, 4), a * 3));
}

TEST_F(DeviceKitTest, TrainsAModuleAsOnTheCpu) {
  torch::manual_seed(1);
  torch::nn::Linear cpu(4, 2);
  torch::nn::Linear on_device(4, 2);
  torch::NoGradGuard no_grad;
  on_device->weight.copy_(cpu->weight);
  on_device->bias.copy_(cpu->bias);
  on_device->to(device1);
  EXPECT_EQ(on_device->weight.device(), device1);
  at::Tensor input = at::randn({3, 4});
  {
    at::AutoGradMode grad(true);
    cpu->forward(input).pow(2).sum().backward();
    on_device->forward(input.to(device1)).pow(2).sum().backward();
  }
  EXPECT_TRUE(at::equal(on_device->weight.grad().cpu(), cpu->weight.grad()));
  EXPECT_TRUE(at::equal(on_device->bias.grad().cpu(), cpu->bias.grad()));
}

TEST_F(DeviceKitTest, CountsMemoryPerDevice) {
  ResetPeakMemoryStats(1);
  const MemoryStats before = GetMemoryStats(1);
  {
    at::Tensor t = at::empty({1000}, at::TensorOptions().device(device1));
    const MemoryStats during = GetMemoryStats(1);
    EXPECT_EQ(during.allocated_bytes, before.allocated_bytes + 4000);
    EXPECT_EQ(during.active_blocks, before.active_blocks + 1);
    EXPECT_EQ(during.total_blocks, before.total_blocks + 1);
  }
  const MemoryStats after = GetMemoryStats(1);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(after.peak_allocated_bytes, before.allocated_bytes + 4000);
  ResetPeakMemoryStats(1);
  EXPECT_EQ(GetMemoryStats(1).peak_allocated_bytes, after.allocated_bytes);
  // DeviceStatistics: the counters by Kiln's names, and the capacity the device reports.
  std::map<std::string, double> statistics;
  for (const Statistic& statistic : DeviceStatistics(1)) statistics[statistic.name] = statistic.value;
  EXPECT_EQ(statistics.at("memory_allocated_bytes"), static_cast<double>(GetMemoryStats(1).allocated_bytes));
  EXPECT_EQ(statistics.at("memory_total_blocks"), static_cast<double>(GetMemoryStats(1).total_blocks));
  EXPECT_EQ(statistics.at("memory_total_bytes"), static_cast<double>(kMemoryLimit));
  EXPECT_EQ(statistics.count("cpu_fallback_calls"), 1u);
}

TEST_F(DeviceKitTest, GuardSelectsTheDeviceAndFactoriesUseIt) {
  {
    c10::DeviceGuard guard(device1);
    EXPECT_EQ(CurrentDevice(), 1);
    EXPECT_EQ(TheDevice()->current, 1);
    EXPECT_EQ(at::empty({2}, at::TensorOptions().device(c10::DeviceType::PrivateUse1)).device(), device1);
  }
  EXPECT_EQ(CurrentDevice(), 0);
}

TEST_F(DeviceKitTest, BadDevicesAndOutOfMemoryAreErrorsNamingThem) {
  try {
    (void)at::empty({2}, at::TensorOptions().device(c10::Device(c10::DeviceType::PrivateUse1, 5)));
    ADD_FAILURE() << "device 5 of 2 was accepted";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("kit_test_npu:5"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("kit_test_npu:1"), std::string::npos) << error.what();
  }
  try {
    (void)at::empty({static_cast<int64_t>(kMemoryLimit)}, at::TensorOptions().device(device0));
    ADD_FAILURE() << "more than the device's memory was allocated";
  } catch (const c10::OutOfMemoryError& error) {
    EXPECT_NE(std::string(error.what()).find("kit_test_npu:0 is out of memory"), std::string::npos) << error.what();
  }
}

TEST_F(DeviceKitTest, AutocastCastsMatrixProductsToTheLowerPrecision) {
  const at::Tensor a = at::randn({4, 4}).to(device0);
  at::autocast::set_autocast_enabled(c10::DeviceType::PrivateUse1, true);
  at::autocast::set_autocast_dtype(c10::DeviceType::PrivateUse1, at::kBFloat16);
  const at::Tensor product = at::mm(a, a);
  at::autocast::set_autocast_enabled(c10::DeviceType::PrivateUse1, false);
  at::autocast::clear_cache();
  EXPECT_EQ(product.scalar_type(), at::kBFloat16);
}

}  // namespace
}  // namespace kiln::device_kit
