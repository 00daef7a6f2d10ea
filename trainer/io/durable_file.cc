#include "trainer/io/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

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

absl::Status WriteAll(int fd, absl::string_view bytes, absl::string_view what, const std::string& path) {
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("cannot write", what, path, errno);
    if (n == 0) return ErrnoError("cannot write", what, path, ENOSPC);
    written += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// So that the rename itself survives a power loss.
void SyncFolder(const fs::path& folder) {
  const int fd = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
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

absl::Status WriteFileDurably(const std::string& path_or_link, absl::string_view contents,
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
  absl::Status status = WriteAll(fd, contents, options.what, temporary);
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
  SyncFolder(target.parent_path());
  return absl::OkStatus();
}

}  // namespace kiln
