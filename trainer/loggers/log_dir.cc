#include "trainer/loggers/log_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <system_error>
#include <utility>

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

// The run folders this process holds, by (device, inode): the descriptor whose flock holds each, and how many
// RunFolders share it (a process may open one run's folder more than once; another process may not).
struct Held {
  int fd = -1;
  int users = 0;
  pid_t owner = 0;  // A forked child inherits this table, not the holds: its entries are its parent's.
};
std::mutex& HeldMutex() {
  static std::mutex* mutex = new std::mutex;
  return *mutex;
}
std::map<std::pair<dev_t, ino_t>, Held>& HeldFolders() {
  static auto* held = new std::map<std::pair<dev_t, ino_t>, Held>;
  return *held;
}

// The process that holds a flock on inode `inode` (from /proc/locks), and its command line; empty if not found.
std::string Holder(ino_t inode) {
  std::ifstream locks("/proc/locks");
  std::string line;
  while (std::getline(locks, line)) {
    std::istringstream fields(line);
    std::string id, kind, mode, access, pid, where;
    if (!(fields >> id >> kind)) continue;
    if (kind == "->") fields >> kind;  // A waiter's line.
    if (!(fields >> mode >> access >> pid >> where) || kind != "FLOCK") continue;
    const size_t colon = where.rfind(':');
    if (colon == std::string::npos || where.substr(colon + 1) != std::to_string(inode)) continue;
    std::ifstream cmdline("/proc/" + pid + "/cmdline");
    std::string command((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    std::replace(command.begin(), command.end(), '\0', ' ');
    while (!command.empty() && command.back() == ' ') command.pop_back();
    if (command.size() > 160) command = command.substr(0, 157) + "...";
    return absl::StrCat("process ", pid, command.empty() ? "" : ": ", command);
  }
  return "";
}

}  // namespace

absl::StatusOr<FolderHold> HoldRunFolder(const std::string& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open ", folder, ": ", std::strerror(errno)));
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    const int code = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat("cannot stat ", folder, ": ", std::strerror(code)));
  }
  const FolderHold key{info.st_dev, info.st_ino};
  std::lock_guard<std::mutex> lock(HeldMutex());
  Held& held = HeldFolders()[{key.device, key.inode}];
  if (held.owner != ::getpid()) held = Held{};
  if (held.users > 0) {
    ::close(fd);
    ++held.users;
    return key;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int code = errno;
    ::close(fd);
    HeldFolders().erase({key.device, key.inode});
    if (code != EWOULDBLOCK) {
      return absl::InternalError(absl::StrCat("cannot lock ", folder, ": ", std::strerror(code)));
    }
    const std::string holder = Holder(key.inode);
    return absl::FailedPreconditionError(absl::StrCat(
        "the run folder ", folder, " is in use by another run (", holder.empty() ? "a running process" : holder,
        "); two runs never share a folder: pass another version, or none for a new one"));
  }
  held.fd = fd;
  held.users = 1;
  held.owner = ::getpid();
  return key;
}

void ReleaseRunFolder(const FolderHold& hold) {
  std::lock_guard<std::mutex> lock(HeldMutex());
  auto found = HeldFolders().find({hold.device, hold.inode});
  if (found == HeldFolders().end() || found->second.owner != ::getpid() || --found->second.users > 0) return;
  ::close(found->second.fd);  // Releases the flock.
  HeldFolders().erase(found);
}

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
  absl::MutexLock lock(&mutex_);
  if (claimed_.has_value()) return *claimed_;
  std::string folder;
  if (options_.version.has_value()) {
    folder = VersionDir(options_);
    if (absl::Status made = MakeFolders(folder); !made.ok()) return made;
  } else {
    absl::StatusOr<int64_t> version = ClaimVersion(options_.save_dir, options_.name);
    if (!version.ok()) return version.status();
    folder = absl::StrCat(Parent(options_.save_dir, options_.name), "/version_", *version);
  }
  absl::StatusOr<FolderHold> hold = HoldRunFolder(folder);
  if (!hold.ok()) return hold.status();
  hold_ = *hold;
  claimed_ = folder;
  return *claimed_;
}

RunFolder::~RunFolder() {
  if (hold_.has_value()) ReleaseRunFolder(*hold_);
}

std::string RunFolder::path() const {
  absl::MutexLock lock(&mutex_);
  return claimed_.has_value() ? *claimed_ : VersionDir(options_);
}

}  // namespace kiln
