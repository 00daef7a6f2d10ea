#include "trainer/loggers/log_dir.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace kiln {
namespace fs = std::filesystem;

namespace {

// Versions tried past the first free one before giving up: only as many runs as start within the same moment in
// one folder can take them, so running out means something else is wrong.
constexpr int kClaimAttempts = 10000;

std::string Parent(const std::string& save_dir, const std::string& name) {
  return name.empty() ? save_dir : absl::StrCat(save_dir, "/", name);
}

absl::Status MakeFolders(const std::string& folder) {
  std::error_code error;
  fs::create_directories(folder, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create ", folder, ": ", error.message()));
  return absl::OkStatus();
}

}  // namespace

int64_t NextVersion(const std::string& save_dir, const std::string& name) {
  int64_t next = 0;
  std::error_code error;
  for (auto it = fs::directory_iterator(Parent(save_dir, name), error); !error && it != fs::directory_iterator();
       it.increment(error)) {
    if (!it->is_directory(error)) continue;
    const std::string name_text = it->path().filename().native();  // filename() is a temporary.
    absl::string_view folder = name_text;
    int64_t version = 0;
    if (absl::ConsumePrefix(&folder, "version_") && absl::SimpleAtoi(folder, &version) && version >= 0 &&
        version < INT64_MAX) {
      next = std::max(next, version + 1);
    }
  }
  return next;
}

std::string VersionDir(const LogDirOptions& options) {
  const int64_t version = options.version.has_value() ? *options.version : NextVersion(options.save_dir, options.name);
  return absl::StrCat(Parent(options.save_dir, options.name), "/version_", version);
}

absl::StatusOr<int64_t> ClaimVersion(const std::string& save_dir, const std::string& name) {
  const std::string parent = Parent(save_dir, name);
  if (absl::Status made = MakeFolders(parent); !made.ok()) return made;
  int64_t version = NextVersion(save_dir, name);
  if (version == INT64_MAX) {
    return absl::InternalError(absl::StrCat("cannot claim a run folder in ", parent, ": a version_", INT64_MAX - 1,
                                            " folder there leaves no higher number; remove or rename it"));
  }
  for (int attempt = 0; attempt < kClaimAttempts && version < INT64_MAX; ++attempt, ++version) {
    const std::string folder = absl::StrCat(parent, "/version_", version);
    if (::mkdir(folder.c_str(), 0777) == 0) return version;
    if (errno != EEXIST) return absl::InternalError(absl::StrCat("cannot create ", folder, ": ", std::strerror(errno)));
  }
  return absl::InternalError(absl::StrCat("cannot claim a run folder in ", parent, ": version_", version - 1,
                                          " and the ", kClaimAttempts, " before it are taken"));
}

absl::StatusOr<std::string> RunFolder::Claim() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (claimed_.has_value()) return *claimed_;
  if (options_.version.has_value()) {
    const std::string folder = VersionDir(options_);
    if (absl::Status made = MakeFolders(folder); !made.ok()) return made;
    claimed_ = folder;
  } else {
    absl::StatusOr<int64_t> version = ClaimVersion(options_.save_dir, options_.name);
    if (!version.ok()) return version.status();
    claimed_ = absl::StrCat(Parent(options_.save_dir, options_.name), "/version_", *version);
  }
  return *claimed_;
}

std::string RunFolder::path() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return claimed_.has_value() ? *claimed_ : VersionDir(options_);
}

}  // namespace kiln
