#include "trainer/data/text_file.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace kiln {

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no such file: ", path));
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(info.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
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
