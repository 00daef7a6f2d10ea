// The zip container of a torch.save file, written by Kiln: stored records, each one's data at a 64-byte boundary (as
// LibTorch's PyTorchStreamWriter places them, with the same "FB" padding field), zip64 end records, and each record's
// CRC-32 computed by trainer/io/crc32.h. LibTorch's writer (miniz) computes its CRCs about 5 times slower and needs the
// whole file in one buffer; this one copies nothing: the archive is a list of pieces, the small headers it owns and
// the records' bytes where they are, for WriteFileDurably to write in order (issue #41; the durable write's figures
// against LibTorch's are in docs/performance.md).
//
// What readers see: LibTorch's and Python's zip readers, and Kiln's (zip_checksums.h), read it as they read
// PyTorchStreamWriter's archives. It differs from those in form only: the CRC and sizes are in each local header
// (LibTorch's writer streams and puts them in a data descriptor after the data).
//
// Thread-safety: none; one writer per archive.
#ifndef KILN_TRAINER_CHECKPOINT_FORMAT_ZIP_WRITER_H_
#define KILN_TRAINER_CHECKPOINT_FORMAT_ZIP_WRITER_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kiln {

class ZipWriter {
 public:
  // Records' data start at multiples of this (LibTorch's default alignment, so that tensors can be read in place).
  static constexpr uint64_t kAlignment = 64;

  // Adds the record `name` holding `data`, which is not copied: it must stay as it is until the pieces are written.
  void Add(absl::string_view name, absl::string_view data);
  // Ends the archive (central directory, zip64 end records) and returns every piece, in the order to write them.
  // Nothing may be added after.
  const std::vector<absl::string_view>& Finish();
  // The archive's size so far (after Finish, the whole file's).
  uint64_t size() const { return offset_; }
  // A hash of the records added so far (their names' lengths, sizes and CRCs): the same records, the same value.
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  std::string& Own(std::string bytes);

  std::deque<std::string> owned_;  // Headers; a deque, so that pieces pointing into them stay valid.
  std::vector<absl::string_view> pieces_;
  std::string central_;  // The central directory, built as records are added.
  uint64_t offset_ = 0;
  uint64_t entries_ = 0;
  uint64_t fingerprint_ = 0xcbf29ce484222325;  // FNV-1a's offset basis.
};

}  // namespace kiln

#endif  // KILN_TRAINER_CHECKPOINT_FORMAT_ZIP_WRITER_H_
