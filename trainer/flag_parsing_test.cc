#include "trainer/flag_parsing.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

TEST(ParseBatchLimitFlagTest, CountsAndFractions) {
  struct Case {
    const char* value;
    std::variant<int64_t, double> expected;
  };
  for (const Case& c : {Case{"0", int64_t{0}}, Case{"10", int64_t{10}}, Case{"1.0", 1.0}, Case{"0.25", 0.25},
                        Case{"0.", 0.0}, Case{"5e-1", 0.5}, Case{"1E0", 1.0}}) {
    absl::StatusOr<std::variant<int64_t, double>> parsed = ParseBatchLimitFlag("limit_train_batches", c.value);
    ASSERT_TRUE(parsed.ok()) << c.value << ": " << parsed.status();
    EXPECT_EQ(*parsed, c.expected) << c.value;
  }
}

TEST(ParseBatchLimitFlagTest, RefusesEverythingElseNamingTheFlagAndValue) {
  for (const char* value :
       {"", "lots", "-1", "1.5", "-0.5", "nan", "inf", "1e5", "0x10", "9223372036854775808", "1,0"}) {
    absl::StatusOr<std::variant<int64_t, double>> parsed = ParseBatchLimitFlag("limit_val_batches", value);
    ASSERT_FALSE(parsed.ok()) << "'" << value << "' was accepted";
    EXPECT_THAT(std::string(parsed.status().message()),
                HasSubstr(std::string("--limit_val_batches='") + value + "' is not valid"));
  }
}

TEST(ParseLayerSizesFlagTest, Widths) {
  EXPECT_EQ(*ParseLayerSizesFlag("hidden_sizes", "64,64"), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(*ParseLayerSizesFlag("hidden_sizes", "1024"), (std::vector<int64_t>{1024}));
  EXPECT_EQ(*ParseLayerSizesFlag("hidden_sizes", ",8,,"), (std::vector<int64_t>{8}));
  EXPECT_TRUE(ParseLayerSizesFlag("hidden_sizes", "")->empty());
  EXPECT_EQ(*ParseLayerSizesFlag("hidden_sizes", "67108864"), (std::vector<int64_t>{kMaxLayerWidth}));
}

TEST(ParseLayerSizesFlagTest, RefusesBadWidths) {
  for (const char* value : {"64,-1", "0", "x", "64;64", "67108865", "99999999999999999999", "1.5"}) {
    absl::StatusOr<std::vector<int64_t>> parsed = ParseLayerSizesFlag("hidden_sizes", value);
    ASSERT_FALSE(parsed.ok()) << "'" << value << "' was accepted";
    EXPECT_THAT(std::string(parsed.status().message()),
                HasSubstr(std::string("--hidden_sizes='") + value + "' is not valid"));
  }
}

}  // namespace
}  // namespace kiln
