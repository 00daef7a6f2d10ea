// CRC-32 throughput: Kiln's Crc32 (trainer/io/crc32.h, the implementation this CPU selects) against zlib's crc32,
// which Kiln used before, on the same buffer in the same run, interleaved. 6.4 MB is the medium MLP's checkpoint
// (checkpoint_bench), larger than a core's L2 cache; 64 KiB stays in it.
#include <zlib.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "trainer/io/crc32.h"

namespace kiln {
namespace {

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void BM_Crc32(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  std::mt19937 random(1);
  std::vector<uint8_t> data(size);
  for (uint8_t& byte : data) byte = static_cast<uint8_t>(random());
  // Each iteration checks at least 1 MiB with each, so that the clock's own cost is lost in what it measures.
  const size_t calls = (size_t{1} << 20) / size + 1;
  double kiln = 0;
  double zlib = 0;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    uint32_t kiln_crc = 0;
    for (size_t i = 0; i < calls; ++i) kiln_crc = Crc32(kiln_crc, data.data(), size);
    benchmark::DoNotOptimize(kiln_crc);
    kiln += Seconds(start);
    start = std::chrono::steady_clock::now();
    uLong zlib_crc = 0;
    for (size_t i = 0; i < calls; ++i) zlib_crc = crc32_z(zlib_crc, data.data(), size);
    benchmark::DoNotOptimize(zlib_crc);
    zlib += Seconds(start);
    if (kiln_crc != zlib_crc) state.SkipWithError("Kiln's CRC-32 differs from zlib's");
  }
  const double bytes = static_cast<double>(size) * static_cast<double>(calls) * static_cast<double>(state.iterations());
  state.counters["kiln_GB_per_s"] = bytes / kiln / 1e9;
  state.counters["zlib_GB_per_s"] = bytes / zlib / 1e9;
  state.counters["kiln_over_zlib"] = zlib / kiln;
  state.SetLabel(Crc32Implementation());
}

BENCHMARK(BM_Crc32)->Arg(6400000)->Arg(64 << 10)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kiln

BENCHMARK_MAIN();
