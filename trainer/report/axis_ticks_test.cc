#include "trainer/report/axis_ticks.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"

namespace kiln {
namespace {

struct TickCase {
  double lo;
  double hi;
  bool extend;
  std::vector<double> values;
  std::vector<std::string> labels;
};

// Each row's expectation is worked out by hand from the rule in axis_ticks.h: the smallest step of 1, 2 or 5 x 10^k
// with at most 7 ticks, e.g. for 0.1655..1.009 extended: 0.1 gives ticks 1..11 (11), 0.2 gives 0..6 (7).
TEST(NiceTicksTest, Table) {
  const std::vector<TickCase> cases = {
      {0, 1, true, {0, 0.2, 0.4, 0.6, 0.8, 1.0}, {"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"}},
      {0.1655, 1.009, true, {0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2}, {"0.0", "0.2", "0.4", "0.6", "0.8", "1.0", "1.2"}},
      {0.8213, 0.9111, true, {0.82, 0.84, 0.86, 0.88, 0.90, 0.92}, {"0.82", "0.84", "0.86", "0.88", "0.90", "0.92"}},
      // 0.3 and 0.30 exactly, not 0.30000000000000004.
      {0, 0.6, true, {0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, {"0.0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6"}},
      {0, 0.3, true, {0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3}, {"0.00", "0.05", "0.10", "0.15", "0.20", "0.25", "0.30"}},
      {-1.3, 0.4, true, {-1.5, -1.0, -0.5, 0, 0.5}, {"-1.5", "-1.0", "-0.5", "0.0", "0.5"}},
      // Steps: the axis spans the data; ticks inside only.
      {49, 319, false, {50, 100, 150, 200, 250, 300}, {"50", "100", "150", "200", "250", "300"}},
      {0.0012, 0.1826, false, {0.05, 0.10, 0.15}, {"0.05", "0.10", "0.15"}},
      // The k prefix from 10^4 on, for the whole axis.
      {0, 9999, false, {0, 2000, 4000, 6000, 8000}, {"0", "2000", "4000", "6000", "8000"}},
      {0, 12000, false, {0, 2000, 4000, 6000, 8000, 10000, 12000}, {"0", "2k", "4k", "6k", "8k", "10k", "12k"}},
      {0, 20000, true, {0, 5000, 10000, 15000, 20000}, {"0", "5k", "10k", "15k", "20k"}},
      {2.36803e10, 2.48947e10, true, {2.35e10, 2.4e10, 2.45e10, 2.5e10}, {"23.5G", "24.0G", "24.5G", "25.0G"}},
      {1e-5, 3e-5, true, {1e-5, 1.5e-5, 2e-5, 2.5e-5, 3e-5}, {"1.0e-05", "1.5e-05", "2.0e-05", "2.5e-05", "3.0e-05"}},
      // No round step fits: the ends.
      {-1e308, 1e308, true, {-1e308, 1e308}, {"-1e+308", "1e+308"}},
  };
  for (const TickCase& c : cases) {
    const AxisTicks ticks = NiceTicks(c.lo, c.hi, c.extend);
    SCOPED_TRACE(testing::Message() << c.lo << ".." << c.hi << (c.extend ? " extended" : " inside"));
    ASSERT_EQ(ticks.values.size(), c.values.size());
    for (size_t i = 0; i < c.values.size(); ++i) EXPECT_DOUBLE_EQ(ticks.values[i], c.values[i]) << i;
    EXPECT_EQ(ticks.labels, c.labels);
    if (c.extend) {
      EXPECT_EQ(ticks.range.lo, ticks.values.front());
      EXPECT_EQ(ticks.range.hi, ticks.values.back());
    } else {
      EXPECT_EQ(ticks.range.lo, c.lo);
      EXPECT_EQ(ticks.range.hi, c.hi);
    }
  }
}

TEST(NiceTicksTest, TickValuesAreTheNearestDoubles) {
  // 0.1 * 3 is 0.30000000000000004; the tick must be the double the literal 0.3 gives.
  const AxisTicks ticks = NiceTicks(0, 0.6, true);
  ASSERT_EQ(ticks.values.size(), 7u);
  EXPECT_EQ(ticks.values[3], 0.3);
}

// Over many ranges: extended axes get 4 to 7 ticks that contain the data, at multiples of a 1/2/5 x 10^k step.
TEST(NiceTicksTest, ExtendedTicksAreFourToSevenRoundValuesAroundTheData) {
  std::mt19937_64 random(20);
  std::uniform_real_distribution<double> exponent(-6, 9);
  std::uniform_real_distribution<double> unit(-1, 1);
  for (int i = 0; i < 5000; ++i) {
    const double scale = std::pow(10.0, exponent(random));
    double lo = unit(random) * scale;
    double hi = lo + std::abs(unit(random)) * scale + scale * 1e-3;
    const AxisTicks ticks = NiceTicks(lo, hi, true);
    SCOPED_TRACE(testing::Message() << lo << ".." << hi);
    ASSERT_GE(ticks.values.size(), 4u);
    ASSERT_LE(ticks.values.size(), 7u);
    EXPECT_LE(ticks.range.lo, lo + 1e-9 * ticks.step);
    EXPECT_GE(ticks.range.hi, hi - 1e-9 * ticks.step);
    const double mantissa = ticks.step / std::pow(10.0, std::floor(std::log10(ticks.step) + 1e-9));
    EXPECT_TRUE(std::abs(mantissa - 1) < 1e-9 || std::abs(mantissa - 2) < 1e-9 || std::abs(mantissa - 5) < 1e-9)
        << ticks.step;
    for (double value : ticks.values) {
      const double index = value / ticks.step;
      EXPECT_NEAR(index, std::round(index), 1e-6) << value;
    }
    // Labels tell the ticks apart.
    for (size_t j = 1; j < ticks.labels.size(); ++j) EXPECT_NE(ticks.labels[j], ticks.labels[j - 1]);
  }
}

TEST(PadFlatRangeTest, Table) {
  struct Case {
    double lo, hi, want_lo, want_hi;
  };
  const std::vector<Case> cases = {
      // Wide enough: unchanged.
      {0.16, 1.0, 0.16, 1.0},
      {-3, 3, -3, 3},
      // 0.003 around 3.9 is under 5% of 3.911: 0.05 * 3.911 centred on 3.9095.
      {3.908, 3.911, 3.9095 - 0.05 * 3.911 / 2, 3.9095 + 0.05 * 3.911 / 2},
      {5, 5, 5 - 0.125, 5 + 0.125},
      {-2, -2, -2.05, -1.95},
      {0, 0, -0.5, 0.5},
  };
  for (const Case& c : cases) {
    const ValueRange range = PadFlatRange(c.lo, c.hi);
    EXPECT_DOUBLE_EQ(range.lo, c.want_lo) << c.lo << ".." << c.hi;
    EXPECT_DOUBLE_EQ(range.hi, c.want_hi) << c.lo << ".." << c.hi;
  }
  // Positive stays positive.
  EXPECT_GT(PadFlatRange(1e-3, 1.0001e-3).lo, 0);
  // A flat 24 GB curve with 1 MB of noise: the ticks are a few round values around it, not 1 MB apart.
  const ValueRange memory = PadFlatRange(2.4287e10, 2.4288e10);
  const AxisTicks ticks = NiceTicks(memory.lo, memory.hi, true);
  EXPECT_EQ(ticks.labels, (std::vector<std::string>{"23.5G", "24.0G", "24.5G", "25.0G"}));
}

}  // namespace
}  // namespace kiln
