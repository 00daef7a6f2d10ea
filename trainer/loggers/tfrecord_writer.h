// TfRecordWriter: appends records to a file in TFRecord framing, the container of TensorBoard's event files:
//
//   uint64 length, little-endian
//   uint32 masked CRC-32C of those 8 length bytes
//   length bytes of data
//   uint32 masked CRC-32C of the data
//
// Thread-safety: one thread at a time. Records are buffered until Flush (or Close, or destruction).
#ifndef KILN_TRAINER_LOGGERS_TFRECORD_WRITER_H_
#define KILN_TRAINER_LOGGERS_TFRECORD_WRITER_H_

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln {

class TfRecordWriter {
 public:
  // Creates (truncates) `path`; its folder must exist. InvalidArgument naming the path and the system's reason.
  static absl::StatusOr<std::unique_ptr<TfRecordWriter>> Open(const std::string& path);
  ~TfRecordWriter();
  TfRecordWriter(const TfRecordWriter&) = delete;
  TfRecordWriter& operator=(const TfRecordWriter&) = delete;

  absl::Status Write(absl::string_view record);
  absl::Status Flush();
  absl::Status Close();
  const std::string& path() const { return path_; }

 private:
  TfRecordWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  std::string path_;
  std::FILE* file_;
};

// The framed bytes of one record (what Write appends); public for tests.
std::string FrameTfRecord(absl::string_view record);

}  // namespace kiln

#endif  // KILN_TRAINER_LOGGERS_TFRECORD_WRITER_H_
