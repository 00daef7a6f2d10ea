// CRC-32C against published test vectors (RFC 3720 appendix B.4, and the usual "123456789" check value), and the
// TFRecord framing.
#include "trainer/loggers/crc32c.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/loggers/tfrecord_writer.h"

namespace kiln {
namespace {

TEST(Crc32cTest, PublishedVectors) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  std::vector<unsigned char> bytes(32, 0);
  EXPECT_EQ(Crc32c(bytes.data(), bytes.size()), 0x8A9136AAu);
  bytes.assign(32, 0xFF);
  EXPECT_EQ(Crc32c(bytes.data(), bytes.size()), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(Crc32c(bytes.data(), bytes.size()), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<unsigned char>(31 - i);
  EXPECT_EQ(Crc32c(bytes.data(), bytes.size()), 0x113FDB5Cu);
}

TEST(Crc32cTest, MaskIsTensorFlowsRotateAndAdd) {
  const uint32_t crc = Crc32c("123456789", 9);
  const uint32_t masked = MaskedCrc32c("123456789", 9);
  const uint32_t unmasked = masked - 0xa282ead8u;
  EXPECT_EQ((unmasked >> 17) | (unmasked << 15), crc);
}

TEST(TfRecordTest, FrameLayout) {
  const std::string framed = FrameTfRecord("abc");
  ASSERT_EQ(framed.size(), 8u + 4u + 3u + 4u);
  EXPECT_EQ(framed.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  const uint32_t length_crc = MaskedCrc32c(framed.data(), 8);
  EXPECT_EQ(framed.substr(8, 4), std::string(reinterpret_cast<const char*>(&length_crc), 4));  // Little-endian host.
  EXPECT_EQ(framed.substr(12, 3), "abc");
  const uint32_t data_crc = MaskedCrc32c("abc", 3);
  EXPECT_EQ(framed.substr(15, 4), std::string(reinterpret_cast<const char*>(&data_crc), 4));
}

}  // namespace
}  // namespace kiln
