#include "trainer/data/text_file.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "trainer/io/memory_budget.h"

namespace kiln {

absl::StatusOr<std::string> ReadTextFile(const std::string& path) { return ReadTextFile(path, InputMemoryBudget()); }

absl::StatusOr<std::string> ReadTextFile(const std::string& path, uint64_t budget) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no such file: ", path));
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(info.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  // The whole text is held in memory: a file (or what a gzip file inflates to) larger than the budget is refused
  // before it is read, or as soon as inflating passes the budget.
  const std::string fix = "split it, or train from a DataModule of your own that streams it";
  if (static_cast<uint64_t>(info.st_size) > budget) {
    return InputExceeds(absl::StrCat(path, " (", info.st_size, " bytes)"), budget, fix);
  }
  // gzread passes plain files through unchanged, so one path reads both.
  std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(path.c_str(), "rb"), gzclose);
  if (file == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  gzbuffer(file.get(), 1 << 17);
  std::string text;
  text.reserve(static_cast<size_t>(info.st_size));
  char buffer[1 << 16];
  while (true) {
    const int read = gzread(file.get(), buffer, sizeof(buffer));
    if (read < 0) {
      int code = 0;
      const char* message = gzerror(file.get(), &code);
      return absl::InvalidArgumentError(absl::StrCat("cannot read ", path, ": ",
                                                     message != nullptr ? message : "zlib error",
                                                     " (a damaged or truncated gzip file?)"));
    }
    if (read == 0) break;
    // gzdirect is known after the first read: false while inflating a gzip stream.
    if (!gzdirect(file.get()) && text.size() + static_cast<size_t>(read) > MaxInflatedBytes()) {
      return InflatesTooFar(path);
    }
    if (text.size() + static_cast<size_t>(read) > budget) {
      return InputExceeds(absl::StrCat(path, " inflated"), budget, fix);
    }
    // Grown by doubling, but never past the budget, so that the read stays within it while it copies.
    if (text.size() + static_cast<size_t>(read) > text.capacity()) {
      text.reserve(static_cast<size_t>(std::min<uint64_t>(budget, 2 * (text.capacity() + sizeof(buffer)))));
    }
    text.append(buffer, static_cast<size_t>(read));
  }
  // A truncated gzip stream ends without an error from gzread but leaves one behind.
  int code = 0;
  const char* message = gzerror(file.get(), &code);
  if (code != Z_OK && code != Z_BUF_ERROR) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", path, ": ", message));
  }
  if (code == Z_BUF_ERROR) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", path, ": the gzip stream is truncated"));
  }
  return text;
}

}  // namespace kiln
