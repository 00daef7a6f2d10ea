// What a W&B run file (`run-<id>.wandb`) is made of, for Kiln's WandbLogger: protocol-buffer messages of wandb's
// wandb_internal.proto, encoded by hand (ProtoMessage), framed as records of a LevelDB-style log (RecordLogFile).
//
// The encoder is Kiln's own, not protoc's: the messages are wandb's, whose .proto files import a dozen others
// (telemetry, settings, base) and change with every wandb release, while Kiln writes a few fields of eight of
// those messages (numbered in wandb_logger.cc, where they are written): a generated library would bring in wandb's
// whole schema for a few dozen bytes per record.
//
// The log, as wandb's datastore reads it: a 7-byte header (":W&B", the magic 0xBEE1, version 0), then 32 KiB blocks
// of records, each a 7-byte header (a CRC-32 of the record's type byte and its data, little-endian; the data's
// length, 2 bytes little-endian; the type: 1 whole, 2 first, 3 middle, 4 last piece of a message) and its data. A
// message too long for what is left of a block is split into pieces; a block with less than 7 bytes left is padded
// with zeros. Unlike LevelDB's log the checksum is the IEEE CRC-32 (zlib's), not CRC-32C.
#ifndef KILN_TRAINER_LOGGERS_WANDB_RECORDS_H_
#define KILN_TRAINER_LOGGERS_WANDB_RECORDS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln::wandb {

// One protocol-buffer message in the wire format, its fields appended in the order written. Proto3's defaults (0,
// false, "") are written when asked; the callers leave them out.
class ProtoMessage {
 public:
  // Wire type 0: int32, int64, uint64, bool and enum fields (a negative int32 takes 10 bytes, as protobuf writes it).
  ProtoMessage& Varint(int field, int64_t value);
  ProtoMessage& Bool(int field, bool value) { return Varint(field, value ? 1 : 0); }
  // Wire type 2: string and bytes fields.
  ProtoMessage& Bytes(int field, absl::string_view value);
  // Wire type 2: an embedded message (a repeated one is written once per element).
  ProtoMessage& Message(int field, const ProtoMessage& message) { return Bytes(field, message.bytes_); }
  // Wire type 1: double fields.
  ProtoMessage& Double(int field, double value);

  const std::string& bytes() const { return bytes_; }

 private:
  void Tag(int field, int wire_type);
  void RawVarint(uint64_t value);

  std::string bytes_;
};

inline constexpr int kLogHeaderSize = 7;
inline constexpr int kLogBlockSize = 32768;

// The file header: ":W&B", 0xBEE1 and version 0.
std::string LogFileHeader();

// Appends the framed pieces of `message` to `out`, for a file whose next byte is at `offset` (the header counted),
// and advances `offset` past them.
void AppendLogRecord(absl::string_view message, std::string& out, int64_t& offset);

// A run file being written: created (never over an existing file) with its header, then one message after another.
// Append writes at once (write(2)); Sync makes what was appended durable (fdatasync), so that a crash loses at most
// the messages since the last Sync, and leaves at most the last record torn, which wandb's readers stop at.
// Errors name the file. Thread-safety: one thread at a time.
class RecordLogFile {
 public:
  static absl::StatusOr<std::unique_ptr<RecordLogFile>> Create(const std::string& path);
  // Opens a run file this process wrote and closed, to go on at `offset` (an earlier offset()): what follows it is
  // cut off first.
  static absl::StatusOr<std::unique_ptr<RecordLogFile>> ContinueAt(const std::string& path, int64_t offset);
  ~RecordLogFile();
  RecordLogFile(const RecordLogFile&) = delete;
  RecordLogFile& operator=(const RecordLogFile&) = delete;

  absl::Status Append(absl::string_view message);
  absl::Status Sync();
  // Syncs and closes; Append fails afterwards.
  absl::Status Close();
  const std::string& path() const { return path_; }
  // Where the next record goes (the header and every record so far).
  int64_t offset() const { return offset_; }

 private:
  RecordLogFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  absl::Status WriteAll(absl::string_view bytes);

  std::string path_;
  int fd_ = -1;
  int64_t offset_ = 0;
};

}  // namespace kiln::wandb

#endif  // KILN_TRAINER_LOGGERS_WANDB_RECORDS_H_
