#include "trainer/io/durable_file.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
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

// Writes `pieces` in order, as many at a time as writev takes, starting the disk's writeback every kWriteBack bytes.
absl::Status WriteAll(int fd, absl::Span<const absl::string_view> pieces, absl::string_view what,
                      const std::string& path) {
  constexpr size_t kWriteBack = size_t{4} << 20;
  std::vector<iovec> pending;
  pending.reserve(std::min<size_t>(pieces.size(), IOV_MAX));
  size_t next = 0;          // The first piece not yet in `pending`.
  size_t written = 0;       // Bytes written so far.
  size_t written_back = 0;  // Bytes whose writeback has been started.
  while (next < pieces.size() || !pending.empty()) {
    while (next < pieces.size() && pending.size() < IOV_MAX) {
      if (!pieces[next].empty()) {
        pending.push_back({const_cast<char*>(pieces[next].data()), pieces[next].size()});
      }
      ++next;
    }
    if (pending.empty()) break;
    const ssize_t n = ::writev(fd, pending.data(), static_cast<int>(pending.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("cannot write", what, path, errno);
    if (n == 0) return ErrnoError("cannot write", what, path, ENOSPC);
    written += static_cast<size_t>(n);
    // Drop what was written: whole pieces, then the written part of the next one.
    size_t done = static_cast<size_t>(n);
    size_t first = 0;
    while (first < pending.size() && done >= pending[first].iov_len) done -= pending[first++].iov_len;
    pending.erase(pending.begin(), pending.begin() + static_cast<ptrdiff_t>(first));
    if (done > 0) {
      pending.front().iov_base = static_cast<char*>(pending.front().iov_base) + done;
      pending.front().iov_len -= done;
    }
#ifdef __linux__
    if (written - written_back >= kWriteBack) {
      // Best effort: the fsync after the write is what makes the file durable.
      ::sync_file_range(fd, static_cast<off_t>(written_back), static_cast<off_t>(written - written_back),
                        SYNC_FILE_RANGE_WRITE);
      written_back = written;
    }
#endif
  }
  return absl::OkStatus();
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
  const fs::path target(path);
  if (options.create_folders && target.has_parent_path()) {
    std::error_code error;
    fs::create_directories(target.parent_path(), error);
    if (error) {
      return absl::InternalError(
          absl::StrCat("cannot create the folder of ", options.what, " ", path, ": ", error.message()));
    }
  }
  const std::string temporary = absl::StrCat(path, ".tmp-", ::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", options.what, temporary, errno);
  absl::Status status = WriteAll(fd, pieces, options.what, temporary);
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoError("cannot flush", options.what, temporary, errno);
  if (::close(fd) != 0 && status.ok()) status = ErrnoError("cannot close", options.what, temporary, errno);
  if (status.ok() && ::rename(temporary.c_str(), path.c_str()) != 0) {
    status = ErrnoError("cannot move", options.what, absl::StrCat("into place at ", path), errno);
  }
  if (!status.ok()) {
    ::unlink(temporary.c_str());
    return absl::Status(status.code(), absl::StrCat(status.message(), "; the previous ", options.what,
                                                    " (if any) is intact"));
  }
  // So that the rename itself survives a power loss; best effort: the file's own fsync made it durable.
  (void)SyncFolder(target.parent_path().string());
  return absl::OkStatus();
}

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
