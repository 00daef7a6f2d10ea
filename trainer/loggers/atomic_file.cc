#include "trainer/loggers/atomic_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace kiln {

namespace {

// The file a chain of symbolic links ends at (itself when `path` is no link); relative targets are relative to the
// link's folder. Stops after 40 links, as the kernel does (ELOOP), and the rename then reports the loop.
std::string FollowLinks(const std::string& path) {
  namespace fs = std::filesystem;
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

absl::Status WriteFileAtomically(const std::string& link_or_path, absl::string_view contents) {
  const std::string path = FollowLinks(link_or_path);
  const std::string temporary = absl::StrCat(path, ".tmp-", getpid());
  {
    std::ofstream file(temporary, std::ios::trunc | std::ios::binary);
    file.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    file.flush();
    if (!file) {
      std::remove(temporary.c_str());
      return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(temporary.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", reason));
  }
  return absl::OkStatus();
}

}  // namespace kiln
