#include "backends/hpu/bridge.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::hpu {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(BridgeTest, TheLibraryOfEachMode) {
  const auto lazy = ElementsAre("libhabana_pytorch_plugin.so", "libhabana_pytorch_plugin.upstream.so");
  const auto eager = ElementsAre("libhabana_pytorch2_plugin.so", "libhabana_pytorch2_plugin.upstream.so");
  EXPECT_THAT(*BridgeCandidates("1", 2), lazy);
  EXPECT_THAT(*BridgeCandidates("1", 1), lazy);
  EXPECT_THAT(*BridgeCandidates("0", 2), eager);
  EXPECT_THAT(*BridgeCandidates("0", 1), eager);
  // Unset (or empty): LibTorch 1.13's bridges had lazy mode alone; eager is the default for PyTorch 2.x.
  EXPECT_THAT(*BridgeCandidates(std::nullopt, 1), lazy);
  EXPECT_THAT(*BridgeCandidates("", 1), lazy);
  EXPECT_THAT(*BridgeCandidates(std::nullopt, 2), eager);
}

TEST(BridgeTest, AnotherValueIsAnErrorNamingIt) {
  for (const char* value : {"2", "true", "eager", " 1"}) {
    absl::StatusOr<std::vector<std::string>> chosen = BridgeCandidates(value, 2);
    ASSERT_FALSE(chosen.ok()) << value;
    EXPECT_EQ(chosen.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(chosen.status().message(), HasSubstr(std::string("PT_HPU_LAZY_MODE='") + value + "' is not a mode"));
    EXPECT_THAT(chosen.status().message(), HasSubstr("or unset it for the default (eager)"));
  }
}

}  // namespace
}  // namespace kiln::hpu
