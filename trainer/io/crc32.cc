#include "trainer/io/crc32.h"

#include <zlib.h>

#include <cstdint>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// The method (Gopal et al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ Instruction", Intel, 2009),
// in the reflected bit order zip's CRC uses. A message of n bits is the polynomial M(x) whose first bit (bit 0 of its
// first byte) is the coefficient of x^(n-1); the CRC register after it is M(x) * x^32 mod P. So a 128-bit register
// loaded from memory stands for sum of bit i * x^(127 - i): its low 64 bits are the high-degree half. Carry-less
// multiplication of two such 64-bit halves gives their product times x, in the same order.
//
// Folding: a block B followed by n more bits contributes B * x^n to M, and B * x^n mod P needs only B's two halves
// times constants (x^n's residues, crc32.h), a 96-bit result that is xor-ed into the block n bits on. Four (or, with
// 512-bit registers, sixteen) blocks fold in parallel, hiding the multiplier's latency, until one 128-bit block is
// left; it is folded to 64, then 32 bits, and Barrett's reduction (a multiply by mu = floor(x^64 / P) instead of a
// division) gives the register. What is shorter than a block goes through zlib, as do inputs too short to fold.

namespace kiln {
namespace {

// zlib's crc32 over any size (its crc32 takes a 32-bit length; crc32_z a size_t).
uint32_t ZlibCrc32(uint32_t crc, const void* data, size_t size) {
  if (size == 0) return crc;  // zlib returns 0 for a null `data`; Kiln's contract returns `crc`.
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), size));
}

#if defined(__x86_64__)

// Folding needs one 128-bit block; shorter inputs are zlib's.
constexpr size_t kMinFoldBytes = 16;
// The 512-bit loop folds 256 bytes at a time; shorter inputs take the 128-bit path.
constexpr size_t kMinWideFoldBytes = 256;

// A constant pair for folding n bits onwards: the multiplier of a block's low (high-degree) half in the low 64 bits,
// that of its high half in the high 64 bits. Each residue r = x^k mod P, in the low 32 bits, stands for r * x^32
// there (the 64-bit half's order), which with the multiply's own x makes x^(k + 33).
__attribute__((target("pclmul,sse4.1"))) __m128i FoldConstants(uint32_t low_half, uint32_t high_half) {
  return _mm_set_epi64x(static_cast<int64_t>(high_half), static_cast<int64_t>(low_half));
}

// `block` * x^n, congruent mod P, where `k` holds the constants of n.
__attribute__((target("pclmul,sse4.1"))) inline __m128i Fold(__m128i block, __m128i k) {
  return _mm_xor_si128(_mm_clmulepi64_si128(block, k, 0x00), _mm_clmulepi64_si128(block, k, 0x11));
}

__attribute__((target("pclmul,sse4.1"))) inline __m128i Load(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// The carry-less product of two 64-bit halves, and the halves of a 128-bit register.
__attribute__((target("pclmul,sse4.1"))) inline __m128i Multiply(uint64_t a, uint64_t b) {
  return _mm_clmulepi64_si128(_mm_cvtsi64_si128(static_cast<int64_t>(a)), _mm_cvtsi64_si128(static_cast<int64_t>(b)),
                              0x00);
}
__attribute__((target("pclmul,sse4.1"))) inline uint64_t Low(__m128i x) {
  return static_cast<uint64_t>(_mm_cvtsi128_si64(x));
}
__attribute__((target("pclmul,sse4.1"))) inline uint64_t High(__m128i x) {
  return static_cast<uint64_t>(_mm_extract_epi64(x, 1));
}

// The CRC register (before the final xor) of a message that is congruent to the 128-bit `block`: block * x^32 mod P.
__attribute__((target("pclmul,sse4.1"))) uint32_t Reduce(__m128i block) {
  // x^63 mod P in the high 32 bits: a multiplier of degree < 32 (with the multiply's x, x^64), so that each fold
  // below shrinks its operand instead of only moving it.
  const uint64_t x63 = uint64_t{internal::kXPow63} << 32;
  // 128 -> 96 bits: the high-degree half times x^64, plus the low-degree half. The product's low half then holds
  // the 32 coefficients above x^63 (in its bits 32 to 63).
  const __m128i folded = Multiply(Low(block), x63);
  // 96 -> 64 bits: those 32 coefficients times x^64 the same way, landing in the high half with the rest.
  const uint64_t v = High(Multiply(Low(folded), x63)) ^ High(folded) ^ High(block);
  // V * x^32 for that 64-bit V: its top 32 coefficients (v's low bits) land above x^63; fold them with x^64 mod P,
  // the constant shifted by one bit so that the product's low half is exactly top * (x^64 mod P). U, of degree < 64.
  const uint64_t u = Low(Multiply(v & 0xFFFFFFFF, uint64_t{internal::kXPow64} << 1)) ^ (v >> 32);
  // Barrett: U mod P. The quotient q = floor(floor(U / x^32) * mu / x^32) comes out as the product's low half, with
  // mu's x^32 term at bit 31 and U's top half shifted by one bit against the multiply's x.
  const uint64_t mu = (uint64_t{internal::kBarrettMu} << 32) | 0x80000000;
  const uint64_t q = Low(Multiply((u & 0xFFFFFFFF) << 1, mu));
  // U - q * P, whose terms from x^32 up cancel: the low 32 coefficients of q * P (P's 33 bits, times the multiply's
  // x, so from bit 31 of the high half on) against U's.
  const uint64_t p = (uint64_t{0xEDB88320} << 32) | 0x80000000;
  return static_cast<uint32_t>((High(Multiply(q, p)) >> 31) ^ (u >> 32));
}

// The CRC-32 of a message whose first part is folded into `block` and whose last `size` bytes are at `p`.
__attribute__((target("pclmul,sse4.1"))) uint32_t Finish(__m128i block, const uint8_t* p, size_t size) {
  const __m128i k128 = FoldConstants(internal::kXPow159, internal::kXPow95);
  for (; size >= 16; p += 16, size -= 16) block = _mm_xor_si128(Fold(block, k128), Load(p));
  return ZlibCrc32(~Reduce(block), p, size);
}

__attribute__((target("pclmul,sse4.1"))) uint32_t Crc32Pclmul(uint32_t crc, const void* data, size_t size) {
  if (size < kMinFoldBytes) return ZlibCrc32(crc, data, size);
  const auto* p = static_cast<const uint8_t*>(data);
  // The register continues into the first 32 bits of the message: xor-ed into them, it is the same polynomial.
  __m128i x0 = _mm_xor_si128(Load(p), _mm_cvtsi32_si128(static_cast<int>(~crc)));
  if (size < 64) return Finish(x0, p + 16, size - 16);  // One lane.
  __m128i x1 = Load(p + 16);
  __m128i x2 = Load(p + 32);
  __m128i x3 = Load(p + 48);
  p += 64;
  size -= 64;
  const __m128i k512 = FoldConstants(internal::kXPow543, internal::kXPow479);
  for (; size >= 64; p += 64, size -= 64) {
    x0 = _mm_xor_si128(Fold(x0, k512), Load(p));
    x1 = _mm_xor_si128(Fold(x1, k512), Load(p + 16));
    x2 = _mm_xor_si128(Fold(x2, k512), Load(p + 32));
    x3 = _mm_xor_si128(Fold(x3, k512), Load(p + 48));
  }
  const __m128i k128 = FoldConstants(internal::kXPow159, internal::kXPow95);
  x1 = _mm_xor_si128(Fold(x0, k128), x1);
  x2 = _mm_xor_si128(Fold(x1, k128), x2);
  x3 = _mm_xor_si128(Fold(x2, k128), x3);
  return Finish(x3, p, size);
}

// The same four 128-bit lanes in each 512-bit register: `block` * x^n ^ `next`.
__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1"))) inline __m512i Fold512(__m512i block, __m512i k,
                                                                                   __m512i next) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(block, k, 0x00), _mm512_clmulepi64_epi128(block, k, 0x11),
                                   next, 0x96);  // 0x96: a ^ b ^ c.
}

// FoldConstants in each 128-bit lane.
__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1"))) inline __m512i Broadcast(uint32_t low_half,
                                                                                     uint32_t high_half) {
  const auto low = static_cast<int64_t>(low_half);
  const auto high = static_cast<int64_t>(high_half);
  return _mm512_set_epi64(high, low, high, low, high, low, high, low);
}

__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1"))) inline __m512i Load512(const uint8_t* p) {
  return _mm512_loadu_si512(p);
}

__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1"))) uint32_t Crc32Vpclmul(uint32_t crc, const void* data,
                                                                                  size_t size) {
  if (size < kMinWideFoldBytes) return Crc32Pclmul(crc, data, size);
  const auto* p = static_cast<const uint8_t*>(data);
  __m512i z0 = _mm512_xor_si512(Load512(p), _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(~crc))));
  __m512i z1 = Load512(p + 64);
  __m512i z2 = Load512(p + 128);
  __m512i z3 = Load512(p + 192);
  p += 256;
  size -= 256;
  const __m512i k2048 = Broadcast(internal::kXPow2079, internal::kXPow2015);
  for (; size >= 256; p += 256, size -= 256) {
    z0 = Fold512(z0, k2048, Load512(p));
    z1 = Fold512(z1, k2048, Load512(p + 64));
    z2 = Fold512(z2, k2048, Load512(p + 128));
    z3 = Fold512(z3, k2048, Load512(p + 192));
  }
  const __m512i k512 = Broadcast(internal::kXPow543, internal::kXPow479);
  z1 = Fold512(z0, k512, z1);
  z2 = Fold512(z1, k512, z2);
  z3 = Fold512(z2, k512, z3);
  for (; size >= 64; p += 64, size -= 64) z3 = Fold512(z3, k512, Load512(p));
  // Its four lanes, first (highest degree) to last, into one.
  const __m128i k128 = FoldConstants(internal::kXPow159, internal::kXPow95);
  // (The maskz_ forms: the plain ones start from an undefined register, which GCC 12 warns may be uninitialised.)
  __m128i x = _mm512_maskz_extracti32x4_epi32(0xF, z3, 0);
  x = _mm_xor_si128(Fold(x, k128), _mm512_maskz_extracti32x4_epi32(0xF, z3, 1));
  x = _mm_xor_si128(Fold(x, k128), _mm512_maskz_extracti32x4_epi32(0xF, z3, 2));
  x = _mm_xor_si128(Fold(x, k128), _mm512_maskz_extracti32x4_epi32(0xF, z3, 3));
  return Finish(x, p, size);
}

bool HasPclmul() {
  __builtin_cpu_init();  // Crc32 may run before the constructors that would otherwise do it.
  return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
}

// __builtin_cpu_supports reports AVX-512 only when the operating system saves its registers (XCR0).
bool HasVpclmul() { return HasPclmul() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq"); }

#endif  // defined(__x86_64__)

const internal::Crc32Variant& Selected() {
  static const internal::Crc32Variant* selected = [] {
    const std::vector<internal::Crc32Variant>& variants = internal::Crc32Variants();
    size_t first = 0;
    while (!variants[first].supported) ++first;  // The last, zlib, always is.
    return &variants[first];
  }();
  return *selected;
}

}  // namespace

namespace internal {

const std::vector<Crc32Variant>& Crc32Variants() {
  static const std::vector<Crc32Variant>* variants = [] {
    auto* list = new std::vector<Crc32Variant>;
#if defined(__x86_64__)
    list->push_back({"vpclmulqdq", &Crc32Vpclmul, HasVpclmul()});
    list->push_back({"pclmulqdq", &Crc32Pclmul, HasPclmul()});
#endif
    list->push_back({"zlib", &ZlibCrc32, true});
    return list;
  }();
  return *variants;
}

}  // namespace internal

uint32_t Crc32(uint32_t crc, const void* data, size_t size) { return Selected().crc32(crc, data, size); }

const char* Crc32Implementation() { return Selected().name; }

}  // namespace kiln
