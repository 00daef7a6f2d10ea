#include "trainer/loggers/atomic_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace kiln {

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
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
