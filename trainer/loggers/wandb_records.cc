#include "trainer/loggers/wandb_records.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "boost/crc.hpp"

namespace kiln::wandb {
namespace {

// The record types of a piece of a message.
constexpr char kFull = 1;
constexpr char kFirst = 2;
constexpr char kMiddle = 3;
constexpr char kLast = 4;

void AppendLittleEndian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

void AppendPiece(absl::string_view data, char type, std::string& out) {
  boost::crc_32_type crc;  // zlib's CRC-32, over the type byte and then the data.
  crc.process_byte(static_cast<unsigned char>(type));
  crc.process_bytes(data.data(), data.size());
  AppendLittleEndian(out, crc.checksum(), 4);
  AppendLittleEndian(out, data.size(), 2);
  out.push_back(type);
  out.append(data.data(), data.size());
}

absl::Status FileError(const std::string& what, const std::string& path, int error) {
  return absl::InternalError(absl::StrCat("cannot ", what, " W&B run file ", path, ": ", std::strerror(error)));
}

}  // namespace

void ProtoMessage::Tag(int field, int wire_type) {
  RawVarint((static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
}

void ProtoMessage::RawVarint(uint64_t value) {
  while (value >= 0x80) {
    bytes_.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  bytes_.push_back(static_cast<char>(value));
}

ProtoMessage& ProtoMessage::Varint(int field, int64_t value) {
  Tag(field, 0);
  RawVarint(static_cast<uint64_t>(value));
  return *this;
}

ProtoMessage& ProtoMessage::Bytes(int field, absl::string_view value) {
  Tag(field, 2);
  RawVarint(value.size());
  bytes_.append(value.data(), value.size());
  return *this;
}

ProtoMessage& ProtoMessage::Double(int field, double value) {
  Tag(field, 1);
  uint64_t bits = 0;
  static_assert(sizeof(bits) == sizeof(value));
  std::memcpy(&bits, &value, sizeof(bits));
  AppendLittleEndian(bytes_, bits, 8);
  return *this;
}

std::string LogFileHeader() {
  std::string header = ":W&B";
  AppendLittleEndian(header, 0xBEE1, 2);
  header.push_back(0);
  return header;
}

void AppendLogRecord(absl::string_view message, std::string& out, int64_t& offset) {
  bool first = true;
  while (true) {
    int64_t left = kLogBlockSize - offset % kLogBlockSize;
    if (left < kLogHeaderSize) {  // No room for a record header: the block ends in zeros.
      out.append(static_cast<size_t>(left), '\0');
      offset += left;
      left = kLogBlockSize;
    }
    const int64_t room = left - kLogHeaderSize;
    const bool last = static_cast<int64_t>(message.size()) <= room;
    const absl::string_view piece = message.substr(0, static_cast<size_t>(std::min<int64_t>(room, message.size())));
    AppendPiece(piece, first ? (last ? kFull : kFirst) : (last ? kLast : kMiddle), out);
    offset += kLogHeaderSize + static_cast<int64_t>(piece.size());
    if (last) return;
    message.remove_prefix(piece.size());
    first = false;
  }
}

absl::StatusOr<std::unique_ptr<RecordLogFile>> RecordLogFile::Create(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return FileError("create", path, errno);
  std::unique_ptr<RecordLogFile> file(new RecordLogFile(path, fd));
  if (absl::Status s = file->WriteAll(LogFileHeader()); !s.ok()) return s;
  file->offset_ = kLogHeaderSize;
  return file;
}

absl::StatusOr<std::unique_ptr<RecordLogFile>> RecordLogFile::ContinueAt(const std::string& path, int64_t offset) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return FileError("open", path, errno);
  std::unique_ptr<RecordLogFile> file(new RecordLogFile(path, fd));
  if (::ftruncate(fd, offset) != 0 || ::lseek(fd, offset, SEEK_SET) != offset) return FileError("cut", path, errno);
  file->offset_ = offset;
  return file;
}

RecordLogFile::~RecordLogFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status RecordLogFile::WriteAll(absl::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("W&B run file ", path_, " is closed"));
  while (!bytes.empty()) {
    const ssize_t written = ::write(fd_, bytes.data(), bytes.size());
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) {
      const int error = errno;
      return error == ENOSPC || error == EDQUOT || error == EFBIG
                 ? absl::ResourceExhaustedError(
                       absl::StrCat("cannot write W&B run file ", path_, ": ", std::strerror(error)))
                 : FileError("write", path_, error);
    }
    bytes.remove_prefix(static_cast<size_t>(written));
  }
  return absl::OkStatus();
}

absl::Status RecordLogFile::Append(absl::string_view message) {
  std::string framed;
  int64_t offset = offset_;
  AppendLogRecord(message, framed, offset);
  if (absl::Status s = WriteAll(framed); !s.ok()) return s;
  offset_ = offset;
  return absl::OkStatus();
}

absl::Status RecordLogFile::Sync() {
  if (fd_ < 0) return absl::OkStatus();
  if (::fdatasync(fd_) != 0) return FileError("flush", path_, errno);
  return absl::OkStatus();
}

absl::Status RecordLogFile::Close() {
  if (fd_ < 0) return absl::OkStatus();
  absl::Status synced = Sync();
  if (::close(fd_) != 0 && synced.ok()) synced = FileError("close", path_, errno);
  fd_ = -1;
  return synced;
}

}  // namespace kiln::wandb
