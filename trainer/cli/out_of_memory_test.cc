// fit's line for memory that ran out: recognised from both allocators' exceptions, and saying what ran out, while
// doing what, and the limits that bound the inputs.
#include "trainer/cli/out_of_memory.h"

#include <new>
#include <stdexcept>

#include "c10/util/Exception.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(OutOfMemoryTest, BothAllocatorsExceptionsAreOutOfMemoryAndNothingElseIs) {
  EXPECT_TRUE(IsOutOfMemory(std::bad_alloc()));
  EXPECT_TRUE(IsOutOfMemory(std::bad_array_new_length()));
  try {
    TORCH_CHECK_WITH(OutOfMemoryError, false, "DefaultCPUAllocator: can't allocate memory");
  } catch (const std::exception& error) {
    EXPECT_TRUE(IsOutOfMemory(error));
  }
  try {
    TORCH_CHECK(false, "an ordinary LibTorch error");
  } catch (const std::exception& error) {
    EXPECT_FALSE(IsOutOfMemory(error));
  }
  EXPECT_FALSE(IsOutOfMemory(std::runtime_error("out of memory")));  // Words are not the type.
}

TEST(OutOfMemoryTest, TheMessageNamesWhatRanOutWhileDoingWhatAndTheLimits) {
  const std::string message =
      OutOfMemoryMessage("training (--mode=fit)", "std::bad_alloc", uint64_t{1} << 30, uint64_t{3} << 30);
  EXPECT_THAT(message, HasSubstr("out of memory while training (--mode=fit) (std::bad_alloc), training stopped"));
  EXPECT_THAT(message, HasSubstr("--max_inflated_mib (1024 MiB)"));
  EXPECT_THAT(message, HasSubstr("half of the memory available (3072 MiB now)"));
  EXPECT_THAT(message, HasSubstr("docs/reliability.md"));
  EXPECT_THAT(message, HasSubstr("--batch_size"));
  EXPECT_THAT(message, Not(HasSubstr("internal error")));
}

}  // namespace
}  // namespace kiln
