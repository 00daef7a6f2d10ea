#include "trainer/loggers/tfrecord_writer.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "trainer/loggers/crc32c.h"

namespace kiln {
namespace {

void AppendLittleEndian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

}  // namespace

// Kept: TFRecord's framing (two little-endian integers and two masked CRCs) is implemented only inside TensorFlow,
// which Debian 12 does not package; libprotobuf writes the records themselves, Boost.CRC the checksums.
std::string FrameTfRecord(absl::string_view record) {
  std::string out;
  out.reserve(record.size() + 16);
  AppendLittleEndian(out, record.size(), 8);
  AppendLittleEndian(out, MaskedCrc32c(out.data(), 8), 4);
  out.append(record.data(), record.size());
  AppendLittleEndian(out, MaskedCrc32c(record.data(), record.size()), 4);
  return out;
}

absl::StatusOr<std::unique_ptr<TfRecordWriter>> TfRecordWriter::Open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<TfRecordWriter>(new TfRecordWriter(path, file));
}

TfRecordWriter::~TfRecordWriter() { Close().IgnoreError(); }

absl::Status TfRecordWriter::Write(absl::string_view record) {
  if (file_ == nullptr) return absl::FailedPreconditionError(absl::StrCat(path_, " is closed"));
  const std::string framed = FrameTfRecord(record);
  if (std::fwrite(framed.data(), 1, framed.size(), file_) != framed.size()) {
    return absl::InternalError(absl::StrCat("cannot write ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status TfRecordWriter::Flush() {
  if (file_ != nullptr && std::fflush(file_) != 0) {
    return absl::InternalError(absl::StrCat("cannot write ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status TfRecordWriter::Close() {
  if (file_ == nullptr) return absl::OkStatus();
  const int closed = std::fclose(file_);
  file_ = nullptr;
  if (closed != 0) return absl::InternalError(absl::StrCat("cannot write ", path_, ": ", std::strerror(errno)));
  return absl::OkStatus();
}

}  // namespace kiln
