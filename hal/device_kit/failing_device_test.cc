// A device that cannot allocate: Register says the device's own failure, not a registration-order one (the one
// backward pass Register runs on it is where it shows).
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "hal/device_kit/device_kit.h"

namespace kiln::device_kit {
namespace {

// A fake device (this machine has no out-of-tree hardware) whose memory is always full.
class FullDevice final : public Device {
 public:
  std::string Name() const override { return "full_npu"; }
  int Count() const noexcept override { return 1; }
  void* Allocate(int index, size_t bytes) override { return nullptr; }
  void Free(int index, void* data) noexcept override {}
  void Copy(void* dst, const void* src, size_t bytes, CopyKind kind, int index) override {}
};

TEST(FailingDeviceTest, RegisterSaysTheDevicesOwnFailure) {
  const std::string error = Register(std::make_shared<FullDevice>());
  EXPECT_NE(error.find("one backward pass on full_npu:0 failed: full_npu:0 is out of memory"), std::string::npos)
      << error;
  EXPECT_EQ(error.find("first backward pass"), std::string::npos) << error;
  EXPECT_EQ(error.find("Exception raised from"), std::string::npos) << "no backtrace in a user's error: " << error;
}

}  // namespace
}  // namespace kiln::device_kit
