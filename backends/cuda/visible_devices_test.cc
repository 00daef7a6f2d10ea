#include "backends/cuda/visible_devices.h"

#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::cuda {
namespace {

using Kind = VisibleDevices::Kind;

struct ParseCase {
  std::optional<std::string> value;
  Kind kind;
  std::vector<int> ordinals;
  std::vector<std::string> uuids;
};

TEST(VisibleDevicesTest, ParsesTheWayTheCudaRuntimeDoes) {
  const std::vector<ParseCase> cases = {
      {std::nullopt, Kind::kAll, {}, {}},
      {"0,1", Kind::kOrdinals, {0, 1}, {}},
      {"2,0", Kind::kOrdinals, {2, 0}, {}},
      {" 3 , 1 ", Kind::kOrdinals, {3, 1}, {}},
      {"", Kind::kOrdinals, {}, {}},              // Empty hides every device.
      {"-1", Kind::kOrdinals, {}, {}},            // So does -1.
      {"0,1,-1,2", Kind::kOrdinals, {0, 1}, {}},  // A negative entry ends the list.
      {"1,x,0", Kind::kOrdinals, {1}, {}},        // So does an entry that is not a number.
      {"1gpu,2", Kind::kOrdinals, {1, 2}, {}},    // strtoul reads the leading digits.
      {"0,1,0", Kind::kOrdinals, {}, {}},         // A repeated ordinal hides every device.
      {"99999999999", Kind::kOrdinals, {}, {}},   // Too large for any device.
      {"GPU-abc,GPU-def", Kind::kGpuUuids, {}, {"GPU-abc", "GPU-def"}},
      {"GPU-abc,1,GPU-def", Kind::kGpuUuids, {}, {"GPU-abc"}},
      {"GPU-abc,GPU-abc", Kind::kGpuUuids, {}, {}},
      {"MIG-1234", Kind::kMigUuids, {}, {"MIG-1234"}},
  };
  for (const ParseCase& c : cases) {
    SCOPED_TRACE(c.value.value_or("<unset>"));
    const VisibleDevices parsed =
        ParseCudaVisibleDevices(c.value ? std::optional<absl::string_view>(*c.value) : std::nullopt);
    EXPECT_EQ(parsed.kind, c.kind);
    EXPECT_EQ(parsed.ordinals, c.ordinals);
    EXPECT_EQ(parsed.uuids, c.uuids);
  }
}

struct MapCase {
  std::optional<std::string> value;
  std::vector<int> nvml_indices;  // Expected NVML index of CUDA device 0, 1, ...
};

TEST(VisibleDevicesTest, MapsEachCudaIndexToItsNvmlDevice) {
  const std::vector<std::string> uuids = {"GPU-aaaa-1111", "GPU-bbbb-2222", "GPU-bbbc-3333", "GPU-cccc-4444"};
  const std::vector<MapCase> cases = {
      {std::nullopt, {0, 1, 2, 3}},
      {"2", {2}},
      {"3,0", {3, 0}},
      {"1,7,2", {1}},  // An ordinal beyond the devices present ends the list.
      {"7", {}},
      {"", {}},
      {"GPU-cccc-4444,GPU-aaaa", {3, 0}},   // Full UUIDs and unique prefixes.
      {"GPU-aaaa,GPU-zzzz,GPU-cccc", {0}},  // An unknown UUID ends the list.
      {"GPU-bbb", {}},                      // An ambiguous prefix hides every device.
      {"GPU-aaaa,GPU-aaaa-1111", {}},       // Two entries naming one device hide every device.
  };
  for (const MapCase& c : cases) {
    SCOPED_TRACE(c.value.value_or("<unset>"));
    absl::StatusOr<std::vector<int>> mapped = NvmlIndicesOfCudaDevices(
        ParseCudaVisibleDevices(c.value ? std::optional<absl::string_view>(*c.value) : std::nullopt), uuids);
    ASSERT_TRUE(mapped.ok()) << mapped.status();
    EXPECT_EQ(*mapped, c.nvml_indices);
  }
}

TEST(VisibleDevicesTest, MigInstancesAreALimitationSaidOutLoud) {
  absl::StatusOr<std::vector<int>> mapped = NvmlIndicesOfCudaDevices(ParseCudaVisibleDevices("MIG-1234"), {"GPU-aaaa"});
  EXPECT_EQ(mapped.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(mapped.status().message(), ::testing::HasSubstr("MIG"));
}

TEST(VisibleDevicesTest, HintQuotesTheVariable) {
  EXPECT_EQ(VisibilityHint(std::nullopt), "CUDA_VISIBLE_DEVICES is unset");
  EXPECT_EQ(VisibilityHint(""), "CUDA_VISIBLE_DEVICES=''");
  EXPECT_EQ(VisibilityHint("0,2"), "CUDA_VISIBLE_DEVICES=0,2");
}

}  // namespace
}  // namespace kiln::cuda
