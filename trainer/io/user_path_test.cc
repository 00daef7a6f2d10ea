#include "trainer/io/user_path.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace kiln {
namespace {

TEST(UserPathTest, RelativeToWhereBazelRunStarted) {
  ::unsetenv("BUILD_WORKING_DIRECTORY");
  EXPECT_EQ(UserPath("data/x.csv"), "data/x.csv");
  ::setenv("BUILD_WORKING_DIRECTORY", "/home/me/work", 1);
  EXPECT_EQ(UserPath("data/x.csv"), "/home/me/work/data/x.csv");
  EXPECT_EQ(UserPath("x.csv"), "/home/me/work/x.csv");
  EXPECT_EQ(UserPath("/abs/x.csv"), "/abs/x.csv");
  EXPECT_EQ(UserPath(""), "");
  EXPECT_EQ(UserPathKeepingBareNames("libacme.so"), "libacme.so");
  EXPECT_EQ(UserPathKeepingBareNames("./libacme.so"), "/home/me/work/libacme.so");
  EXPECT_EQ(UserPath("."), "/home/me/work");
  EXPECT_EQ(UserPath("./"), "/home/me/work");
  EXPECT_EQ(UserPath("././runs"), "/home/me/work/runs");
  EXPECT_EQ(UserPath("../runs"), "/home/me/work/../runs");
  ::setenv("BUILD_WORKING_DIRECTORY", "", 1);
  EXPECT_EQ(UserPath("data/x.csv"), "data/x.csv");
}

}  // namespace
}  // namespace kiln
