// A device registered after the process's first backward pass: LibTorch's autograd engine sized its device queues
// without it, so Register says so instead of leaving every later backward to fail inside autograd.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "ATen/ATen.h"
#include "gtest/gtest.h"
#include "hal/device_kit/device_kit.h"

namespace kiln::device_kit {
namespace {

// A fake device in host memory (this machine has no out-of-tree hardware).
class HostDevice final : public Device {
 public:
  std::string Name() const override { return "late_npu"; }
  int Count() const noexcept override { return 1; }
  void* Allocate(int index, size_t bytes) override { return std::malloc(bytes); }
  void Free(int index, void* data) noexcept override { std::free(data); }
  void Copy(void* dst, const void* src, size_t bytes, CopyKind kind, int index) override {
    std::memmove(dst, src, bytes);
  }
};

TEST(LateRegistrationTest, ADeviceRegisteredAfterTheFirstBackwardPassIsReportedUnusable) {
  at::Tensor weight = at::ones({2}).requires_grad_();
  (weight * 3).sum().backward();  // The process's first backward pass, on the CPU.
  ASSERT_TRUE(weight.grad().defined());

  const auto device = std::make_shared<HostDevice>();
  const std::string error = Register(device);
  EXPECT_NE(error.find("registered after this process's first backward pass"), std::string::npos) << error;
  EXPECT_NE(error.find("choose its accelerator) before the process first trains"), std::string::npos) << error;
  EXPECT_EQ(Register(device), error) << "a later call must say the same";
  EXPECT_EQ(RegisteredName(), "late_npu");

  // The CPU's autograd is untouched.
  at::Tensor other = at::ones({2}).requires_grad_();
  (other * 2).sum().backward();
  EXPECT_TRUE(at::equal(other.grad(), at::full({2}, 2.0)));
}

}  // namespace
}  // namespace kiln::device_kit
