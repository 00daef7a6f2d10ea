#include "hal/precision.h"

#include "gtest/gtest.h"

namespace kiln {
namespace {

TEST(PrecisionTest, NamesRoundTrip) {
  ASSERT_EQ(AllPrecisions().size(), 6u);
  for (Precision precision : AllPrecisions()) {
    std::optional<Precision> parsed = PrecisionFromName(PrecisionName(precision));
    ASSERT_TRUE(parsed.has_value()) << PrecisionName(precision);
    EXPECT_EQ(*parsed, precision);
  }
}

TEST(PrecisionTest, LightningNames) {
  EXPECT_EQ(PrecisionName(Precision::k32True), "32-true");
  EXPECT_EQ(PrecisionName(Precision::kBf16Mixed), "bf16-mixed");
  EXPECT_EQ(PrecisionNames({Precision::k32True, Precision::k16Mixed}), "32-true, 16-mixed");
  EXPECT_FALSE(PrecisionFromName("32").has_value());  // Legacy spellings are the connector's to map.
  EXPECT_FALSE(PrecisionFromName("fp8").has_value());
}

// Lightning's ThroughputMonitor asks for the peak FLOP/s of the dtype its precision plugin computes in
// (_plugin_to_compute_dtype): the true precisions' own dtype, and autocast's for the mixed ones.
TEST(PrecisionTest, ComputeDtypeIsLightningsThroughputDtype) {
  EXPECT_EQ(ComputeDtype(Precision::k32True), c10::kFloat);
  EXPECT_EQ(ComputeDtype(Precision::k64True), c10::kDouble);
  EXPECT_EQ(ComputeDtype(Precision::k16Mixed), c10::kHalf);
  EXPECT_EQ(ComputeDtype(Precision::k16True), c10::kHalf);
  EXPECT_EQ(ComputeDtype(Precision::kBf16Mixed), c10::kBFloat16);
  EXPECT_EQ(ComputeDtype(Precision::kBf16True), c10::kBFloat16);
}

}  // namespace
}  // namespace kiln
