#include "backends/cuda/peak_flops.h"

namespace kiln::cuda {
namespace {

// One row of the table in peak_flops.h; 0: no rate.
struct Rates {
  int major;
  int minor;
  double float64;
  double float32;
  double tf32;
  double float16;
  double bfloat16;
};

constexpr Rates kRates[] = {
    {7, 0, 64, 128, 0, 1024, 0},     {7, 5, 4, 128, 0, 1024, 0},      {8, 0, 128, 128, 1024, 2048, 2048},
    {8, 6, 4, 256, 512, 1024, 1024}, {8, 9, 4, 256, 512, 1024, 1024}, {9, 0, 256, 256, 2048, 4096, 4096},
};

}  // namespace

std::optional<double> PeakFlopsOf(const GpuProperties& properties, c10::ScalarType dtype, bool tf32) {
  if (properties.multiprocessors <= 0 || properties.peak_clock_khz <= 0) return std::nullopt;
  for (const Rates& rates : kRates) {
    if (rates.major != properties.major || rates.minor != properties.minor) continue;
    double per_clock = 0;
    switch (dtype) {
      case c10::kDouble:
        per_clock = rates.float64;
        break;
      case c10::kFloat:
        per_clock = tf32 && rates.tf32 > 0 ? rates.tf32 : rates.float32;
        break;
      case c10::kHalf:
        per_clock = rates.float16;
        break;
      case c10::kBFloat16:
        per_clock = rates.bfloat16;
        break;
      default:
        break;
    }
    if (per_clock <= 0) return std::nullopt;
    return per_clock * properties.multiprocessors * properties.peak_clock_khz * 1e3;
  }
  return std::nullopt;
}

}  // namespace kiln::cuda
