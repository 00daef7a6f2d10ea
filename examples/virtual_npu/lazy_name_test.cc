// The virtual NPU takes its name (c10::register_privateuse1_backend) when it is chosen, not when its library loads:
// LibTorch 2.x takes a named PrivateUse1 device for the process's accelerator, and CUDA's autograd then fails in the
// whole process (hal/compat/privateuse1.h). A program that links this backend beside CUDA and trains on CUDA must
// never name it. Its own binary: the name, once given, stays for the process.
#include "ATen/DeviceAccelerator.h"
#include "ATen/detail/PrivateUse1HooksInterface.h"
#include "c10/core/DeviceType.h"
#include "c10/core/impl/DeviceGuardImplInterface.h"
#include "device.h"
#include "gtest/gtest.h"
#include "hal/device_kit/device_kit.h"
#include "virtual_npu_accelerator.h"

namespace virtual_npu {
namespace {

TEST(LazyNameTest, TheDeviceIsRegisteredAndNamedWhenChosenNotWhenLoaded) {
  // The library's static initialiser (the accelerator's registration) ran before main; the device's did not.
  EXPECT_FALSE(c10::is_privateuse1_backend_registered()) << "loading the backend named its device";
  EXPECT_FALSE(at::isPrivateUse1HooksRegistered()) << "loading the backend registered its runtime hooks";
  EXPECT_FALSE(c10::impl::hasDeviceGuardImpl(kDeviceType)) << "loading the backend registered its device guard";
  EXPECT_NE(at::getAccelerator(), c10::DeviceType::PrivateUse1);

  VirtualNpuAccelerator accelerator;
  EXPECT_TRUE(accelerator.CheckAvailable().ok()) << accelerator.CheckAvailable();
  EXPECT_EQ(accelerator.AutoDeviceCount(), 1);
  EXPECT_FALSE(c10::is_privateuse1_backend_registered()) << "a probe (CheckAvailable, AutoDeviceCount) named it";
  EXPECT_FALSE(at::isPrivateUse1HooksRegistered()) << "a probe registered the device";

  ASSERT_TRUE(accelerator.ParseDevices("auto").ok());
  ASSERT_TRUE(c10::is_privateuse1_backend_registered()) << "choosing the device must name it";
  EXPECT_TRUE(at::isPrivateUse1HooksRegistered());
  EXPECT_TRUE(c10::impl::hasDeviceGuardImpl(kDeviceType));
  EXPECT_EQ(kiln::device_kit::RegisteredName(), kDeviceName);
  EXPECT_EQ(c10::get_privateuse1_backend(), kDeviceName);
  EXPECT_EQ(c10::Device(kDeviceType, 1).str(), std::string(kDeviceName) + ":1");
  // What the laziness avoids, seen from LibTorch: the named device is now the process's accelerator.
  EXPECT_EQ(at::getAccelerator(), c10::DeviceType::PrivateUse1);
}

}  // namespace
}  // namespace virtual_npu
