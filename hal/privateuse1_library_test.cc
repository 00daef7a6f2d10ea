// hal/privateuse1_library: the registration's checks, and the statistics of a PrivateUse1 device read from whatever
// allocator its library registered (here a c10::DeviceAllocator of the test's own, as a vendor's caching allocator
// is), so that they do not depend on Kiln's device kit. Loading a real library is tests/vendor_stack's.
#include "hal/privateuse1_library.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>

#include "c10/core/Allocator.h"
#include "c10/core/CachingDeviceAllocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/registry.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

TEST(RegisterPrivateUse1Library, RefusesNamesLibTorchWouldNotTakeAndBareFileNames) {
  AcceleratorRegistry registry;
  EXPECT_THAT(RegisterPrivateUse1Library(registry, "/opt/acme/libacme.so", "Acme").message(),
              HasSubstr("'Acme' is not a device name LibTorch takes"));
  EXPECT_THAT(RegisterPrivateUse1Library(registry, "/opt/acme/libacme.so", "9npu").message(),
              HasSubstr("a lower-case letter, then lower-case letters, digits and '_'"));
  EXPECT_THAT(RegisterPrivateUse1Library(registry, "libacme.so", "acme_npu").message(),
              HasSubstr("write ./libacme.so or its full path"));
  EXPECT_THAT(RegisterPrivateUse1LibrarySpec(registry, "/opt/acme/libacme.so").message(),
              HasSubstr("NAME=PATH"));
  // The suites' form takes a file of the root package as a path.
  ASSERT_TRUE(RegisterPrivateUse1LibrarySpec(registry, "root_npu=libroot.so").ok());
  EXPECT_EQ(registry.Find("root_npu")->origin, "PrivateUse1 library ./libroot.so");
  ASSERT_TRUE(RegisterPrivateUse1LibrarySpec(registry, "acme_npu=/opt/acme/libacme.so").ok());
  // Registered, nothing loaded: the accelerator is there, and the missing file is said when it is checked.
  absl::StatusOr<std::shared_ptr<Accelerator>> acme = registry.Get("acme_npu");
  ASSERT_TRUE(acme.ok()) << acme.status();
  EXPECT_EQ((*acme)->AutoDeviceCount(), 0) << "\"auto\" never loads a library";
  EXPECT_THAT((*acme)->CheckAvailable().message(), HasSubstr("/opt/acme/libacme.so of accelerator 'acme_npu' does not exist"));
}

TEST(RegisterPrivateUse1Library, TheSameFileTwiceUnderOneNameIsOneAccelerator) {
  const std::string tmp = std::getenv("TEST_TMPDIR");
  const std::string file = tmp + "/libacme.so";
  const std::string other = tmp + "/libother.so";
  std::ofstream(file) << "a library";
  std::ofstream(other) << "another library";
  ASSERT_EQ(::symlink(file.c_str(), (tmp + "/link.so").c_str()), 0);
  AcceleratorRegistry registry;
  ASSERT_TRUE(RegisterPrivateUse1Library(registry, file, "acme_npu").ok());
  // kiln_backends' libraries and a conformance test's library name one file by two paths.
  EXPECT_TRUE(RegisterPrivateUse1Library(registry, tmp + "/link.so", "acme_npu").ok());
  EXPECT_THAT(RegisterPrivateUse1Library(registry, other, "acme_npu").message(), HasSubstr("already taken"));
}

// A caching allocator as a vendor's is, reporting fixed statistics.
class StatsAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t) override { return c10::DataPtr(nullptr, c10::Device(c10::DeviceType::PrivateUse1, 0)); }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void*, const void*, std::size_t) const override {}
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    c10::CachingDeviceAllocator::DeviceStats stats;
    const auto aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    stats.allocated_bytes[aggregate].current = 1000 + device;
    stats.allocated_bytes[aggregate].peak = 2000;
    stats.reserved_bytes[aggregate].current = 4096;
    stats.active[aggregate].current = 3;
    stats.num_alloc_retries = 1;
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex) override {}
  void resetPeakStats(c10::DeviceIndex) override {}
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex) override { return {512, 8192}; }
};

TEST(PrivateUse1DeviceStats, ReadsWhateverAllocatorTheLibraryRegistered) {
  // No allocator yet: said, not invented.
  DeviceStats none = PrivateUse1DeviceStats(0);
  EXPECT_EQ(none.at("memory_stats_available"), 0);
  EXPECT_EQ(none.count("memory_allocated_bytes"), 0u);

  static StatsAllocator allocator;
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &allocator);
  DeviceStats stats = PrivateUse1DeviceStats(1);
  EXPECT_EQ(stats.at("memory_stats_available"), 1);
  EXPECT_EQ(stats.at("memory_allocated_bytes"), 1001);
  EXPECT_EQ(stats.at("memory_allocated_peak_bytes"), 2000);
  EXPECT_EQ(stats.at("memory_reserved_bytes"), 4096);
  EXPECT_EQ(stats.at("memory_active_blocks"), 3);
  EXPECT_EQ(stats.at("memory_alloc_retries"), 1);
  EXPECT_EQ(stats.at("memory_free_bytes"), 512);
  EXPECT_EQ(stats.at("memory_total_bytes"), 8192);
}

}  // namespace
}  // namespace kiln
