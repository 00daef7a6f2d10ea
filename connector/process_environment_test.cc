#include "connector/process_environment.h"

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

struct IntCase {
  std::map<std::string, std::string> variables;
  std::optional<int> expected;  // When ok.
  std::string error_part;       // Empty when ok.
};

TEST(ProcessEnvironmentTest, ReadsNonNegativeInts) {
  const std::vector<IntCase> cases = {
      {{}, std::nullopt, ""},
      {{{"N", ""}}, std::nullopt, ""},
      {{{"N", "0"}}, 0, ""},
      {{{"N", " 7 "}}, 7, ""},
      {{{"N", "-1"}}, std::nullopt, "N='-1' is not a non-negative integer"},
      {{{"N", "two"}}, std::nullopt, "N='two' is not a non-negative integer; unset it or fix it"},
      {{{"N", "99999999999"}}, std::nullopt, "N='99999999999' is not a non-negative integer"},
  };
  for (const IntCase& c : cases) {
    SCOPED_TRACE(c.variables.empty() ? "(unset)" : c.variables.begin()->second);
    absl::StatusOr<std::optional<int>> value = ProcessEnvironment::FromMap(c.variables).GetNonNegativeInt("N");
    if (c.error_part.empty()) {
      ASSERT_TRUE(value.ok()) << value.status();
      EXPECT_EQ(*value, c.expected);
    } else {
      ASSERT_FALSE(value.ok());
      EXPECT_THAT(value.status().message(), HasSubstr(c.error_part));
    }
  }
  EXPECT_EQ(*ProcessEnvironment::FromMap({}).GetNonNegativeIntOr("N", 3), 3);
  EXPECT_EQ(*ProcessEnvironment::FromMap({{"N", "4"}}).GetNonNegativeIntOr("N", 3), 4);
}

TEST(ProcessEnvironmentTest, ReadsPorts) {
  const std::vector<IntCase> cases = {
      {{}, std::nullopt, ""},
      {{{"N", "1"}}, 1, ""},
      {{{"N", "65535"}}, 65535, ""},
      {{{"N", "0"}}, std::nullopt, "N='0' is not a TCP port; set it to a port in 1..65535"},
      {{{"N", "65536"}}, std::nullopt, "N='65536' is not a TCP port"},
      {{{"N", "http"}}, std::nullopt, "N='http' is not a TCP port"},
  };
  for (const IntCase& c : cases) {
    SCOPED_TRACE(c.variables.empty() ? "(unset)" : c.variables.begin()->second);
    absl::StatusOr<std::optional<int>> value = ProcessEnvironment::FromMap(c.variables).GetPort("N");
    if (c.error_part.empty()) {
      ASSERT_TRUE(value.ok()) << value.status();
      EXPECT_EQ(*value, c.expected);
    } else {
      ASSERT_FALSE(value.ok());
      EXPECT_THAT(value.status().message(), HasSubstr(c.error_part));
    }
  }
}

TEST(ProcessEnvironmentTest, AMapIsAllAMappedEnvironmentSees) {
  // PATH is set in every test process; a map without it must not see it.
  ASSERT_NE(std::getenv("PATH"), nullptr);
  ProcessEnvironment environment = ProcessEnvironment::FromMap({{"SET_EMPTY", ""}}, "node7");
  EXPECT_FALSE(environment.Has("PATH"));
  EXPECT_TRUE(environment.Has("SET_EMPTY"));
  EXPECT_EQ(*environment.Hostname(), "node7");
}

TEST(ProcessEnvironmentTest, CurrentReadsTheRealEnvironmentAndHostname) {
  EXPECT_EQ(ProcessEnvironment::Current().Get("PATH"), std::string(std::getenv("PATH")));
  absl::StatusOr<std::string> hostname = ProcessEnvironment::Current().Hostname();
  ASSERT_TRUE(hostname.ok()) << hostname.status();
  EXPECT_FALSE(hostname->empty());
}

TEST(ProcessEnvironmentTest, ReadsFiles) {
  const std::string path = ::testing::TempDir() + "/process_environment_test.txt";
  std::ofstream(path) << "first\nsecond\n";
  ProcessEnvironment environment = ProcessEnvironment::FromMap({});
  EXPECT_EQ(*environment.ReadFile(path), "first\nsecond\n");
  absl::StatusOr<std::string> missing = environment.ReadFile(path + ".missing");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("cannot read the file '" + path + ".missing'"));
}

}  // namespace
}  // namespace kiln
