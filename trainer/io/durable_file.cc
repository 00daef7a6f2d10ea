#include "trainer/io/durable_file.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// "<doing> <what> <path>: <reason>", e.g. "cannot write checkpoint last.ckpt.tmp-12: No space left on device".
absl::Status ErrnoError(absl::string_view doing, absl::string_view what, const std::string& path, int error) {
  const std::string message = absl::StrCat(doing, " ", what, " ", path, ": ", std::strerror(error));
  return error == ENOSPC || error == EDQUOT || error == EFBIG ? absl::ResourceExhaustedError(message)
                                                              : absl::InternalError(message);
}

// Writes `pieces` in order, kChunk bytes a writev at most, and tells the disk to start writing each chunk as soon as
// it is written, so that the disk writes while the rest is written and the closing fsync waits for the last chunks
// only (6.4 MB here: fsync 1.3 to 2.2 ms after 256 KiB chunks, 3.0 to 4.5 ms after one writev and one
// sync_file_range, timed with strace on tests/bench:checkpoint_bench's writes, 2026-12-05).
absl::Status WriteAll(int fd, absl::Span<const absl::string_view> pieces, absl::string_view what,
                      const std::string& path) {
  constexpr size_t kChunk = size_t{256} << 10;
  std::vector<iovec> batch;
  batch.reserve(std::min<size_t>(pieces.size(), IOV_MAX));
  size_t piece = 0;   // The first piece not written whole,
  size_t offset = 0;  // and how much of it is written.
  off_t written = 0;
  while (true) {
    while (piece < pieces.size() && offset == pieces[piece].size()) {
      ++piece;
      offset = 0;
    }
    if (piece == pieces.size()) break;
    batch.clear();
    size_t bytes = 0;
    for (size_t p = piece, o = offset; p < pieces.size() && batch.size() < IOV_MAX && bytes < kChunk; ++p, o = 0) {
      const size_t length = std::min(pieces[p].size() - o, kChunk - bytes);
      if (length > 0) batch.push_back({const_cast<char*>(pieces[p].data() + o), length});
      bytes += length;
    }
    const ssize_t n = ::writev(fd, batch.data(), static_cast<int>(batch.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("cannot write", what, path, errno);
    if (n == 0) return ErrnoError("cannot write", what, path, ENOSPC);
    for (size_t left = static_cast<size_t>(n); left > 0;) {
      const size_t step = std::min(left, pieces[piece].size() - offset);
      offset += step;
      left -= step;
      if (offset == pieces[piece].size()) {
        ++piece;
        offset = 0;
      }
    }
#ifdef __linux__
    // Best effort: the fsync after the write is what makes the file durable.
    ::sync_file_range(fd, written, n, SYNC_FILE_RANGE_WRITE);
#endif
    written += n;
  }
  return absl::OkStatus();
}

// The files that writes with remove_replaced_later replaced, each under its temporary's name, removed one after
// another by one thread of the process, started by the first. A process forked after that has no such thread (and
// its lock may have been held by it at the fork): it removes its files at once and waits for none.
class Remover {
 public:
  static Remover& Get() {
    static Remover* const remover = new Remover();  // Never destroyed: its thread may outlive main's statics.
    return *remover;
  }

  void Remove(std::string path) {
    if (Ours()) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (StartLocked()) {
        queue_.push_back(std::move(path));
        changed_.notify_all();
        return;
      }
    }
    ::unlink(path.c_str());
  }

  // Until `path` (every path, when empty) is neither queued nor being removed.
  void WaitFor(const std::string& path) {
    if (!Ours() || owner_.load() == 0) return;
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] {
      if (path.empty()) return queue_.empty() && removing_.empty();
      return removing_ != path && std::find(queue_.begin(), queue_.end(), path) == queue_.end();
    });
  }

 private:
  Remover() = default;

  // Whether this process is the one whose thread removes (or none has started yet).
  bool Ours() const {
    const pid_t owner = owner_.load();
    return owner == 0 || owner == ::getpid();
  }

  // Starts the thread unless it runs; false when it cannot be started (the caller removes the file itself).
  bool StartLocked() {
    if (owner_.load() != 0) return true;
    try {
      std::thread([this] { Run(); }).detach();
    } catch (const std::system_error&) {
      return false;
    }
    owner_.store(::getpid());
    std::atexit([] { Remover::Get().WaitFor(""); });
    return true;
  }

  void Run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      changed_.wait(lock, [this] { return !queue_.empty(); });
      removing_ = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      ::unlink(removing_.c_str());
      lock.lock();
      removing_.clear();
      changed_.notify_all();
    }
  }

  std::atomic<pid_t> owner_{0};  // The process whose thread removes; 0 before the first removal.
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::string> queue_;
  std::string removing_;
};

// The folder `path` names a file in, as fs::path's parent_path gives it ("" for a bare name), without parsing the
// path into its parts.
std::string FolderOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return "";
  const size_t end = path.find_last_not_of('/', slash);  // "a//b": "a"; "/b": "/".
  return end == std::string::npos ? "/" : path.substr(0, end + 1);
}

// The file a chain of symbolic links ends at (itself when `path` is no link); relative targets are relative to the
// link's folder. Stops after 40 links, as the kernel does (ELOOP), and the rename then reports the loop.
std::string FollowLinks(const std::string& path) {
  fs::path current = path;
  std::error_code error;
  for (int links = 0; links < 40 && fs::is_symlink(current, error); ++links) {
    const fs::path target = fs::read_symlink(current, error);
    if (error) break;
    current = target.is_absolute() ? target : current.parent_path() / target;
  }
  return current.string();
}

}  // namespace

absl::Status WriteFileDurably(const std::string& path, absl::string_view contents,
                              const DurableWriteOptions& options) {
  const absl::string_view pieces[] = {contents};
  return WriteFileDurably(path, absl::MakeConstSpan(pieces), options);
}

absl::Status WriteFileDurably(const std::string& path_or_link, absl::Span<const absl::string_view> pieces,
                              const DurableWriteOptions& options) {
  const std::string path = options.follow_links ? FollowLinks(path_or_link) : path_or_link;
  const std::string folder = FolderOf(path);
  const std::string temporary = absl::StrCat(path, ".tmp-", ::getpid());
  // An earlier write's replaced file may still be waiting under this name.
  if (options.remove_replaced_later) Remover::Get().WaitFor(temporary);
  const auto create = [&] { return ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644); };
  int fd = create();
  // The folders are made when the file cannot be made for want of them (making sure first that they exist parses
  // the path and asks the file system about each part, on every write).
  if (fd < 0 && (errno == ENOENT || errno == ENOTDIR) && options.create_folders && !folder.empty()) {
    std::error_code error;
    fs::create_directories(folder, error);
    if (error) {
      return absl::InternalError(
          absl::StrCat("cannot create the folder of ", options.what, " ", path, ": ", error.message()));
    }
    fd = create();
  }
  if (fd < 0) return ErrnoError("cannot create", options.what, temporary, errno);
  absl::Status status = WriteAll(fd, pieces, options.what, temporary);
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoError("cannot flush", options.what, temporary, errno);
  if (::close(fd) != 0 && status.ok()) status = ErrnoError("cannot close", options.what, temporary, errno);
  bool exchanged = false;  // The old file is under the temporary's name.
  if (status.ok() && options.remove_replaced_later) {
    struct stat old;
    exchanged = ::lstat(path.c_str(), &old) == 0 && S_ISREG(old.st_mode) &&
                ::renameat2(AT_FDCWD, temporary.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) == 0;
  }
  if (status.ok() && !exchanged && ::rename(temporary.c_str(), path.c_str()) != 0) {
    status = ErrnoError("cannot move", options.what, absl::StrCat("into place at ", path), errno);
  }
  if (!status.ok()) {
    ::unlink(temporary.c_str());
    return absl::Status(status.code(), absl::StrCat(status.message(), "; the previous ", options.what,
                                                    " (if any) is intact"));
  }
  // So that the rename itself survives a power loss; best effort: the file's own fsync made it durable.
  (void)SyncFolder(folder);
  if (exchanged) Remover::Get().Remove(temporary);
  return absl::OkStatus();
}

void WaitForReplacedFiles() { Remover::Get().WaitFor(""); }

absl::Status SyncFolder(const std::string& folder) {
  const std::string name = folder.empty() ? "." : folder;
  const int fd = ::open(name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open folder ", name, ": ", std::strerror(errno)));
  const int synced = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (synced != 0) return absl::InternalError(absl::StrCat("cannot flush folder ", name, ": ", std::strerror(error)));
  return absl::OkStatus();
}

}  // namespace kiln
