// The protocol-buffer encoder and the record log of W&B's run files, against the wire format's documented examples
// (protobuf's encoding guide) and wandb's datastore layout (wandb_records.h). //tests/loggers:wandb_test reads whole
// run files with wandb's own reader.
#include "trainer/loggers/wandb_records.h"

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace kiln::wandb {
namespace {

std::string Bytes(std::initializer_list<int> bytes) {
  std::string out;
  for (int b : bytes) out.push_back(static_cast<char>(b));
  return out;
}

uint32_t LittleEndian32(const std::string& s, size_t at) {
  return static_cast<uint32_t>(static_cast<unsigned char>(s[at])) |
         static_cast<uint32_t>(static_cast<unsigned char>(s[at + 1])) << 8 |
         static_cast<uint32_t>(static_cast<unsigned char>(s[at + 2])) << 16 |
         static_cast<uint32_t>(static_cast<unsigned char>(s[at + 3])) << 24;
}

size_t Length(const std::string& s, size_t at) {
  return static_cast<unsigned char>(s[at + 4]) | static_cast<unsigned char>(s[at + 5]) << 8;
}

int Type(const std::string& s, size_t at) { return s[at + 6]; }

TEST(ProtoMessageTest, EncodesTheGuidesExamples) {
  // protobuf.dev's encoding guide: field 1 = 150 is 08 96 01; field 2 = "testing" is 12 07 74 65 73 74 69 6e 67.
  EXPECT_EQ(ProtoMessage().Varint(1, 150).bytes(), Bytes({0x08, 0x96, 0x01}));
  EXPECT_EQ(ProtoMessage().Bytes(2, "testing").bytes(), Bytes({0x12, 0x07, 't', 'e', 's', 't', 'i', 'n', 'g'}));
  // An embedded message (field 3 holding field 1 = 150) is 1a 03 08 96 01.
  EXPECT_EQ(ProtoMessage().Message(3, ProtoMessage().Varint(1, 150)).bytes(), Bytes({0x1a, 0x03, 0x08, 0x96, 0x01}));
  // A negative int32 takes ten bytes (two's complement over 64 bits); -2 is fe ff ff ff ff ff ff ff ff 01.
  EXPECT_EQ(ProtoMessage().Varint(1, -2).bytes(),
            Bytes({0x08, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));
  // A double is wire type 1, eight bytes little-endian: 1.0 is 0x3ff0000000000000.
  EXPECT_EQ(ProtoMessage().Double(1, 1.0).bytes(), Bytes({0x09, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f}));
  // Field 200 (wandb's _info) needs a two-byte tag: (200 << 3 | 2) = 1602 = c2 0c.
  EXPECT_EQ(ProtoMessage().Bytes(200, "").bytes(), Bytes({0xc2, 0x0c, 0x00}));
}

TEST(RecordLogTest, HeaderIsWandbs) {
  EXPECT_EQ(LogFileHeader(), Bytes({':', 'W', '&', 'B', 0xe1, 0xbe, 0x00}));
}

TEST(RecordLogTest, ChecksumIsZlibsCrc32OfTheTypeAndTheData) {
  std::string out;
  int64_t offset = kLogHeaderSize;
  AppendLogRecord("", out, offset);
  ASSERT_EQ(out.size(), 7u);
  EXPECT_EQ(LittleEndian32(out, 0), 0xa505df1bu);  // Python: zlib.crc32(b"\x01").
  EXPECT_EQ(Length(out, 0), 0u);
  EXPECT_EQ(Type(out, 0), 1);
  out.clear();
  AppendLogRecord("abc", out, offset);
  EXPECT_EQ(LittleEndian32(out, 0), 0x539d20a9u);  // zlib.crc32(b"\x01abc").
  EXPECT_EQ(out.substr(7), "abc");
  EXPECT_EQ(offset, 7 + 7 + 7 + 3);
}

TEST(RecordLogTest, LongMessagesArePiecesToTheBlocksEnd) {
  const std::string message(70000, 'x');
  std::string out;
  int64_t offset = kLogHeaderSize;
  AppendLogRecord(message, out, offset);
  // The first block holds the file header, a record header and 32768 - 14 bytes; the second a header and 32761;
  // the third the rest.
  const size_t first = kLogBlockSize - 2 * kLogHeaderSize;
  const size_t middle = kLogBlockSize - kLogHeaderSize;
  EXPECT_EQ(Type(out, 0), 2);
  EXPECT_EQ(Length(out, 0), first);
  const size_t second = kLogHeaderSize + first;
  EXPECT_EQ(Type(out, second), 3);
  EXPECT_EQ(Length(out, second), middle);
  const size_t third = second + kLogHeaderSize + middle;
  EXPECT_EQ((third + kLogHeaderSize) % kLogBlockSize, 0u);  // Where the third block starts, in the file.
  EXPECT_EQ(Type(out, third), 4);
  EXPECT_EQ(Length(out, third), message.size() - first - middle);
  EXPECT_EQ(out.size(), 3 * kLogHeaderSize + message.size());
  EXPECT_EQ(offset, kLogHeaderSize + static_cast<int64_t>(out.size()));
}

TEST(RecordLogTest, ABlockWithNoRoomForAHeaderEndsInZeros) {
  std::string out;
  int64_t offset = kLogBlockSize - 5;
  AppendLogRecord("abc", out, offset);
  EXPECT_EQ(out.substr(0, 5), std::string(5, '\0'));
  EXPECT_EQ(Type(out, 5), 1);
  EXPECT_EQ(offset, kLogBlockSize + 7 + 3);
  // Exactly a header's room left: an empty piece fits there, then the rest in the next block.
  out.clear();
  offset = kLogBlockSize - 7;
  AppendLogRecord("abc", out, offset);
  EXPECT_EQ(Type(out, 0), 2);
  EXPECT_EQ(Length(out, 0), 0u);
  EXPECT_EQ(Type(out, 7), 4);
  EXPECT_EQ(Length(out, 7), 3u);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

TEST(RecordLogFileTest, WritesAndGoesOnWhereItWasTold) {
  const std::string path = ::testing::TempDir() + "/run-test.wandb";
  ::unlink(path.c_str());
  auto file = RecordLogFile::Create(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE((*file)->Append("one").ok());
  const int64_t mark = (*file)->offset();
  ASSERT_TRUE((*file)->Append("two").ok());
  ASSERT_TRUE((*file)->Close().ok());
  EXPECT_FALSE((*file)->Append("three").ok());
  EXPECT_EQ(ReadFile(path).size(), 7u + 10u + 10u);
  // Never over an existing file.
  auto again = RecordLogFile::Create(path);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find(path), std::string::npos) << again.status();
  auto continued = RecordLogFile::ContinueAt(path, mark);
  ASSERT_TRUE(continued.ok()) << continued.status();
  ASSERT_TRUE((*continued)->Append("2").ok());
  ASSERT_TRUE((*continued)->Close().ok());
  const std::string bytes = ReadFile(path);
  ASSERT_EQ(bytes.size(), 7u + 10u + 8u);
  EXPECT_EQ(bytes.substr(17 + 7), "2");
}

}  // namespace
}  // namespace kiln::wandb
