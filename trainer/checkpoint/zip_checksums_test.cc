#include "trainer/checkpoint/format/zip_checksums.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <set>
#include <string>

#include "ATen/ATen.h"
#include "caffe2/serialize/inline_container.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torch/serialize/output-archive.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/testing/test_support.h"

namespace kiln {
namespace {

using ::kiln::testing::FileBytes;
using ::kiln::testing::Overwrite;
using ::kiln::testing::TempDir;
using ::testing::HasSubstr;

// A real checkpoint. With nested < 0, as Kiln writes one now (a torch.save dictionary, whose records are all
// stored); otherwise a format-1 file, as earlier Kiln versions wrote (a LibTorch archive) with `nested`
// sub-archives as the trainer wrote for the model and the optimizers: LibTorch then deflates some of the
// TorchScript code it saves.
std::string WriteCheckpointFile(const std::string& dir, int nested = -1) {
  const std::string path = dir + "/small.ckpt";
  if (nested < 0) {
    c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
    state.insert(std::string("payload"), at::arange(12, at::kFloat));
    c10::impl::GenericDict contents(c10::StringType::get(), c10::AnyType::get());
    contents.insert(std::string("state_dict"), state);
    contents.insert(std::string("step"), int64_t{7});
    EXPECT_TRUE(WriteCheckpoint(path, contents).ok());
    return path;
  }
  torch::serialize::OutputArchive archive;
  archive.write("kiln_format", c10::IValue(std::string("kiln.checkpoint")));
  archive.write("kiln_format_version", c10::IValue(int64_t{1}));
  archive.write("payload", at::arange(12, at::kFloat), /*is_buffer=*/true);
  archive.write("step", c10::IValue(int64_t{7}));
  for (int i = 0; i < nested; ++i) {
    torch::serialize::OutputArchive sub;
    sub.write("weight_with_a_long_name_" + std::to_string(i), at::ones({2, 2}), /*is_buffer=*/true);
    sub.write("names", c10::IValue(c10::List<std::string>({"a", "b", "c"})));
    archive.write("sub_" + std::to_string(i), sub);
  }
  archive.save_to(path);
  return path;
}

std::string WriteSmallCheckpoint(const std::string& dir) { return WriteCheckpointFile(dir); }

// The compression methods of an archive's records, from its central directory.
std::set<int> Methods(const std::string& bytes) {
  std::set<int> methods;
  for (size_t at = bytes.find("PK\x01\x02"); at != std::string::npos && at + 12 <= bytes.size();
       at = bytes.find("PK\x01\x02", at + 4)) {
    methods.insert(static_cast<uint8_t>(bytes[at + 10]) | static_cast<uint8_t>(bytes[at + 11]) << 8);
  }
  return methods;
}

TEST(ZipChecksumsTest, AcceptsWhatKilnWrites) {
  const std::string path = WriteSmallCheckpoint(TempDir());
  EXPECT_TRUE(VerifyZipChecksums(path).ok()) << VerifyZipChecksums(path);
}

TEST(ZipChecksumsTest, AcceptsDeflatedRecords) {
  const std::string path = WriteCheckpointFile(TempDir(), /*nested=*/8);
  ASSERT_EQ(Methods(FileBytes(path)), (std::set<int>{0, 8})) << "no deflated record to check";
  EXPECT_TRUE(VerifyZipChecksums(path).ok()) << VerifyZipChecksums(path);
}

// --max_inflated_mib bounds what one file inflates to, not each record: a file of several deflated records inflating
// to the limit each is refused from its directory (testdata/shared_views_deflated.ckpt: 32 MiB in data/0, 747 bytes
// in its other records; each record passed the limit of 32 MiB alone, before the total was checked).
TEST(ZipChecksumsTest, DeflatedRecordsInflateWithinTheLimitTogether) {
  const std::string path = "trainer/checkpoint/testdata/shared_views_deflated.ckpt";
  const uint64_t limit = MaxInflatedBytes();
  SetMaxInflatedBytes(uint64_t{32} << 20);
  const absl::Status refused = VerifyZipChecksums(path);
  absl::StatusOr<ArchiveBytes> read = ReadVerifiedZip(path);
  SetMaxInflatedBytes(uint64_t{33555179});
  absl::StatusOr<ArchiveBytes> accepted = ReadVerifiedZip(path);
  SetMaxInflatedBytes(limit);
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("what its deflated records hold together (33555137 bytes by "
                                                        "record 'shared_views_deflated/data/0'"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("--max_inflated_mib"));
  EXPECT_TRUE(absl::IsResourceExhausted(read.status())) << read.status();
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  EXPECT_EQ(accepted->inflated, 33555179u);
}

// LibTorch's zip reader finds records by name compared without case, so two such records are ambiguous: a short
// data/0 and then a whole one had LibTorch read past the short one's end.
TEST(ZipChecksumsTest, RefusesRecordsWhoseNamesDifferOnlyInCase) {
  std::string zip;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) -> size_t {
      zip.append(static_cast<const char*>(data), size);
      return size;
    });
    const std::string pickle = "\x80\x02N.";
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    writer.writeRecord("data/0", "abcd", 4);
    writer.writeRecord("DATA/0", std::string(128, 'x').data(), 128);
    writer.writeEndOfFile();
  }
  const std::string path = TempDir() + "/twice.ckpt";
  Overwrite(path, zip);
  EXPECT_THAT(VerifyZipChecksums(path).message(), HasSubstr("/DATA/0' appears twice (names compared without case)"));
}

TEST(ZipChecksumsTest, RefusesWhatIsNotAZipArchive) {
  const std::string dir = TempDir();
  EXPECT_EQ(VerifyZipChecksums(dir + "/missing.ckpt").code(), absl::StatusCode::kNotFound);
  Overwrite(dir + "/empty.ckpt", "");
  EXPECT_THAT(VerifyZipChecksums(dir + "/empty.ckpt").message(), HasSubstr("too few for a zip archive"));
  Overwrite(dir + "/text.ckpt", std::string(100, 'x'));
  EXPECT_THAT(VerifyZipChecksums(dir + "/text.ckpt").message(), HasSubstr("no zip end-of-central-directory record"));
}

TEST(ZipChecksumsTest, EveryTruncationIsRefused) {
  const std::string dir = TempDir();
  const std::string bytes = FileBytes(WriteSmallCheckpoint(dir));
  const std::string path = dir + "/truncated.ckpt";
  for (size_t length = 0; length < bytes.size(); ++length) {
    Overwrite(path, bytes.substr(0, length));
    EXPECT_FALSE(VerifyZipChecksums(path).ok()) << "truncated to " << length << " of " << bytes.size() << " bytes";
  }
}

// From 2 MiB of stored records on, a second thread reads and checks the second half of the bytes, and the record
// that straddles the middle is checked by combining its two halves' CRCs: the image read is the file, byte for
// byte, and damage anywhere (the first thread's part, either side of the split, the second thread's part) is
// refused by ReadVerifiedZip as by VerifyZipChecksums (one thread, reading nothing into memory).
TEST(ZipChecksumsTest, ALargeArchiveIsReadByTwoThreadsAndDamageAnywhereIsRefused) {
  const std::string dir = TempDir();
  const std::string path = dir + "/large.ckpt";
  c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
  for (int i = 0; i < 3; ++i) state.insert("t" + std::to_string(i), at::arange(i, i + 300000, at::kFloat));
  c10::impl::GenericDict contents(c10::StringType::get(), c10::AnyType::get());
  contents.insert(std::string("state_dict"), state);
  ASSERT_TRUE(WriteCheckpoint(path, contents).ok());
  const std::string bytes = FileBytes(path);
  ASSERT_GT(bytes.size(), 3u * 1200000);
  absl::StatusOr<ArchiveBytes> read = ReadVerifiedZip(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size, bytes.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(read->data.get()), read->size), bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(read->data.get()) % (uintptr_t{2} << 20), 0u)
      << "an image of 2 MiB or more lies at a huge page's boundary";
  read = absl::UnknownError("the image released");
  // The tensors read in place keep the image alive after the read's own hold on it is gone.
  absl::StatusOr<Checkpoint> checkpoint = ReadCheckpoint(path);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const c10::impl::GenericDict read_state = checkpoint->contents.at("state_dict").toGenericDict();
  checkpoint = absl::UnknownError("the checkpoint released");
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(read_state.at("t" + std::to_string(i)).toTensor().equal(at::arange(i, i + 300000, at::kFloat))) << i;
  }
  const std::string damaged = dir + "/damaged.ckpt";
  for (const double where : {0.05, 0.3, 0.49, 0.5, 0.51, 0.7, 0.95}) {
    std::string copy = bytes;
    const size_t at = static_cast<size_t>(where * static_cast<double>(bytes.size()));
    copy[at] = static_cast<char>(copy[at] ^ 0x10);
    Overwrite(damaged, copy);
    absl::StatusOr<ArchiveBytes> refused = ReadVerifiedZip(damaged);
    ASSERT_FALSE(refused.ok()) << "byte " << at << " of " << bytes.size() << " damaged";
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("fails its CRC-32 check")) << refused.status();
    const absl::Status serial = VerifyZipChecksums(damaged);
    EXPECT_EQ(serial.message(), refused.status().message());
  }
}

// Every single damaged byte is either refused, or lands where it changes nothing that is read (a timestamp, the
// gaps LibTorch leaves between records): then the checkpoint still reads back exactly.
void CheckEverySingleByteOfDamage(int nested) {
  const std::string dir = TempDir();
  const std::string bytes = FileBytes(WriteCheckpointFile(dir, nested));
  const std::string path = dir + "/damaged.ckpt";
  Overwrite(path, bytes);
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  int refused = 0;
  int harmless = 0;
  for (size_t offset = 0; offset < bytes.size(); ++offset) {
    const char damaged = static_cast<char>(bytes[offset] ^ 0x5a);
    ASSERT_EQ(::pwrite(fd, &damaged, 1, static_cast<off_t>(offset)), 1);
    if (!VerifyZipChecksums(path).ok()) {
      ++refused;
    } else {
      ++harmless;
      absl::StatusOr<Checkpoint> checkpoint = ReadCheckpoint(path);
      ASSERT_TRUE(checkpoint.ok()) << "byte " << offset << ": " << checkpoint.status();
      if (nested < 0) {
        ASSERT_EQ(checkpoint->format_version, kCheckpointFormatVersion);
        EXPECT_TRUE(checkpoint->contents.at(std::string("state_dict"))
                        .toGenericDict()
                        .at(std::string("payload"))
                        .toTensor()
                        .equal(at::arange(12, at::kFloat)))
            << "byte " << offset;
        EXPECT_EQ(checkpoint->contents.at(std::string("step")).toInt(), 7) << "byte " << offset;
        ASSERT_EQ(::pwrite(fd, &bytes[offset], 1, static_cast<off_t>(offset)), 1);
        continue;
      }
      ASSERT_EQ(checkpoint->format_version, 1);
      torch::serialize::InputArchive& archive = *checkpoint->archive;
      at::Tensor payload;
      archive.read("payload", payload, /*is_buffer=*/true);
      EXPECT_TRUE(payload.equal(at::arange(12, at::kFloat))) << "byte " << offset;
      c10::IValue step;
      archive.read("step", step);
      EXPECT_EQ(step.toInt(), 7) << "byte " << offset;
      for (int i = 0; i < nested; ++i) {
        torch::serialize::InputArchive sub;
        archive.read("sub_" + std::to_string(i), sub);
        at::Tensor weight;
        sub.read("weight_with_a_long_name_" + std::to_string(i), weight, /*is_buffer=*/true);
        EXPECT_TRUE(weight.equal(at::ones({2, 2}))) << "byte " << offset;
      }
    }
    ASSERT_EQ(::pwrite(fd, &bytes[offset], 1, static_cast<off_t>(offset)), 1);
  }
  ::close(fd);
  std::printf("%zu bytes: %d damaged bytes refused, %d harmless\n", bytes.size(), refused, harmless);
  // The harmless bytes are the gaps between records, and header fields nobody reads (timestamps, versions, the
  // local copies of CRCs and sizes).
  EXPECT_GT(refused, static_cast<int>(bytes.size()) / 2);
}

TEST(ZipChecksumsTest, EverySingleByteOfDamageIsRefusedOrHarmless) { CheckEverySingleByteOfDamage(/*nested=*/-1); }

TEST(ZipChecksumsTest, EverySingleByteOfDamageToAFormat1FileIsRefusedOrHarmless) {
  CheckEverySingleByteOfDamage(/*nested=*/0);
}

TEST(ZipChecksumsTest, EverySingleByteOfDamageToDeflatedRecordsIsRefusedOrHarmless) {
  CheckEverySingleByteOfDamage(/*nested=*/8);
}

}  // namespace
}  // namespace kiln
