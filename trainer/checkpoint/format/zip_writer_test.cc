#include "trainer/checkpoint/format/zip_writer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "caffe2/serialize/inline_container.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint/format/zip_checksums.h"
#include "trainer/io/durable_file.h"
#include "trainer/testing/test_support.h"

namespace kiln {
namespace {

using ::kiln::testing::TempDir;

// Records of sizes around the alignment and the names LibTorch's reader looks for.
TEST(ZipWriterTest, LibTorchsReaderAndKilnsCheckReadWhatItWrites) {
  std::vector<std::string> data = {std::string(), "x", std::string(63, 'a'), std::string(64, 'b'),
                                   std::string(100000, 'c'), "3\n"};
  const std::vector<std::string> names = {"archive/data/0", "archive/data/1", "archive/data/2",
                                          "archive/data/3", "archive/data.pkl", "archive/version"};
  ZipWriter zip;
  for (size_t i = 0; i < data.size(); ++i) zip.Add(names[i], data[i]);
  const std::string path = TempDir() + "/written.zip";
  const std::vector<absl::string_view>& pieces = zip.Finish();
  ASSERT_TRUE(WriteFileDurably(path, absl::MakeConstSpan(pieces)).ok());
  EXPECT_TRUE(VerifyZipChecksums(path).ok()) << VerifyZipChecksums(path);

  caffe2::serialize::PyTorchStreamReader reader(path);
  for (size_t i = 0; i < data.size(); ++i) {
    const std::string record = names[i].substr(std::string("archive/").size());
    ASSERT_TRUE(reader.hasRecord(record)) << record;
    EXPECT_EQ(reader.getRecordOffset(record) % ZipWriter::kAlignment, 0u) << record;
    auto [bytes, size] = reader.getRecord(record);
    EXPECT_EQ(std::string(static_cast<const char*>(bytes.get()), size), data[i]) << record;
  }
  EXPECT_EQ(zip.size(), static_cast<uint64_t>(::testing::internal::GetFileSize(fopen(path.c_str(), "rb"))));
}

// A damaged byte in a record is found by the CRC the writer computed.
TEST(ZipWriterTest, ItsCrcsFindDamage) {
  const std::string payload(5000, 'p');
  ZipWriter zip;
  zip.Add("archive/data/0", payload);
  const std::string path = TempDir() + "/damaged.zip";
  ASSERT_TRUE(WriteFileDurably(path, absl::MakeConstSpan(zip.Finish())).ok());
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "q", 1, 2000), 1);
  ::close(fd);
  const absl::Status status = VerifyZipChecksums(path);
  EXPECT_NE(std::string(status.message()).find("fails its CRC-32 check"), std::string::npos) << status;
}

// The zip64 forms: a record of 4 GiB + 1 byte (its sizes do not fit in 32 bits) and one after it (its offset does
// not). The big record is zeros: read from pages the kernel never backs, and written as a hole in a sparse file, so
// the test takes no memory or disk to speak of (but some 10 s: 4 GiB's CRC is computed twice, and read once).
TEST(ZipWriterTest, RecordsAndOffsetsPast4GiBUseZip64) {
  const uint64_t big = (uint64_t{1} << 32) + 1;
  void* zeros = ::mmap(nullptr, big, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(zeros, MAP_FAILED);
  ZipWriter zip;
  zip.Add("archive/data/0", absl::string_view(static_cast<const char*>(zeros), big));
  zip.Add("archive/data/1", "after");
  zip.Add("archive/version", "3\n");  // LibTorch's reader wants it.
  const std::vector<absl::string_view>& pieces = zip.Finish();
  const std::string path = TempDir() + "/zip64.zip";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  uint64_t offset = 0;
  for (absl::string_view piece : pieces) {
    if (piece.data() != zeros) ASSERT_EQ(::pwrite(fd, piece.data(), piece.size(), offset), piece.size());
    offset += piece.size();  // The zeros stay a hole.
  }
  ASSERT_EQ(offset, zip.size());
  ::close(fd);
  ::munmap(zeros, big);
  EXPECT_TRUE(VerifyZipChecksums(path).ok()) << VerifyZipChecksums(path);
  caffe2::serialize::PyTorchStreamReader reader(path);
  EXPECT_EQ(reader.getRecordSize("data/0"), big);
  auto [after, size] = reader.getRecord("data/1");
  EXPECT_EQ(std::string(static_cast<const char*>(after.get()), size), "after");
  EXPECT_GT(reader.getRecordOffset("data/1"), uint64_t{1} << 32);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kiln
