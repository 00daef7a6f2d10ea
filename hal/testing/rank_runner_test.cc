// hal/testing/rank_runner: a failing rank's excerpt keeps what the rank said even when a backtrace fills the tail.
#include "hal/testing/rank_runner.h"

#include <string>

#include "gtest/gtest.h"

namespace kiln::testing {
namespace {

TEST(RankExcerptTest, KeepsTheErrorLineABacktracePushedOutOfTheTail) {
  EXPECT_EQ(RankExcerpt("short output\n"), "short output\n");
  std::string backtrace;
  for (int frame = 0; frame < 100; ++frame) backtrace += "frame #" + std::to_string(frame) + ": somewhere in libc10\n";
  const std::string text =
      "conformance: entering barrier (rank 1 of 2)\nerror: barrier threw on rank 1 of 2: the store went away\n" +
      backtrace;
  const std::string excerpt = RankExcerpt(text);
  EXPECT_EQ(excerpt.rfind("error: barrier threw on rank 1 of 2: the store went away\n[...]\n", 0), 0u) << excerpt;
  EXPECT_EQ(excerpt.substr(excerpt.size() - 30), text.substr(text.size() - 30)) << "the tail follows";
  // An error line inside the tail is not repeated.
  const std::string late = backtrace + "error: the last words\n";
  EXPECT_EQ(RankExcerpt(late), late.substr(late.size() - 2000));
}

}  // namespace
}  // namespace kiln::testing
