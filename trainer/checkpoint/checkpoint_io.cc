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
#include "caffe2/serialize/inline_container.h"
#include "glog/logging.h"
#include "trainer/checkpoint/format/pickle_writer.h"
#include "trainer/checkpoint/format/snapshot_dict.h"
#include "trainer/checkpoint/format/torch_file.h"
#include "trainer/checkpoint/format/zip_checksums.h"
#include "trainer/checkpoint/sharded/sharded_checkpoint.h"
#include "trainer/io/durable_file.h"

namespace kiln {

namespace fs = std::filesystem;

absl::Status WriteFileAtomically(const std::string& path, const std::string& bytes) {
  return WriteFileDurably(path, bytes, kCheckpointWrite);
}

namespace {

// As checkpoint_file.cc says a checkpoint it could not serialise (the writer thread's builds and pickles).
absl::Status CannotSerialise(const std::string& path, absl::string_view why) {
  return absl::InternalError(absl::StrCat("cannot serialise checkpoint ", path, ": ", why));
}

absl::Status Damaged(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("checkpoint ", path, " is damaged, truncated or not a checkpoint: ", what));
}

absl::Status CheckVersion(const std::string& path, int64_t version) {
  if (version < 1) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, " has format version ", version,
                                                   ", which no Kiln writes (versions start at 1); it is damaged"));
  }
  if (version > kCheckpointFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, " has format version ", version,
                                                   ", newer than this Kiln reads (", kCheckpointFormatVersion,
                                                   "); upgrade Kiln"));
  }
  return absl::OkStatus();
}

// Format 1: the LibTorch archive (a TorchScript module's zip) Kiln wrote before format 2.
absl::Status ReadFormat1(const std::string& path, Checkpoint& checkpoint) {
  auto archive = std::make_unique<torch::serialize::InputArchive>();
  try {
    // Onto the CPU, whatever device wrote it: LibTorch 1.13 restores tensors directly only to the CPU, CUDA, XPU
    // and HPU (an out-of-tree device's tensors fail), and a checkpoint should load on any machine. The trainer moves
    // what it restores to its own device.
    archive->load_from(path, c10::Device(c10::DeviceType::CPU));
  } catch (const c10::Error& e) {
    return Damaged(path, e.what_without_backtrace());
  } catch (const std::exception& e) {
    // LibTorch's unpickler also throws standard exceptions on damaged archives (std::out_of_range from a map's
    // at(), found by tests/fuzz:checkpoint_reader).
    return Damaged(path, e.what());
  }
  c10::IValue format;
  c10::IValue version;
  try {
    if (!archive->try_read(kKilnFormatKey, format) || !format.isString() || format.toStringRef() != kKilnFormatValue) {
      return absl::InvalidArgumentError(
          absl::StrCat("file ", path,
                       " is not a Kiln checkpoint (it has no kiln_format record); pass a .ckpt "
                       "file written by Kiln or Lightning"));
    }
    if (!archive->try_read(kKilnFormatVersionKey, version) || !version.isInt()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, " has no readable format version"));
    }
  } catch (const c10::Error& e) {
    return Damaged(path, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Damaged(path, e.what());
  }
  // Format 1 files say 1; anything else in a LibTorch archive is damage.
  if (version.toInt() != 1) {
    if (absl::Status status = CheckVersion(path, version.toInt()); !status.ok()) return status;
    return Damaged(path, absl::StrCat("a LibTorch archive with format version ", version.toInt()));
  }
  checkpoint.format_version = 1;
  checkpoint.archive = std::move(archive);
  return absl::OkStatus();
}

// Formats 2 and 0: a torch.save dictionary.
// `sharded_folder` set: `path` is that sharded checkpoint's meta.pt (sharded_checkpoint.h), which the state
// read from the folder's records completes.
absl::Status ReadDictionary(const std::string& path, caffe2::serialize::PyTorchStreamReader& reader,
                            const TorchFileBytes& bytes, Checkpoint& checkpoint,
                            const std::string* sharded_folder = nullptr) {
  absl::StatusOr<c10::IValue> value = ReadTorchFile(reader, &bytes);
  if (!value.ok()) return Damaged(path, value.status().message());
  if (!value->isGenericDict()) {
    return absl::InvalidArgumentError(absl::StrCat("file ", path, " holds a ", value->tagKind(),
                                                   ", not a checkpoint's dictionary; pass a .ckpt file written by "
                                                   "Kiln or Lightning"));
  }
  checkpoint.contents = value->toGenericDict();
  const c10::IValue kiln_key{std::string(kKilnSectionKey)};
  if (checkpoint.contents.contains(kiln_key)) {
    const c10::IValue& kiln = checkpoint.contents.at(kiln_key);
    if (!kiln.isGenericDict()) return Damaged(path, "its 'kiln' section is not a dictionary");
    const c10::impl::GenericDict section = kiln.toGenericDict();
    const c10::IValue format_key{std::string(kKilnFormatKey)};
    const c10::IValue version_key{std::string(kKilnFormatVersionKey)};
    if (!section.contains(format_key) || !section.at(format_key).isString() ||
        section.at(format_key).toStringRef() != kKilnFormatValue) {
      return Damaged(path, "its 'kiln' section has no kiln_format");
    }
    if (!section.contains(version_key) || !section.at(version_key).isInt()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, " has no readable format version"));
    }
    const int64_t version = section.at(version_key).toInt();
    if (absl::Status status = CheckVersion(path, version); !status.ok()) return status;
    if (version < 2) return Damaged(path, absl::StrCat("a torch.save dictionary with format version ", version));
    checkpoint.format_version = version;
  } else {
    checkpoint.format_version = 0;
  }
  if (sharded_folder != nullptr) {
    if (checkpoint.format_version != kCheckpointFormatVersion) return Damaged(path, "it has no 'kiln' section");
    if (absl::Status status = ReadShardedState(*sharded_folder, checkpoint.contents); !status.ok()) return status;
  }
  const c10::IValue state_key{std::string("state_dict")};
  if (!checkpoint.contents.contains(state_key) || !checkpoint.contents.at(state_key).isGenericDict()) {
    return absl::InvalidArgumentError(
        absl::StrCat("file ", path,
                     " is a torch.save file but not a checkpoint: it has no 'state_dict' dictionary; pass a .ckpt "
                     "file written by Kiln or Lightning, or a torch.save dictionary in Lightning's layout"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& folder_or_file) {
  std::error_code error;
  if (!fs::exists(folder_or_file, error)) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", folder_or_file, " does not exist; pass an existing .ckpt ",
                                            "file or sharded checkpoint folder, \"last\" or \"best\""));
  }
  // A sharded checkpoint (a folder): its meta.pt is read as a checkpoint file, and its records complete it.
  const bool sharded = fs::is_directory(folder_or_file, error);
  if (sharded && !IsShardedCheckpoint(folder_or_file)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", folder_or_file, " is a folder without ",
                                                   kShardedMetaFile, ", so not a sharded checkpoint; pass a .ckpt ",
                                                   "file or a folder a sharded save wrote"));
  }
  const std::string path = sharded ? (fs::path(folder_or_file) / kShardedMetaFile).string() : folder_or_file;
  if (!fs::is_regular_file(path, error)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, " is not a regular file"));
  }
  // LibTorch does not check the archive's CRCs, and a damaged record can crash its parsers: check them first, as the
  // file is read into memory, once; LibTorch's reader reads from there, and the tensors take their storage from there
  // in place (torch_file.h).
  absl::StatusOr<TorchFileBytes> bytes = ReadVerifiedZip(path);
  if (absl::Status verified = bytes.status(); !verified.ok()) {
    if (absl::IsResourceExhausted(verified)) {  // Well-formed, but a record inflates past the limit, or too large.
      return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, ": ", verified.message()));
    }
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, " is damaged, truncated or not a LibTorch ",
                                                   "archive: ", verified.message()));
  }
  Checkpoint checkpoint;
  bool torchscript = false;
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(MemoryReadAdapter(*bytes));
    // A TorchScript module's archive (what format 1 is) has constants; torch.save's files do not.
    torchscript = reader->hasRecord("constants.pkl");
  } catch (const c10::Error& e) {
    return Damaged(path, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Damaged(path, e.what());
  }
  if (torchscript && sharded) return Damaged(path, "a LibTorch archive where a torch.save file belongs");
  absl::Status status =
      torchscript ? ReadFormat1(path, checkpoint)
                  : ReadDictionary(path, *reader, *bytes, checkpoint, sharded ? &folder_or_file : nullptr);
  if (!status.ok()) return status;
  return checkpoint;
}

std::vector<std::pair<std::string, at::Tensor>> CheckpointStateDict(const Checkpoint& checkpoint) {
  std::vector<std::pair<std::string, at::Tensor>> state;
  if (checkpoint.format_version == 1) {
    torch::serialize::InputArchive model;
    checkpoint.archive->read("model", model);
    c10::IValue names;
    model.read("names", names);
    int64_t index = 0;
    for (const c10::IValue& name : names.toListRef()) {
      at::Tensor tensor;
      model.read(absl::StrCat("t", index++), tensor, /*is_buffer=*/true);
      state.emplace_back(name.toStringRef(), tensor);
    }
    return state;
  }
  for (const auto& entry : checkpoint.contents.at(std::string("state_dict")).toGenericDict()) {
    TORCH_CHECK(entry.key().isString() && entry.value().isTensor(), "'state_dict' holds a ", entry.value().tagKind(),
                " under ", entry.key(), " where a named tensor was expected");
    state.emplace_back(entry.key().toStringRef(), entry.value().toTensor());
  }
  return state;
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
    // A folder: a sharded checkpoint's (sharded_checkpoint.h).
    if (fs::remove_all(it->path(), ignored) > 0) {
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
      if (!absl::EndsWith(file, kCheckpointExtension)) continue;
      if (it->is_directory(error)) {
        it.disable_recursion_pending();  // A sharded checkpoint: a candidate as a whole.
      } else if (!it->is_regular_file(error)) {
        continue;
      }
      candidates.emplace_back(it->last_write_time(error), file);
    }
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second > b.second; });
  for (const auto& [time, file] : candidates) {
    absl::StatusOr<Checkpoint> archive = ReadCheckpoint(file);
    if (archive.ok()) return file;
    LOG(WARNING) << "ckpt_path=\"last\" skips " << file << ": " << archive.status().message();
  }
  if (candidates.empty()) {
    return absl::NotFoundError(absl::StrCat("ckpt_path=\"last\" found no complete checkpoint under ", root,
                                            " (no .ckpt file at all); train once with checkpointing on, or pass a "
                                            "checkpoint path"));
  }
  return absl::DataLossError(absl::StrCat("ckpt_path=\"last\" found no complete checkpoint under ", root, ": the ",
                                          candidates.size(), " .ckpt file(s) there are damaged (the newest: ",
                                          candidates.front().second, "); pass a checkpoint path"));
}

struct CheckpointWriter::Task {
  std::string path;
  std::string bytes;
  bool remove = false;
  // Set: build the dictionary and write it (SubmitSnapshot); `bytes` is then unused.
  std::function<absl::StatusOr<c10::impl::GenericDict>()> build;
  // Set: pickle the checkpoint straight (CheckpointSnapshot::pickle), in place of `build`.
  std::function<absl::Status(PickleWriter&)> pickle;
  // Set: a collective write (SubmitCollective), given build()'s dictionary, or the error `failed` holds.
  std::function<absl::Status(absl::StatusOr<c10::impl::GenericDict>)> collective;
  absl::Status failed;
  size_t size = 0;  // What the task counts against max_pending_bytes_.
};

namespace {

// The bytes of the tensors' storages in `value`: what a snapshot's file will about hold.
size_t TensorBytes(const c10::IValue& value) {
  size_t total = 0;
  value.visit([&](const c10::IValue& item) {
    if (item.isTensor() && item.toTensor().defined()) total += item.toTensor().nbytes();
    return false;  // Go on into containers.
  });
  return total;
}

// WriteCheckpoint of what `build` makes. What it throws becomes an error naming `path`, so that a snapshot's
// builder cannot end the writer's thread; what it returns is kept as it is. `build` is gone before the dictionary is
// pickled (nothing it held is held twice then), and the dictionary when this returns, the tensors with it.
absl::Status BuildAndWrite(const std::string& path, std::function<absl::StatusOr<c10::impl::GenericDict>()> build) {
  try {
    absl::StatusOr<c10::impl::GenericDict> contents = build();
    build = nullptr;
    if (!contents.ok()) return contents.status();
    return WriteCheckpoint(path, *std::move(contents));
  } catch (const c10::Error& e) {
    return CannotSerialise(path, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return CannotSerialise(path, e.what());
  }
}

// A collective write (CheckpointWriter::SubmitCollective): `write` given what `build` makes, or `failed` when it is
// an error (then `build` is not called). What either throws becomes an error naming `path`; `write`'s own error is
// kept as it is.
absl::Status RunCollective(const std::string& path, const absl::Status& failed,
                           std::function<absl::StatusOr<c10::impl::GenericDict>()> build,
                           const std::function<absl::Status(absl::StatusOr<c10::impl::GenericDict>)>& write) {
  try {
    absl::StatusOr<c10::impl::GenericDict> contents = failed.ok() ? build() : failed;
    build = nullptr;  // What it held goes with the dictionary, once written.
    return write(std::move(contents));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("cannot write the checkpoint ", path, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("cannot write the checkpoint ", path, ": ", e.what()));
  }
}

// WriteCheckpoint of what `pickle` writes (CheckpointSnapshot::pickle); errors as BuildAndWrite's.
absl::Status PickleAndWrite(const std::string& path, const std::function<absl::Status(PickleWriter&)>& pickle) {
  try {
    PickleWriter out;
    if (absl::Status status = pickle(out); !status.ok()) return status;
    absl::StatusOr<TorchFilePieces> file = SerializeTorchFilePieces(std::move(out));
    if (!file.ok()) return CannotSerialise(path, file.status().message());
    return WriteFileDurably(path, absl::MakeConstSpan(file->pieces()), kCheckpointWrite);
  } catch (const c10::Error& e) {
    return CannotSerialise(path, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return CannotSerialise(path, e.what());
  }
}

}  // namespace

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
  auto task = std::make_unique<Task>();
  task->path = std::move(path);
  task->size = bytes.size();
  task->bytes = std::move(bytes);
  return Enqueue(std::move(task));
}

absl::Status CheckpointWriter::SubmitSnapshot(std::string path, c10::impl::GenericDict contents) {
  const size_t size = TensorBytes(contents);
  return SubmitSnapshot(std::move(path),
                        CheckpointSnapshot{.tensor_bytes = size, .build = [contents = std::move(contents)] {
                                             return absl::StatusOr<c10::impl::GenericDict>(contents);
                                           }});
}

absl::Status CheckpointWriter::SubmitSnapshot(std::string path, CheckpointSnapshot snapshot) {
  if (snapshot.build == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", path,
                     ": the snapshot submitted has no build function; give it one that makes the checkpoint's "
                     "dictionary, or submit the dictionary itself"));
  }
  auto task = std::make_unique<Task>();
  task->path = std::move(path);
  task->size = snapshot.tensor_bytes;
  task->build = std::move(snapshot.build);
  task->pickle = std::move(snapshot.pickle);
  return Enqueue(std::move(task));
}

absl::Status CheckpointWriter::SubmitCollective(
    std::string path, absl::StatusOr<CheckpointSnapshot> snapshot,
    std::function<absl::Status(absl::StatusOr<c10::impl::GenericDict>)> write) {
  auto task = std::make_unique<Task>();
  task->path = std::move(path);
  task->collective = std::move(write);
  if (!snapshot.ok()) {
    task->failed = snapshot.status();
  } else if (snapshot->build == nullptr) {
    task->failed = absl::InvalidArgumentError(absl::StrCat("checkpoint ", task->path, ": its snapshot has no build"));
  } else {
    task->size = snapshot->tensor_bytes;
    task->build = std::move(snapshot->build);
  }
  return Enqueue(std::move(task));
}

absl::Status CheckpointWriter::Enqueue(std::unique_ptr<Task> task) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(
      lock, [&] { return !error_.ok() || pending_bytes_ == 0 || pending_bytes_ + task->size <= max_pending_bytes_; });
  // After an error, a collective write is queued all the same (the other ranks' writers count on it), and the error
  // returned; anything else is not queued.
  if (!error_.ok() && task->collective == nullptr) return error_;
  pending_bytes_ += task->size;
  queue_.push_back(std::move(task));
  changed_.notify_all();
  return error_;
}

absl::Status CheckpointWriter::SubmitRemove(std::string path) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_.ok()) return error_;
  auto task = std::make_unique<Task>();
  task->path = std::move(path);
  task->remove = true;
  queue_.push_back(std::move(task));
  changed_.notify_all();
  return absl::OkStatus();
}

absl::Status CheckpointWriter::Flush() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return queue_.empty() && !busy_; });
  const absl::Status error = error_;
  lock.unlock();
  WaitForReplacedFiles();  // So that the folder holds no temporary once this returns.
  return error;
}

void CheckpointWriter::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // Stopping, with nothing left to write.
    std::unique_ptr<Task> task = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    const absl::Status earlier = error_;
    const bool skip = !earlier.ok();
    lock.unlock();
    absl::Status status;
    if (task->collective != nullptr) {
      status = RunCollective(task->path, skip ? earlier : task->failed, std::move(task->build), task->collective);
      task->build = nullptr;
      task->collective = nullptr;
    } else if (!skip && task->remove) {
      std::error_code ignored;
      if (IsShardedCheckpoint(task->path)) {
        fs::remove_all(task->path, ignored);
      } else {
        fs::remove(task->path, ignored);
      }
    } else if (!skip) {
      if (task->pickle != nullptr) {
        status = PickleAndWrite(task->path, task->pickle);
        task->pickle = nullptr;  // With `build`, the snapshot's tensors go as soon as they are written.
        task->build = nullptr;
      } else if (task->build != nullptr) {
        // The snapshot's tensors go as soon as they are written.
        status = BuildAndWrite(task->path, std::move(task->build));
        task->build = nullptr;
      } else {
        status = WriteFileDurably(task->path, task->bytes, kCheckpointWrite);
      }
    }
    lock.lock();
    if (!status.ok() && error_.ok()) error_ = status;
    pending_bytes_ -= task->size;
    busy_ = false;
    changed_.notify_all();
  }
}

}  // namespace kiln
