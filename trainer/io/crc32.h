// CRC-32 as zip, gzip and zlib compute it (reflected polynomial 0xEDB88320, initial and final xor 0xFFFFFFFF): the
// check of every record of a checkpoint (trainer/checkpoint/format/zip_checksums.h).
//
// Why Kiln has its own: Debian 12's zlib 1.2.13 computes it with tables, 2 to 5 GB/s, a large share of the time a
// validated checkpoint read takes. Folding with carry-less multiplication (PCLMULQDQ, or VPCLMULQDQ on 512-bit
// registers) is measured by tests/bench:crc32_bench against zlib in the same run: 5.4 to 5.9 times zlib's speed on
// 6.4 MB, 16 to 20 times on 64 KiB (VPCLMULQDQ, Kiln's 2-core Xeon, -c opt, 2026-12-04). The instructions are chosen at
// run time, once, so the library builds with the default flags and runs on any x86-64; other CPUs, and inputs shorter
// than one 16-byte block, use zlib's crc32. Debian 12's libdeflate 1.14 (PCLMULQDQ) was measured too, as the library
// STYLE.md would have Kiln take: 25 GB/s on 6.4 MB (this one 27.5), but 30 GB/s on 256 KiB in the cache against this
// one's 108. A checkpoint is read 256 KiB at a time and each piece checked while it is in the cache (zip_checksums.h),
// so that is the figure that counts: 0.06 ms for 6.4 MB instead of 0.21.
//
// Thread-safety: pure functions. Never throw.
#ifndef KILN_TRAINER_IO_CRC32_H_
#define KILN_TRAINER_IO_CRC32_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln {

// zlib's crc32(crc, data, size) contract: the CRC-32 of `size` bytes at `data`, continued from `crc`, the CRC-32 of
// the bytes before them (0 to start). Crc32(Crc32(0, a), b) is the CRC-32 of a followed by b. `data` may be null
// when `size` is 0.
uint32_t Crc32(uint32_t crc, const void* data, size_t size);

// The implementation Crc32 runs on this CPU: "vpclmulqdq", "pclmulqdq" or "zlib" (for benchmark reports).
const char* Crc32Implementation();

namespace internal {

// Each implementation this build has, so that tests check every one this CPU can run, not only the one selected.
struct Crc32Variant {
  const char* name;  // As Crc32Implementation() reports it.
  uint32_t (*crc32)(uint32_t crc, const void* data, size_t size);
  // Whether this CPU (and its operating system) has the instructions `crc32` uses; calling it when not is undefined
  // behaviour (SIGILL).
  bool supported;
};

// Fastest first; Crc32 runs the first supported one. The last is "zlib", which runs everywhere.
const std::vector<Crc32Variant>& Crc32Variants();

// The constants of the folding, as the code uses them, each the residue x^n mod P (P the CRC-32 polynomial) in the
// CRC's own reflected form (bit 31 - i holds the coefficient of x^i, as zlib's CRC register does). Derived from P by
// crc32_test, which recomputes them bit by bit. Folding a 128-bit block n bits onwards multiplies its two 64-bit
// halves by x^(n + 64) and x^n; the carry-less multiply adds one factor x, and the constant's 32-bit register form
// another x^32, hence the powers below.
inline constexpr uint32_t kXPow2079 = 0xce3371cb;  // x^(2048 + 64 - 33) mod P: 512-bit registers, 2048 bits onwards.
inline constexpr uint32_t kXPow2015 = 0xe95c1271;  // x^(2048 - 33) mod P.
inline constexpr uint32_t kXPow543 = 0x8f352d95;   // x^(512 + 64 - 33) mod P: four 128-bit lanes, 512 bits onwards.
inline constexpr uint32_t kXPow479 = 0x1d9513d7;   // x^(512 - 33) mod P.
inline constexpr uint32_t kXPow159 = 0xae689191;   // x^(128 + 64 - 33) mod P: one lane, 128 bits onwards.
inline constexpr uint32_t kXPow95 = 0xccaa009e;    // x^(128 - 33) mod P.
inline constexpr uint32_t kXPow63 = 0xb8bc6765;    // x^(64 - 1) mod P: the last 128 bits, folded to 64.
inline constexpr uint32_t kXPow64 = 0xb1e6b092;    // x^64 mod P: the last 64 bits, folded to 32.
// Barrett's mu = floor(x^64 / P), of degree 32, without its x^32 term (which every mu has), in the same form.
inline constexpr uint32_t kBarrettMu = 0xfb808b20;

}  // namespace internal
}  // namespace kiln

#endif  // KILN_TRAINER_IO_CRC32_H_
