#include "trainer/io/crc32.h"

#include <zlib.h>

#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kiln {
namespace {

using internal::Crc32Variant;
using internal::Crc32Variants;

// The CRC-32 polynomial in its reflected form (bit 31 - i is the coefficient of x^i; x^32 is implied), the one
// input every constant below is derived from.
constexpr uint32_t kPolynomial = 0xEDB88320;

std::vector<uint8_t> RandomBytes(size_t size, uint32_t seed) {
  std::mt19937 random(seed);
  std::vector<uint8_t> bytes(size);
  for (uint8_t& byte : bytes) byte = static_cast<uint8_t>(random());
  return bytes;
}

// The reference: zlib's crc32, a byte table at a time.
uint32_t ZlibCrc32(uint32_t crc, const uint8_t* data, size_t size) {
  return static_cast<uint32_t>(crc32_z(crc, data, size));
}

// x^n mod P in the reflected form, one multiplication by x at a time: shift towards the high powers (right, in this
// form), and subtract (xor) P when x^32 appears.
uint32_t XPowModP(int n) {
  uint32_t residue = 0x80000000;  // x^0.
  for (int i = 0; i < n; ++i) residue = (residue >> 1) ^ ((residue & 1) != 0 ? kPolynomial : 0);
  return residue;
}

uint32_t Reverse32(uint32_t value) {
  uint32_t reversed = 0;
  for (int i = 0; i < 32; ++i) reversed |= ((value >> i) & 1) << (31 - i);
  return reversed;
}

TEST(Crc32ConstantsTest, AreThePowersOfXTheirNamesSay) {
  EXPECT_EQ(XPowModP(32), kPolynomial);  // The derivation itself: x^32 = P - x^32 (mod P).
  EXPECT_EQ(XPowModP(31), 0x00000001u);  // Below x^32 nothing is reduced.
  EXPECT_EQ(internal::kXPow2079, XPowModP(2079));
  EXPECT_EQ(internal::kXPow2015, XPowModP(2015));
  EXPECT_EQ(internal::kXPow543, XPowModP(543));
  EXPECT_EQ(internal::kXPow479, XPowModP(479));
  EXPECT_EQ(internal::kXPow159, XPowModP(159));
  EXPECT_EQ(internal::kXPow95, XPowModP(95));
  EXPECT_EQ(internal::kXPow63, XPowModP(63));
  EXPECT_EQ(internal::kXPow64, XPowModP(64));
}

TEST(Crc32ConstantsTest, BarrettMuIsXTo64DividedByP) {
  // Long division in the ordinary bit order (bit i is the coefficient of x^i), on P rebuilt from its reflected form.
  const uint64_t p = (uint64_t{1} << 32) | Reverse32(kPolynomial);
  ASSERT_EQ(p, 0x104C11DB7u);  // The polynomial as the CRC-32 standard writes it.
  unsigned __int128 remainder = static_cast<unsigned __int128>(1) << 64;
  uint64_t quotient = 0;
  for (int degree = 64; degree >= 32; --degree) {
    if (((remainder >> degree) & 1) != 0) {
      remainder ^= static_cast<unsigned __int128>(p) << (degree - 32);
      quotient |= uint64_t{1} << (degree - 32);
    }
  }
  ASSERT_LT(remainder, static_cast<unsigned __int128>(1) << 32);
  EXPECT_EQ(quotient >> 32, 1u);  // mu has degree 32, and the code leaves that term implied.
  EXPECT_EQ(internal::kBarrettMu, Reverse32(static_cast<uint32_t>(quotient)));
}

TEST(Crc32Test, StandardCheckValue) {
  EXPECT_EQ(Crc32(0, "123456789", 9), 0xCBF43926u);
  EXPECT_EQ(Crc32(0, nullptr, 0), 0u);
  EXPECT_EQ(Crc32(0x12345678, nullptr, 0), 0x12345678u);
}

// Crc32 runs the first implementation this CPU supports, and says which; the log says what was and was not tested.
TEST(Crc32Test, RunsTheFastestSupportedImplementation) {
  const std::vector<Crc32Variant>& variants = Crc32Variants();
  ASSERT_FALSE(variants.empty());
  EXPECT_STREQ(variants.back().name, "zlib");
  EXPECT_TRUE(variants.back().supported);
  const Crc32Variant* first = nullptr;
  for (const Crc32Variant& variant : variants) {
    if (variant.supported && first == nullptr) first = &variant;
    std::cout << "CRC-32 implementation " << variant.name << ": "
              << (variant.supported ? "supported by this CPU, tested" : "NOT supported by this CPU, not tested")
              << "\n";
  }
  EXPECT_STREQ(Crc32Implementation(), first->name);
  std::cout << "Crc32 runs " << Crc32Implementation() << "\n";
#if defined(__x86_64__)
  bool pclmul = false;
  for (const Crc32Variant& variant : variants) pclmul |= std::string(variant.name) == "pclmulqdq" && variant.supported;
  if (!pclmul) std::cout << "NOTE: this CPU lacks PCLMULQDQ (or SSE4.1): only the zlib fallback is tested\n";
#else
  std::cout << "NOTE: not an x86-64 build: Crc32 is zlib's, and only it is tested\n";
#endif
  const std::vector<uint8_t> data = RandomBytes(100000, 1);
  EXPECT_EQ(Crc32(0, data.data(), data.size()), ZlibCrc32(0, data.data(), data.size()));
  EXPECT_EQ(Crc32(7, data.data(), 777), ZlibCrc32(7, data.data(), 777));
}

// Every implementation of this build, by name, each against zlib; those this CPU cannot run are skipped, saying so.
class Crc32VariantTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    for (const Crc32Variant& variant : Crc32Variants()) {
      if (GetParam() == variant.name) variant_ = &variant;
    }
    ASSERT_NE(variant_, nullptr);
    if (!variant_->supported) {
      GTEST_SKIP() << "this CPU lacks the instructions of the " << variant_->name << " implementation; Crc32 runs "
                   << Crc32Implementation();
    }
  }

  uint32_t Crc(uint32_t crc, const uint8_t* data, size_t size) const { return variant_->crc32(crc, data, size); }

  const Crc32Variant* variant_ = nullptr;
};

std::vector<std::string> VariantNames() {
  std::vector<std::string> names;
  for (const Crc32Variant& variant : Crc32Variants()) names.emplace_back(variant.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(AllImplementations, Crc32VariantTest, ::testing::ValuesIn(VariantNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST_P(Crc32VariantTest, StandardCheckValue) {
  const std::string check = "123456789";
  EXPECT_EQ(Crc(0, reinterpret_cast<const uint8_t*>(check.data()), check.size()), 0xCBF43926u);
}

// Every length through the thresholds and tails: short inputs, one lane, four lanes, 512-bit registers.
TEST_P(Crc32VariantTest, EveryLengthTo1024MatchesZlib) {
  const std::vector<uint8_t> data = RandomBytes(1024, 2);
  std::mt19937 random(3);
  for (size_t size = 0; size <= data.size(); ++size) {
    ASSERT_EQ(Crc(0, data.data(), size), ZlibCrc32(0, data.data(), size)) << "size " << size;
    const uint32_t start = static_cast<uint32_t>(random());
    ASSERT_EQ(Crc(start, data.data(), size), ZlibCrc32(start, data.data(), size))
        << "size " << size << ", from " << start;
  }
}

TEST_P(Crc32VariantTest, LargeSizesMatchZlib) {
  const std::vector<uint8_t> data = RandomBytes((3 << 20) + 1000, 4);
  for (const size_t size : {size_t{1} << 20, (size_t{1} << 20) + 1, (size_t{1} << 20) + 15, (size_t{1} << 20) + 17,
                            (size_t{1} << 20) + 255, (size_t{1} << 20) + 999, (size_t{3} << 20) + 77}) {
    EXPECT_EQ(Crc(0, data.data(), size), ZlibCrc32(0, data.data(), size)) << "size " << size;
    EXPECT_EQ(Crc(0xDEADBEEF, data.data() + 1, size), ZlibCrc32(0xDEADBEEF, data.data() + 1, size)) << "size " << size;
  }
}

// Folding loads unaligned; every start within a cache line, at lengths on both sides of each threshold.
TEST_P(Crc32VariantTest, EveryAlignmentMatchesZlib) {
  const std::vector<uint8_t> bytes = RandomBytes(8192 + 128, 5);
  const uint8_t* aligned = bytes.data() + (64 - reinterpret_cast<uintptr_t>(bytes.data()) % 64) % 64;
  for (size_t offset = 0; offset < 64; ++offset) {
    for (const size_t size : {1, 15, 16, 17, 31, 63, 64, 65, 127, 255, 256, 257, 511, 1000, 4099, 8192}) {
      const uint8_t* data = aligned + offset;
      ASSERT_EQ(Crc(0, data, size), ZlibCrc32(0, data, size)) << "offset " << offset << ", size " << size;
      ASSERT_EQ(Crc(~0u, data, size), ZlibCrc32(~0u, data, size)) << "offset " << offset << ", size " << size;
    }
  }
}

// Crc32(Crc32(0, a), b) is the CRC-32 of a followed by b, wherever the message is cut, in two pieces or three.
TEST_P(Crc32VariantTest, ContinuesInPieces) {
  const std::vector<uint8_t> data = RandomBytes(3000, 6);
  const uint32_t whole = ZlibCrc32(0, data.data(), data.size());
  for (size_t cut = 0; cut <= data.size(); ++cut) {
    const uint32_t first = Crc(0, data.data(), cut);
    ASSERT_EQ(Crc(first, data.data() + cut, data.size() - cut), whole) << "cut at " << cut;
  }
  for (size_t cut = 0; cut + 700 <= data.size(); cut += 37) {
    uint32_t crc = Crc(0, data.data(), cut);
    crc = Crc(crc, data.data() + cut, 700);
    ASSERT_EQ(Crc(crc, data.data() + cut + 700, data.size() - cut - 700), whole) << "cuts at " << cut;
  }
}

// Inputs with no randomness: every bit clear, every bit set (each bit of the register then meets the same data).
TEST_P(Crc32VariantTest, UniformDataMatchesZlib) {
  for (const uint8_t value : {0x00, 0xFF, 0x80, 0x01}) {
    const std::vector<uint8_t> data(70000, value);
    for (const size_t size : {16, 64, 256, 4096, 70000}) {
      EXPECT_EQ(Crc(0, data.data(), size), ZlibCrc32(0, data.data(), size)) << "byte " << int{value} << ", " << size;
    }
  }
}

}  // namespace
}  // namespace kiln
