#include "backends/cuda/peak_flops.h"

#include <optional>

#include "gtest/gtest.h"

namespace kiln::cuda {
namespace {

// NVIDIA's published dense figures for parts whose SM count and clock their datasheets or whitepapers also give:
// the table's product must come out at the published figure (which is rounded: within 1%).
struct Published {
  const char* part;
  GpuProperties properties;
  c10::ScalarType dtype;
  bool tf32;
  double flops;
};

TEST(PeakFlopsTest, TheTableGivesTheDatasheetsFigures) {
  const Published kParts[] = {
      // V100 SXM2: 80 SMs, 1,530 MHz; 125 TFLOP/s tensor, 15.7 float32, 7.8 float64.
      {"V100", {7, 0, 80, 1530e3}, c10::kHalf, false, 125e12},
      {"V100", {7, 0, 80, 1530e3}, c10::kFloat, false, 15.7e12},
      {"V100", {7, 0, 80, 1530e3}, c10::kDouble, false, 7.8e12},
      // T4: 40 SMs, 1,590 MHz; 65 TFLOP/s float16, 8.1 float32.
      {"T4", {7, 5, 40, 1590e3}, c10::kHalf, false, 65e12},
      {"T4", {7, 5, 40, 1590e3}, c10::kFloat, false, 8.1e12},
      // A100: 108 SMs, 1,410 MHz; 312 bfloat16/float16, 156 TF32, 19.5 float32, 19.5 float64 tensor core.
      {"A100", {8, 0, 108, 1410e3}, c10::kBFloat16, false, 312e12},
      {"A100", {8, 0, 108, 1410e3}, c10::kHalf, false, 312e12},
      {"A100", {8, 0, 108, 1410e3}, c10::kFloat, true, 156e12},
      {"A100", {8, 0, 108, 1410e3}, c10::kFloat, false, 19.5e12},
      {"A100", {8, 0, 108, 1410e3}, c10::kDouble, false, 19.5e12},
      // A10: 72 SMs, 1,695 MHz; 125 bfloat16, 62.5 TF32, 31.2 float32.
      {"A10", {8, 6, 72, 1695e3}, c10::kBFloat16, false, 125e12},
      {"A10", {8, 6, 72, 1695e3}, c10::kFloat, true, 62.5e12},
      {"A10", {8, 6, 72, 1695e3}, c10::kFloat, false, 31.2e12},
      // L4: 58 SMs, 2,040 MHz; 121 bfloat16, 60 TF32, 30.3 float32.
      {"L4", {8, 9, 58, 2040e3}, c10::kBFloat16, false, 121e12},
      {"L4", {8, 9, 58, 2040e3}, c10::kFloat, true, 60.6e12},
      {"L4", {8, 9, 58, 2040e3}, c10::kFloat, false, 30.3e12},
      // H100 SXM: 132 SMs; 989.4 bfloat16 and 494.7 TF32 at 1,830 MHz, 66.9 float32 and 66.9 float64 at 1,980.
      {"H100", {9, 0, 132, 1830e3}, c10::kBFloat16, false, 989.4e12},
      {"H100", {9, 0, 132, 1830e3}, c10::kFloat, true, 494.7e12},
      {"H100", {9, 0, 132, 1980e3}, c10::kFloat, false, 66.9e12},
      {"H100", {9, 0, 132, 1980e3}, c10::kDouble, false, 66.9e12},
  };
  for (const Published& part : kParts) {
    const std::optional<double> flops = PeakFlopsOf(part.properties, part.dtype, part.tf32);
    ASSERT_TRUE(flops.has_value()) << part.part << " " << part.dtype;
    EXPECT_NEAR(*flops / part.flops, 1.0, 0.01) << part.part << " " << part.dtype << " tf32=" << part.tf32;
  }
}

TEST(PeakFlopsTest, UnknownWhereTheTableHasNoRate) {
  // No bfloat16 before Ampere; no TF32 before it either (float32 then is the CUDA cores' rate).
  EXPECT_EQ(PeakFlopsOf({7, 0, 80, 1530e3}, c10::kBFloat16, false), std::nullopt);
  EXPECT_EQ(PeakFlopsOf({7, 0, 80, 1530e3}, c10::kFloat, true), PeakFlopsOf({7, 0, 80, 1530e3}, c10::kFloat, false));
  // Architectures the table does not have, and dtypes without a rate.
  EXPECT_EQ(PeakFlopsOf({6, 1, 28, 1582e3}, c10::kFloat, false), std::nullopt);
  EXPECT_EQ(PeakFlopsOf({10, 0, 148, 1965e3}, c10::kBFloat16, false), std::nullopt);
  EXPECT_EQ(PeakFlopsOf({9, 0, 132, 1980e3}, c10::kInt, false), std::nullopt);
  // Properties that were not read.
  EXPECT_EQ(PeakFlopsOf({9, 0, 0, 1980e3}, c10::kBFloat16, false), std::nullopt);
  EXPECT_EQ(PeakFlopsOf({9, 0, 132, 0}, c10::kBFloat16, false), std::nullopt);
}

}  // namespace
}  // namespace kiln::cuda
