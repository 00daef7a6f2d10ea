#include "trainer/checkpoint/checkpoint_io.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "c10/util/Exception.h"
#include "glog/logging.h"
#include "trainer/checkpoint/zip_checksums.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

constexpr char kFormatKey[] = "kiln_format";
constexpr char kFormatValue[] = "kiln.checkpoint";
constexpr char kVersionKey[] = "kiln_format_version";

absl::Status ErrnoError(absl::string_view what, const std::string& path, int error) {
  const std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(error));
  return error == ENOSPC || error == EDQUOT || error == EFBIG ? absl::ResourceExhaustedError(message)
                                                              : absl::InternalError(message);
}

absl::Status WriteAll(int fd, const std::string& bytes, const std::string& path) {
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("cannot write checkpoint", path, errno);
    if (n == 0) return ErrnoError("cannot write checkpoint", path, ENOSPC);
    written += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

void SyncFolder(const fs::path& folder) {
  const int fd = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

absl::StatusOr<std::string> SerializeCheckpoint(const std::string& path,
                                                const std::function<void(torch::serialize::OutputArchive&)>& fill) {
  std::string bytes;
  try {
    torch::serialize::OutputArchive archive;
    archive.write(kFormatKey, c10::IValue(std::string(kFormatValue)));
    archive.write(kVersionKey, c10::IValue(kCheckpointFormatVersion));
    fill(archive);
    archive.save_to([&bytes](const void* data, size_t size) -> size_t {
      bytes.append(static_cast<const char*>(data), size);
      return size;
    });
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("cannot serialise checkpoint ", path, ": ", e.what_without_backtrace()));
  }
  return bytes;
}

absl::Status WriteCheckpoint(const std::string& path,
                             const std::function<void(torch::serialize::OutputArchive&)>& fill) {
  absl::StatusOr<std::string> bytes = SerializeCheckpoint(path, fill);
  if (!bytes.ok()) return bytes.status();
  return WriteFileAtomically(path, *bytes);
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& bytes) {
  const fs::path target(path);
  std::error_code error;
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), error);
  if (error) return absl::InternalError(absl::StrCat("cannot create the folder of ", path, ": ", error.message()));
  const std::string temporary = absl::StrCat(path, ".tmp-", ::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create checkpoint", temporary, errno);
  absl::Status status = WriteAll(fd, bytes, temporary);
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoError("cannot flush checkpoint", temporary, errno);
  if (::close(fd) != 0 && status.ok()) status = ErrnoError("cannot close checkpoint", temporary, errno);
  if (status.ok() && ::rename(temporary.c_str(), path.c_str()) != 0) {
    status = ErrnoError("cannot move checkpoint into place at", path, errno);
  }
  if (!status.ok()) {
    ::unlink(temporary.c_str());
    return absl::Status(status.code(), absl::StrCat(status.message(), "; the previous checkpoint (if any) is intact"));
  }
  SyncFolder(target.parent_path());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<torch::serialize::InputArchive>> ReadCheckpoint(const std::string& path) {
  std::error_code error;
  if (!fs::exists(path, error)) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", path, " does not exist; pass an existing .ckpt file, ",
                                            "\"last\" or \"best\""));
  }
  if (!fs::is_regular_file(path, error)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, " is not a regular file"));
  }
  // LibTorch does not check the archive's CRCs, and a damaged record can crash its parsers: check them first.
  if (absl::Status verified = VerifyZipChecksums(path); !verified.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, " is damaged, truncated or not a LibTorch ",
                                                   "archive: ", verified.message()));
  }
  auto archive = std::make_unique<torch::serialize::InputArchive>();
  try {
    // Onto the CPU, whatever device wrote it: LibTorch 1.13 restores tensors directly only to the CPU, CUDA, XPU
    // and HPU (an out-of-tree device's tensors fail), and a checkpoint should load on any machine. The trainer moves
    // what it restores to its own device.
    archive->load_from(path, c10::Device(c10::DeviceType::CPU));
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, " is damaged, truncated or not a LibTorch ",
                                                   "archive: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    // LibTorch's unpickler also throws standard exceptions on damaged archives (std::out_of_range from a map's
    // at(), found by tests/fuzz:checkpoint_reader).
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, " is damaged, truncated or not a LibTorch ",
                                                   "archive: ", e.what()));
  }
  c10::IValue format;
  c10::IValue version;
  try {
    if (!archive->try_read(kFormatKey, format) || !format.isString() || format.toStringRef() != kFormatValue) {
      return absl::InvalidArgumentError(
          absl::StrCat("file ", path, " is not a Kiln checkpoint (it has no kiln_format record); pass a .ckpt "
                       "file written by Kiln"));
    }
    if (!archive->try_read(kVersionKey, version) || !version.isInt()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, " has no readable format version"));
    }
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", path, " is damaged: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, " is damaged: ", e.what()));
  }
  if (version.toInt() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, " has format version ", version.toInt(),
                                                   ", which no Kiln writes (versions start at 1); it is damaged"));
  }
  if (version.toInt() > kCheckpointFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, " has format version ", version.toInt(),
                                                   ", newer than this Kiln reads (", kCheckpointFormatVersion,
                                                   "); upgrade Kiln"));
  }
  return archive;
}

int RemoveStaleTemporaryFiles(const std::string& dir) {
  int removed = 0;
  std::error_code error;
  for (auto it = fs::directory_iterator(dir, error); !error && it != fs::directory_iterator(); it.increment(error)) {
    const std::string name = it->path().filename().string();
    const size_t marker = name.rfind(".tmp-");
    int64_t pid = 0;
    if (marker == std::string::npos || !absl::SimpleAtoi(absl::string_view(name).substr(marker + 5), &pid) ||
        pid <= 0 || pid == ::getpid()) {
      continue;
    }
    // Still running (or not ours to ask about): its write may be in progress.
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code ignored;
    if (fs::remove(it->path(), ignored)) {
      LOG(INFO) << "removed " << it->path().string() << ", left by a checkpoint write of process " << pid
                << " that no longer runs";
      ++removed;
    }
  }
  return removed;
}

absl::StatusOr<std::string> FindLastCheckpoint(const std::string& root) {
  std::error_code error;
  std::vector<std::pair<fs::file_time_type, std::string>> candidates;
  if (fs::is_directory(root, error)) {
    for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, error);
         !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
      const std::string file = it->path().string();
      if (!it->is_regular_file(error) || !absl::EndsWith(file, kCheckpointExtension)) continue;
      candidates.emplace_back(it->last_write_time(error), file);
    }
  }
  std::sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second > b.second;
  });
  for (const auto& [time, file] : candidates) {
    absl::StatusOr<std::unique_ptr<torch::serialize::InputArchive>> archive = ReadCheckpoint(file);
    if (archive.ok()) return file;
    LOG(WARNING) << "ckpt_path=\"last\" skips " << file << ": " << archive.status().message();
  }
  return absl::NotFoundError(absl::StrCat("ckpt_path=\"last\" found no complete checkpoint under ", root,
                                          "; train once with checkpointing on, or pass a checkpoint path"));
}

struct CheckpointWriter::Task {
  std::string path;
  std::string bytes;
  bool remove = false;
};

CheckpointWriter::CheckpointWriter(size_t max_pending_bytes)
    : max_pending_bytes_(max_pending_bytes), thread_([this] { Run(); }) {}

CheckpointWriter::~CheckpointWriter() {
  Flush().IgnoreError();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

absl::Status CheckpointWriter::Submit(std::string path, std::string bytes) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] {
    return !error_.ok() || pending_bytes_ == 0 || pending_bytes_ + bytes.size() <= max_pending_bytes_;
  });
  if (!error_.ok()) return error_;
  pending_bytes_ += bytes.size();
  queue_.push_back(std::make_unique<Task>(Task{std::move(path), std::move(bytes), false}));
  changed_.notify_all();
  return absl::OkStatus();
}

absl::Status CheckpointWriter::SubmitRemove(std::string path) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_.ok()) return error_;
  queue_.push_back(std::make_unique<Task>(Task{std::move(path), "", true}));
  changed_.notify_all();
  return absl::OkStatus();
}

absl::Status CheckpointWriter::Flush() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return queue_.empty() && !busy_; });
  return error_;
}

void CheckpointWriter::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // Stopping, with nothing left to write.
    std::unique_ptr<Task> task = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    const bool skip = !error_.ok();
    lock.unlock();
    absl::Status status;
    if (!skip && task->remove) {
      std::error_code ignored;
      fs::remove(task->path, ignored);
    } else if (!skip) {
      status = WriteFileAtomically(task->path, task->bytes);
    }
    lock.lock();
    if (!status.ok() && error_.ok()) error_ = status;
    pending_bytes_ -= task->bytes.size();
    busy_ = false;
    changed_.notify_all();
  }
}

}  // namespace kiln
