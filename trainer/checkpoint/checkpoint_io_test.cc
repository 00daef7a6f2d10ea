#include "trainer/checkpoint/checkpoint_io.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torch/serialize.h"
#include "trainer/checkpoint/format/torch_file.h"
#include "trainer/testing/test_support.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::kiln::testing::FileBytes;
using ::kiln::testing::Overwrite;
using ::kiln::testing::TempDir;
using ::testing::HasSubstr;

c10::impl::GenericDict NewDict() { return c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()); }

c10::impl::GenericDict WithTensor(const at::Tensor& tensor) {
  c10::impl::GenericDict state = NewDict();
  state.insert(std::string("payload"), tensor);
  c10::impl::GenericDict contents = NewDict();
  contents.insert(std::string("state_dict"), state);
  return contents;
}

absl::Status WriteTensor(const std::string& path, const at::Tensor& tensor) {
  return WriteCheckpoint(path, WithTensor(tensor));
}

at::Tensor ReadTensor(const absl::StatusOr<Checkpoint>& checkpoint) {
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(checkpoint->format_version, kCheckpointFormatVersion);
  const std::vector<std::pair<std::string, at::Tensor>> state = CheckpointStateDict(*checkpoint);
  EXPECT_EQ(state.size(), 1u);
  return state.at(0).second;
}

at::Tensor ReadTensor(const std::string& path) { return ReadTensor(ReadCheckpoint(path)); }

TEST(CheckpointIoTest, RoundTripsAndLeavesNoTemporaryFiles) {
  const std::string dir = TempDir() + "/nested/folder";
  const at::Tensor tensor = at::arange(100, at::kFloat);
  ASSERT_TRUE(WriteTensor(dir + "/a.ckpt", tensor).ok());
  EXPECT_TRUE(ReadTensor(dir + "/a.ckpt").equal(tensor));
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(entry.path().filename(), "a.ckpt");
  }
  EXPECT_EQ(files, 1);
}

// A stored record's tensor shares the file's bytes read into memory (torch_file.h's in-place read): its storage is not
// one LibTorch's allocator made (whose context is the data itself), and the file's bytes outlive the checkpoint for as
// long as the tensor holds them.
TEST(CheckpointIoTest, TensorsAreReadInPlaceFromTheFilesBytes) {
  const std::string path = TempDir() + "/in_place.ckpt";
  const at::Tensor tensor = at::arange(1000, at::kFloat);
  ASSERT_TRUE(WriteTensor(path, tensor).ok());
  at::Tensor read;
  {
    absl::StatusOr<Checkpoint> checkpoint = ReadCheckpoint(path);
    read = ReadTensor(checkpoint);
  }
  const c10::DataPtr& data = read.storage().data_ptr();
  EXPECT_NE(data.get_context(), data.get()) << "the record was copied into memory of its own";
  EXPECT_EQ(reinterpret_cast<uintptr_t>(data.get()) % 64, 0u);
  EXPECT_TRUE(read.equal(tensor)) << "after the checkpoint that read it is gone";
  read.add_(1);  // The bytes are the reader's own memory: writable, not the file.
  EXPECT_TRUE(ReadTensor(path).equal(tensor));
}

TEST(CheckpointIoTest, RefusesMissingForeignTruncatedAndDamagedFiles) {
  const std::string dir = TempDir();
  const std::string good = dir + "/good.ckpt";
  ASSERT_TRUE(WriteTensor(good, at::randn({256, 256})).ok());
  const std::string bytes = FileBytes(good);

  EXPECT_EQ(ReadCheckpoint(dir + "/missing.ckpt").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ReadCheckpoint(dir + "/missing.ckpt").status().message(), HasSubstr("missing.ckpt does not exist"));

  const std::string foreign = dir + "/foreign.ckpt";
  torch::save(at::ones({3}), foreign);  // A real LibTorch archive, but not a Kiln checkpoint.
  EXPECT_THAT(ReadCheckpoint(foreign).status().message(), HasSubstr("foreign.ckpt is not a Kiln checkpoint"));

  // What torch.save writes, but for a dictionary that is not a checkpoint, and for something that is no dictionary.
  const std::string no_state = dir + "/no_state.ckpt";
  c10::impl::GenericDict other = NewDict();
  other.insert(std::string("weights"), at::ones({3}));
  Overwrite(no_state, SerializeTorchFile(other).value());
  EXPECT_THAT(ReadCheckpoint(no_state).status().message(), HasSubstr("no_state.ckpt is a torch.save file but not a "
                                                                     "checkpoint: it has no 'state_dict'"));
  const std::string list = dir + "/list.ckpt";
  Overwrite(list, SerializeTorchFile(c10::impl::GenericList(c10::AnyType::get())).value());
  EXPECT_THAT(std::string(ReadCheckpoint(list).status().message()), HasSubstr("list.ckpt holds a GenericList, not a checkpoint"));

  const std::string text = dir + "/text.ckpt";
  Overwrite(text, "hello, I am not a checkpoint\n");
  EXPECT_THAT(ReadCheckpoint(text).status().message(), HasSubstr("text.ckpt is damaged, truncated"));

  const std::string truncated = dir + "/truncated.ckpt";
  Overwrite(truncated, bytes.substr(0, bytes.size() / 2));
  EXPECT_THAT(ReadCheckpoint(truncated).status().message(), HasSubstr("truncated.ckpt is damaged, truncated"));

  // Flip bytes inside the tensor data: the zip records' CRC-32 catches it when the tensor is read.
  const std::string damaged = dir + "/damaged.ckpt";
  std::string flipped = bytes;
  for (size_t i = bytes.size() / 3; i < bytes.size() / 3 + 64; ++i) flipped[i] = static_cast<char>(~flipped[i]);
  Overwrite(damaged, flipped);
  absl::StatusOr<Checkpoint> opened = ReadCheckpoint(damaged);
  bool refused = !opened.ok();
  if (!refused) refused = !ReadTensor(opened).equal(ReadTensor(good));
  EXPECT_TRUE(refused) << "a damaged checkpoint was read back as if it were intact";

  const std::string folder = dir + "/folder.ckpt";
  fs::create_directory(folder);
  EXPECT_THAT(ReadCheckpoint(folder).status().message(),
              HasSubstr("is a folder without meta.pt, so not a sharded checkpoint"));
}

TEST(CheckpointIoTest, NewerFormatVersionIsRefused) {
  const std::string path = TempDir() + "/future.ckpt";
  torch::serialize::OutputArchive archive;
  archive.write("kiln_format", c10::IValue(std::string("kiln.checkpoint")));
  archive.write("kiln_format_version", c10::IValue(kCheckpointFormatVersion + 1));
  archive.save_to(path);
  EXPECT_THAT(ReadCheckpoint(path).status().message(), HasSubstr("newer than this Kiln reads"));

  // The same in today's format.
  const std::string dict_path = TempDir() + "/future2.ckpt";
  c10::impl::GenericDict contents = WithTensor(at::ones({2}));
  c10::impl::GenericDict kiln = NewDict();
  kiln.insert(std::string("kiln_format"), std::string("kiln.checkpoint"));
  kiln.insert(std::string("kiln_format_version"), kCheckpointFormatVersion + 1);
  contents.insert(std::string("kiln"), kiln);
  Overwrite(dict_path, SerializeTorchFile(contents).value());
  EXPECT_THAT(ReadCheckpoint(dict_path).status().message(), HasSubstr("newer than this Kiln reads"));
}

TEST(CheckpointIoTest, AFailedWriteKeepsThePreviousCheckpoint) {
  const std::string dir = TempDir();
  const std::string path = dir + "/model.ckpt";
  const at::Tensor old_tensor = at::arange(10, at::kFloat);
  ASSERT_TRUE(WriteTensor(path, old_tensor).ok());

  // A full disk, simulated with a file-size limit: writes past it fail with EFBIG (SIGXFSZ is ignored).
  struct rlimit original;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &original), 0);
  auto previous_handler = signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = original;
  small.rlim_cur = 64 * 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  absl::Status status = WriteTensor(path, at::randn({512, 512}));  // 1 MiB of data.
  setrlimit(RLIMIT_FSIZE, &original);
  signal(SIGXFSZ, previous_handler);

  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(status.message(), HasSubstr("model.ckpt.tmp-"));
  EXPECT_THAT(status.message(), HasSubstr("the previous checkpoint (if any) is intact"));
  EXPECT_TRUE(ReadTensor(path).equal(old_tensor));
  for (const auto& entry : fs::directory_iterator(dir)) EXPECT_EQ(entry.path().filename(), "model.ckpt");

  // A folder that cannot be created (a file is in the way).
  Overwrite(dir + "/blocker", "x");
  EXPECT_THAT(WriteTensor(dir + "/blocker/x.ckpt", old_tensor).message(), HasSubstr("cannot create the folder"));
}

TEST(CheckpointIoTest, RemovesOnlyTemporaryFilesOfProcessesThatAreGone) {
  const std::string dir = TempDir();
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  ASSERT_GT(gone, 0);
  waitpid(gone, nullptr, 0);
  const std::string stale = dir + "/last.ckpt.tmp-" + std::to_string(gone);
  const std::string mine = dir + "/last.ckpt.tmp-" + std::to_string(getpid());
  const std::string running = dir + "/epoch=0-step=2.ckpt.tmp-1";  // init: always running.
  const std::string other = dir + "/notes.txt";
  for (const std::string& path : {stale, mine, running, other}) Overwrite(path, "x");
  EXPECT_EQ(RemoveStaleTemporaryFiles(dir), 1);
  EXPECT_FALSE(fs::exists(stale));
  for (const std::string& path : {mine, running, other}) EXPECT_TRUE(fs::exists(path)) << path;
  EXPECT_EQ(RemoveStaleTemporaryFiles(dir + "/missing"), 0);
}

TEST(CheckpointIoTest, FindLastPicksTheNewestCompleteCheckpoint) {
  const std::string root = TempDir();
  EXPECT_THAT(FindLastCheckpoint(root).status().message(), HasSubstr("found no complete checkpoint under"));
  ASSERT_TRUE(WriteTensor(root + "/run1/checkpoints/a.ckpt", at::ones({1})).ok());
  ASSERT_TRUE(WriteTensor(root + "/run2/checkpoints/b.ckpt", at::ones({2})).ok());
  // Make b clearly newer than a, then add a newer but damaged file, and an unrelated file.
  fs::last_write_time(root + "/run1/checkpoints/a.ckpt", fs::file_time_type::clock::now() - std::chrono::hours(2));
  fs::last_write_time(root + "/run2/checkpoints/b.ckpt", fs::file_time_type::clock::now() - std::chrono::hours(1));
  Overwrite(root + "/run2/checkpoints/c.ckpt", "half a checkpoint");
  Overwrite(root + "/notes.txt", "not a checkpoint");
  absl::StatusOr<std::string> last = FindLastCheckpoint(root);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(*last, root + "/run2/checkpoints/b.ckpt");
}

TEST(CheckpointWriterTest, WritesInOrderAndRemovesOnlyAfterNewerFilesAreOnDisk) {
  const std::string dir = TempDir();
  absl::StatusOr<std::string> first = SerializeCheckpoint("a", WithTensor(at::ones({3})));
  absl::StatusOr<std::string> second = SerializeCheckpoint("b", WithTensor(at::zeros({3})));
  ASSERT_TRUE(first.ok() && second.ok());
  CheckpointWriter writer;
  ASSERT_TRUE(writer.Submit(dir + "/a.ckpt", *first).ok());
  ASSERT_TRUE(writer.Submit(dir + "/last.ckpt", *first).ok());
  ASSERT_TRUE(writer.Submit(dir + "/b.ckpt", *second).ok());
  ASSERT_TRUE(writer.Submit(dir + "/last.ckpt", *second).ok());
  ASSERT_TRUE(writer.SubmitRemove(dir + "/a.ckpt").ok());
  ASSERT_TRUE(writer.Flush().ok());
  EXPECT_FALSE(fs::exists(dir + "/a.ckpt"));
  EXPECT_TRUE(ReadTensor(dir + "/b.ckpt").equal(at::zeros({3})));
  EXPECT_TRUE(ReadTensor(dir + "/last.ckpt").equal(at::zeros({3}))) << "the later write to last.ckpt must win";
}

TEST(CheckpointWriterTest, SubmitWaitsForTheDiskWhenThePendingBytesWouldPassTheBound) {
  const std::string dir = TempDir();
  // 32 MB of checkpoint: its write (with fsync) takes far longer than queueing does.
  absl::StatusOr<std::string> big = SerializeCheckpoint("big", WithTensor(at::ones({8 << 20})));
  ASSERT_TRUE(big.ok());
  const uintmax_t size = big->size();
  CheckpointWriter writer(/*max_pending_bytes=*/size + 1);
  // Larger than what is left of the bound after the first write: the second Submit may return only once the first
  // file is complete on disk.
  ASSERT_TRUE(writer.Submit(dir + "/first.ckpt", *big).ok());
  ASSERT_TRUE(writer.Submit(dir + "/second.ckpt", *big).ok());
  std::error_code error;
  EXPECT_EQ(fs::file_size(dir + "/first.ckpt", error), size) << "Submit returned before the earlier write finished";
  ASSERT_TRUE(writer.Flush().ok());
  EXPECT_TRUE(ReadTensor(dir + "/second.ckpt").equal(at::ones({8 << 20})));
}

TEST(CheckpointWriterTest, AFailedWriteIsReportedAndStopsLaterRemovals) {
  const std::string dir = TempDir();
  Overwrite(dir + "/blocker", "x");
  ASSERT_TRUE(WriteTensor(dir + "/old.ckpt", at::ones({1})).ok());
  absl::StatusOr<std::string> bytes = SerializeCheckpoint("x", WithTensor(at::ones({1})));
  ASSERT_TRUE(bytes.ok());
  CheckpointWriter writer;
  ASSERT_TRUE(writer.Submit(dir + "/blocker/new.ckpt", *bytes).ok());
  writer.SubmitRemove(dir + "/old.ckpt").IgnoreError();
  absl::Status flushed = writer.Flush();
  EXPECT_THAT(flushed.message(), HasSubstr("blocker/new.ckpt"));
  EXPECT_TRUE(fs::exists(dir + "/old.ckpt")) << "the older checkpoint must survive a failed newer write";
  EXPECT_FALSE(writer.Submit(dir + "/later.ckpt", *bytes).ok()) << "the error must stick";
}

// A collective write (a sharded checkpoint's, which every rank's writer makes together) runs in order with the rest,
// given what the snapshot builds; after an earlier error it still runs, given that error, so that this rank takes
// part; a snapshot that failed is handed over as its error without building.
TEST(CheckpointWriterTest, ACollectiveWriteRunsInOrderAndStillTakesPartAfterAnError) {
  const std::string dir = TempDir();
  Overwrite(dir + "/blocker", "x");
  absl::StatusOr<std::string> bytes = SerializeCheckpoint("x", WithTensor(at::ones({1})));
  ASSERT_TRUE(bytes.ok());
  CheckpointWriter writer;
  std::vector<std::string> seen;  // Only the writer's thread appends, in order; read after Flush.
  const auto collective = [&](const char* name) {
    return [&seen, name](absl::StatusOr<c10::impl::GenericDict> contents) -> absl::Status {
      seen.push_back(absl::StrCat(name, ": ", contents.ok() ? "built" : contents.status().message()));
      return absl::OkStatus();
    };
  };
  CheckpointSnapshot snapshot{.tensor_bytes = 4, .build = [] { return WithTensor(at::ones({1})); }};
  ASSERT_TRUE(writer.Submit(dir + "/first.ckpt", *bytes).ok());
  ASSERT_TRUE(writer.SubmitCollective(dir + "/one", snapshot, collective("one")).ok());
  ASSERT_TRUE(writer.SubmitCollective(dir + "/failed", absl::InternalError("no snapshot"), collective("two")).ok());
  ASSERT_TRUE(writer.Flush().ok());
  ASSERT_TRUE(writer.Submit(dir + "/blocker/new.ckpt", *bytes).ok());
  ASSERT_FALSE(writer.Flush().ok());
  // Queued after the error, and run with it; the error is returned to the caller as well.
  absl::Status after = writer.SubmitCollective(dir + "/three", snapshot, collective("three"));
  EXPECT_THAT(after.message(), HasSubstr("blocker/new.ckpt"));
  writer.Flush().IgnoreError();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0], "one: built");
  EXPECT_EQ(seen[1], "two: no snapshot");
  EXPECT_THAT(seen[2], HasSubstr("three: "));
  EXPECT_THAT(seen[2], HasSubstr("blocker/new.ckpt"));
  EXPECT_TRUE(fs::exists(dir + "/first.ckpt"));
}

}  // namespace
}  // namespace kiln
