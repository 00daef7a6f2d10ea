#include "hal/compat/privateuse1.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::compat {
namespace {

using ::testing::HasSubstr;

// Naming works, is idempotent, and a second backend cannot rename the device.
TEST(PrivateUse1Test, Naming) {
  EXPECT_EQ(PrivateUse1Name(), "privateuseone");
  ASSERT_TRUE(NamePrivateUse1Backend("kiln_test_device").ok());
  EXPECT_EQ(PrivateUse1Name(), "kiln_test_device");
  EXPECT_TRUE(NamePrivateUse1Backend("kiln_test_device").ok());
  const absl::Status other = NamePrivateUse1Backend("another_device");
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.message(), HasSubstr("it is 'kiln_test_device' already"));
  EXPECT_EQ(c10::Device("kiln_test_device:1").type(), c10::DeviceType::PrivateUse1);
}

TEST(PrivateUse1Test, SymIntSizes) {
  const std::vector<c10::SymInt> sizes = {c10::SymInt(2), c10::SymInt(3)};
  const c10::IntArrayRef plain = AsIntArrayRef(c10::SymIntArrayRef(sizes));
  EXPECT_EQ(std::vector<int64_t>(plain.begin(), plain.end()), (std::vector<int64_t>{2, 3}));
}

class CountingAllocator final : public DeviceAllocator {
 public:
  c10::DataPtr Allocate(size_t size) const override {
    ++calls_;
    void* data = std::malloc(size);
    return c10::DataPtr(data, data, &std::free, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &std::free; }
  int calls() const { return calls_; }

 private:
  mutable int calls_ = 0;
};

// LibTorch reaches Allocate() through its own allocate().
TEST(PrivateUse1Test, AllocatorServesLibTorchsAllocate) {
  CountingAllocator allocator;
  c10::Allocator& as_libtorch = allocator;
  c10::DataPtr data = as_libtorch.allocate(64);
  EXPECT_NE(data.get(), nullptr);
  EXPECT_EQ(allocator.calls(), 1);
}

}  // namespace
}  // namespace kiln::compat
