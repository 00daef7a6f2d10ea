#include "trainer/io/durable_file.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string Read(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

fs::path Fresh(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Nothing but the files a test expects: no temporary left behind.
std::vector<std::string> Names(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) names.push_back(fs::relative(entry.path(), dir));
  std::sort(names.begin(), names.end());
  return names;
}

TEST(DurableFileTest, ReplacesTheFileWholeAndCreatesItsFolders) {
  const fs::path dir = Fresh("whole");
  ASSERT_TRUE(WriteFileDurably((dir / "a/b/out.txt").string(), "first").ok());
  EXPECT_EQ(Read(dir / "a/b/out.txt"), "first");
  ASSERT_TRUE(WriteFileDurably((dir / "a/b/out.txt").string(), std::string(1 << 20, 'x')).ok());
  EXPECT_EQ(Read(dir / "a/b/out.txt"), std::string(1 << 20, 'x'));
  EXPECT_THAT(Names(dir), ::testing::ElementsAre("a", "a/b", "a/b/out.txt"));
  // Without create_folders, a missing folder is an error naming the file.
  const absl::Status missing = WriteFileDurably((dir / "none/out.txt").string(), "x", {.create_folders = false});
  EXPECT_THAT(std::string(missing.message()), HasSubstr("cannot create file " + (dir / "none/out.txt").string()));
}

// Pieces are written in order, empty ones too, more of them than one writev takes (IOV_MAX, 1024 on Linux), and
// and pieces longer than the 256 KiB after which the disk is told to start writing, split across writes.
TEST(DurableFileTest, WritesPiecesInOrder) {
  const fs::path dir = Fresh("pieces");
  std::vector<std::string> owned;
  for (int i = 0; i < 3000; ++i) owned.push_back(i % 7 == 0 ? std::string() : std::to_string(i) + ",");
  owned.push_back(std::string(9 << 20, 'y'));
  owned.push_back("end");
  std::vector<absl::string_view> pieces(owned.begin(), owned.end());
  std::string whole;
  for (const std::string& piece : owned) whole += piece;
  ASSERT_TRUE(WriteFileDurably((dir / "out.bin").string(), absl::MakeConstSpan(pieces)).ok());
  EXPECT_EQ(Read(dir / "out.bin"), whole);
  EXPECT_THAT(Names(dir), ::testing::ElementsAre("out.bin"));
}

TEST(DurableFileTest, AFailedWriteLeavesThePreviousFileAndNoTemporary) {
  const fs::path dir = Fresh("failed");
  ASSERT_TRUE(WriteFileDurably((dir / "out.txt").string(), "kept").ok());
  // The rename cannot replace a folder by a file: the write fails after the temporary was written.
  fs::create_directories(dir / "folder");
  const absl::Status failed = WriteFileDurably((dir / "folder").string(), "new", {.what = "checkpoint"});
  EXPECT_FALSE(failed.ok());
  EXPECT_THAT(std::string(failed.message()),
              HasSubstr("cannot move checkpoint into place at " + (dir / "folder").string()));
  EXPECT_THAT(std::string(failed.message()), HasSubstr("the previous checkpoint (if any) is intact"));
  EXPECT_EQ(Read(dir / "out.txt"), "kept");
  EXPECT_THAT(Names(dir), ::testing::ElementsAre("folder", "out.txt"));
}

TEST(DurableFileTest, ALinkIsWrittenThroughOrReplacedAsAsked) {
  const fs::path dir = Fresh("links");
  ASSERT_TRUE(WriteFileDurably((dir / "target.txt").string(), "old").ok());
  fs::create_symlink("target.txt", dir / "link.txt");
  ASSERT_TRUE(WriteFileDurably((dir / "link.txt").string(), "through").ok());
  EXPECT_TRUE(fs::is_symlink(dir / "link.txt"));
  EXPECT_EQ(Read(dir / "target.txt"), "through");
  // A link to a file that does not exist yet: the file is made where the link points.
  fs::create_symlink("later.txt", dir / "dangling.txt");
  ASSERT_TRUE(WriteFileDurably((dir / "dangling.txt").string(), "made").ok());
  EXPECT_EQ(Read(dir / "later.txt"), "made");
  // follow_links = false: the link itself is replaced, and what it pointed to is left alone.
  ASSERT_TRUE(WriteFileDurably((dir / "link.txt").string(), "replaced", {.follow_links = false}).ok());
  EXPECT_FALSE(fs::is_symlink(dir / "link.txt"));
  EXPECT_EQ(Read(dir / "link.txt"), "replaced");
  EXPECT_EQ(Read(dir / "target.txt"), "through");
}

// remove_replaced_later: the new file takes the name at once; the old one is removed by the process's thread (a hard
// link to it shows its inode lose the name it had), and nothing else is left once WaitForReplacedFiles returns.
TEST(DurableFileTest, TheReplacedFileIsRemovedLater) {
  const fs::path dir = Fresh("later");
  const DurableWriteOptions later{.remove_replaced_later = true};
  const std::string path = (dir / "out.ckpt").string();
  ASSERT_TRUE(WriteFileDurably(path, "first", later).ok());  // Nothing to replace.
  fs::create_hard_link(path, dir / "keep");
  EXPECT_EQ(fs::hard_link_count(dir / "keep"), 2u);
  // Written again and again at once: each write waits for the last one's removal under the same temporary name.
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(WriteFileDurably(path, std::string(1000 + i, 'a' + i), later).ok());
  EXPECT_EQ(Read(path), std::string(1019, 'a' + 19));
  WaitForReplacedFiles();
  EXPECT_EQ(Read(dir / "keep"), "first");
  EXPECT_EQ(fs::hard_link_count(dir / "keep"), 1u);
  EXPECT_THAT(Names(dir), ::testing::ElementsAre("keep", "out.ckpt"));
  // A link at the path is replaced by the file (follow_links = false), not exchanged with it.
  fs::create_symlink("keep", dir / "link.ckpt");
  const DurableWriteOptions replace_link{.follow_links = false, .remove_replaced_later = true};
  ASSERT_TRUE(WriteFileDurably((dir / "link.ckpt").string(), "new", replace_link).ok());
  WaitForReplacedFiles();
  EXPECT_FALSE(fs::is_symlink(dir / "link.ckpt"));
  EXPECT_EQ(Read(dir / "keep"), "first");
  EXPECT_THAT(Names(dir), ::testing::ElementsAre("keep", "link.ckpt", "out.ckpt"));
  // A process forked after the removing thread started has no such thread: its writes remove at once, and its exit
  // does not wait for the parent's thread.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const bool ok = WriteFileDurably(path, "child", later).ok() && Names(dir).size() == 3;
    std::exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_EQ(Read(path), "child");
}

}  // namespace
}  // namespace kiln
