#include "hal/compat/autocast.h"

#include "ATen/ops/matmul.h"
#include "ATen/ops/ones.h"
#include "gtest/gtest.h"

namespace kiln::compat {
namespace {

TEST(AutocastTest, DeviceTypes) {
  EXPECT_TRUE(HasAutocast(c10::DeviceType::CPU));
  EXPECT_TRUE(HasAutocast(c10::DeviceType::CUDA));
  EXPECT_FALSE(HasAutocast(c10::DeviceType::Meta));
  EXPECT_TRUE(HasAutocast(c10::DeviceType::HPU));
  EXPECT_TRUE(HasAutocast(c10::DeviceType::PrivateUse1));
  EXPECT_TRUE(HasAutocastType(c10::DeviceType::CPU, c10::kHalf));
  EXPECT_TRUE(HasAutocastType(c10::DeviceType::CPU, c10::kBFloat16));
  EXPECT_FALSE(HasAutocastType(c10::DeviceType::CPU, c10::kFloat));
  EXPECT_EQ(AutocastDeviceTypes().find("cpu, cuda"), 0u) << AutocastDeviceTypes();
}

// The switch really is LibTorch's: a CPU matrix product under it comes out in the type set, and not after.
TEST(AutocastTest, SwitchCastsCpuMatrixProducts) {
  const AutocastState before = GetAutocast(c10::DeviceType::CPU);
  EXPECT_FALSE(before.enabled);
  const at::Tensor a = at::ones({4, 4});
  for (c10::ScalarType dtype : {c10::kBFloat16, c10::kHalf}) {
    SetAutocast(c10::DeviceType::CPU, {.enabled = true, .dtype = dtype});
    EXPECT_TRUE(GetAutocast(c10::DeviceType::CPU).enabled);
    EXPECT_EQ(GetAutocast(c10::DeviceType::CPU).dtype, dtype);
    EXPECT_EQ(at::matmul(a, a).scalar_type(), dtype);
    SetAutocast(c10::DeviceType::CPU, before);
    EXPECT_EQ(at::matmul(a, a).scalar_type(), c10::kFloat);
  }
}

}  // namespace
}  // namespace kiln::compat
