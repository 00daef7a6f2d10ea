#include "hal/devices.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;
using Kind = DeviceSelection::Kind;

struct SyntaxCase {
  Devices devices;
  Kind kind;
  int count;
  std::vector<int> indices;
};

TEST(ParseDevicesSyntaxTest, AcceptsLightningForms) {
  const std::vector<SyntaxCase> cases = {
      {"auto", Kind::kAuto, 0, {}},
      {" AUTO ", Kind::kAuto, 0, {}},
      {Devices(), Kind::kAuto, 0, {}},
      {2, Kind::kCount, 2, {}},
      {0, Kind::kCount, 0, {}},
      {-1, Kind::kAll, 0, {}},
      {"-1", Kind::kAll, 0, {}},
      {"2", Kind::kCount, 2, {}},
      {" 4 ", Kind::kCount, 4, {}},
      {"0", Kind::kCount, 0, {}},
      {"0,1", Kind::kIndices, 0, {0, 1}},
      {"1, 0", Kind::kIndices, 0, {1, 0}},
      {"3,", Kind::kIndices, 0, {3}},
      {"[0, 1]", Kind::kIndices, 0, {0, 1}},
      {"[2]", Kind::kIndices, 0, {2}},
      {"[]", Kind::kIndices, 0, {}},
      {std::vector<int>{0, 2}, Kind::kIndices, 0, {0, 2}},
      {std::vector<int>{}, Kind::kIndices, 0, {}},
      {{1, 1}, Kind::kIndices, 0, {1, 1}},
  };
  for (const SyntaxCase& c : cases) {
    SCOPED_TRACE(c.devices.ToString());
    absl::StatusOr<DeviceSelection> selection = ParseDevicesSyntax(c.devices);
    ASSERT_TRUE(selection.ok()) << selection.status();
    EXPECT_EQ(selection->kind, c.kind);
    EXPECT_EQ(selection->count, c.count);
    EXPECT_EQ(selection->indices, c.indices);
  }
}

struct BadCase {
  Devices devices;
  std::string message_part;
};

TEST(ParseDevicesSyntaxTest, RejectsBadValuesNamingThem) {
  const std::vector<BadCase> cases = {
      {-2, "invalid devices value -2: a negative count other than -1"},
      {"-3", "invalid devices value '-3'"},
      {"two", "'two': not a number"},
      {"", "not a number"},
      {"1.5", "not a number"},
      {"0,,1", "'' is not a device index"},
      {"0,x", "'x' is not a device index"},
      {"[0, 1", "unbalanced '['"},
      {"0, 1]", "unbalanced ']'"},
      {"0,-1", "device index -1 is negative"},
      {std::vector<int>{0, -2}, "device index -2 is negative"},
      {"99999999999", "not a number"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.devices.ToString());
    absl::StatusOr<DeviceSelection> selection = ParseDevicesSyntax(c.devices);
    ASSERT_FALSE(selection.ok());
    EXPECT_EQ(selection.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(selection.status().message(), HasSubstr(c.message_part));
    EXPECT_THAT(selection.status().message(), HasSubstr("expected \"auto\""));
  }
}

TEST(DevicesTest, ToStringQuotesWhatTheUserWrote) {
  EXPECT_EQ(Devices().ToString(), "'auto'");
  EXPECT_EQ(Devices(3).ToString(), "3");
  EXPECT_EQ(Devices("0,1").ToString(), "'0,1'");
  EXPECT_EQ(Devices({0, 1}).ToString(), "[0, 1]");
}

TEST(IsZeroDevicesTest, OnlyZeroAndEmptyLists) {
  EXPECT_TRUE(IsZeroDevices(0));
  EXPECT_TRUE(IsZeroDevices("0"));
  EXPECT_TRUE(IsZeroDevices(std::vector<int>{}));
  EXPECT_TRUE(IsZeroDevices("[]"));
  EXPECT_FALSE(IsZeroDevices("0,"));  // Device 0, not zero devices.
  EXPECT_FALSE(IsZeroDevices(1));
  EXPECT_FALSE(IsZeroDevices("auto"));
  EXPECT_FALSE(IsZeroDevices("garbage"));
}

TEST(ParseDeviceCountTest, CountsProcesses) {
  EXPECT_EQ(*ParseDeviceCount("auto", 1, "cpu"), (std::vector<int>{0}));
  EXPECT_EQ(*ParseDeviceCount(3, 1, "cpu"), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(*ParseDeviceCount("2", 1, "cpu"), (std::vector<int>{0, 1}));
}

TEST(ParseDeviceCountTest, RejectsEverythingButPositiveCounts) {
  for (const Devices& devices : {Devices(-1), Devices("0,1"), Devices({0}), Devices(0), Devices("[1]")}) {
    SCOPED_TRACE(devices.ToString());
    absl::StatusOr<std::vector<int>> parsed = ParseDeviceCount(devices, 1, "cpu");
    ASSERT_FALSE(parsed.ok());
    EXPECT_THAT(parsed.status().message(), HasSubstr("should be an int > 0, got " + devices.ToString()));
  }
  EXPECT_FALSE(ParseDeviceCount("x", 1, "cpu").ok());
}

TEST(ParseDeviceCountTest, RefusesMoreProcessesThanAnyMachineRuns) {
  EXPECT_EQ(ParseDeviceCount(kMaxDeviceCount, 1, "cpu")->size(), static_cast<size_t>(kMaxDeviceCount));
  for (const Devices& devices : {Devices(kMaxDeviceCount + 1), Devices("1629488239"), Devices(2147483647)}) {
    SCOPED_TRACE(devices.ToString());
    absl::StatusOr<std::vector<int>> parsed = ParseDeviceCount(devices, 1, "cpu");
    ASSERT_FALSE(parsed.ok());
    EXPECT_THAT(parsed.status().message(), HasSubstr("processes on one machine, more than the 65536 Kiln supports"));
  }
}

struct IndexCase {
  Devices devices;
  int visible;
  std::vector<int> expected;
};

TEST(ParseDeviceIndicesTest, FollowsLightningGpuRules) {
  const std::vector<IndexCase> cases = {
      {"auto", 2, {0, 1}}, {-1, 3, {0, 1, 2}}, {"-1", 1, {0}},    {2, 4, {0, 1}},
      {"2", 2, {0, 1}},    {"0,2", 3, {0, 2}}, {"2,", 3, {2}},    {"[1, 0]", 2, {1, 0}},
      {{3}, 4, {3}},
  };
  for (const IndexCase& c : cases) {
    SCOPED_TRACE(c.devices.ToString());
    absl::StatusOr<std::vector<int>> parsed = ParseDeviceIndices(c.devices, c.visible, "cuda");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, c.expected);
  }
}

TEST(ParseDeviceIndicesTest, ErrorsSayWhichDevicesExist) {
  EXPECT_THAT(ParseDeviceIndices("3,", 2, "CUDA", "CUDA_VISIBLE_DEVICES=0,1").status().message(),
              HasSubstr("CUDA device 3 requested, but only 2 are visible (CUDA_VISIBLE_DEVICES=0,1)"));
  EXPECT_THAT(ParseDeviceIndices(4, 1, "cuda").status().message(),
              HasSubstr("4 cuda devices requested, but only 1 is visible"));
  EXPECT_THAT(ParseDeviceIndices({0, 0}, 2, "cuda").status().message(), HasSubstr("device index 0 appears twice"));
  EXPECT_THAT(ParseDeviceIndices(-1, 0, "cuda").status().message(), HasSubstr("but none is visible"));
  EXPECT_THAT(ParseDeviceIndices("zz", 2, "cuda").status().message(), HasSubstr("invalid devices value 'zz'"));
}

}  // namespace
}  // namespace kiln
