// Checks every record of a zip archive against its CRC-32 before LibTorch parses any of it (trainer/io/crc32.h:
// carry-less multiplication where the CPU has it).
//
// A checkpoint is a LibTorch archive: a zip file of records, stored (tensors) or deflated (some TorchScript code),
// each with a CRC-32 in the central directory. LibTorch 1.13 never checks those CRCs (its miniz is built with
// MINIZ_DISABLE_ZIP_READER_CRC32_CHECKS), so a damaged record flows into its unpickler and TorchScript parser, which
// may throw, or crash: a fuzzer flipped one byte of a real checkpoint and LibTorch's TorchScript type parser
// dereferenced a wild pointer (tests/fuzz, docs/reliability.md). ReadCheckpoint therefore verifies the archive first,
// so that damage is an error that names the record, never a crash.
//
// What this does not do: check what the records hold. A crafted archive's CRCs are right; ReadTorchFile
// (torch_file.h) checks that the pickle's tensors lie inside their records and that it nests boundedly.
//
// Thread-safety: a pure function of the file's content. Never throws.
#ifndef KILN_TRAINER_CHECKPOINT_FORMAT_ZIP_CHECKSUMS_H_
#define KILN_TRAINER_CHECKPOINT_FORMAT_ZIP_CHECKSUMS_H_

#include <cstdint>
#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/io/memory_budget.h"

namespace kiln {

// The default of the most the compressed records of a file may inflate to together (stored ones are bounded by its
// size); the limit in force is MaxInflatedBytes (trainer/io/memory_budget.h), which fit's --max_inflated_mib sets.
inline constexpr uint64_t kMaxInflatedRecordBytes = kDefaultMaxInflatedBytes;

// OK when `path` is a single-disk zip archive (zip64 included) whose records are stored or deflated, lie inside the
// file, agree with their local headers, match their CRC-32 and have names that differ in more than case (LibTorch
// finds a record by its name compared without case), and its deflated records together inflate to no more than
// MaxInflatedBytes (refused from the directory, before anything is inflated: ResourceExhausted, naming the record
// that passes it and the flag that raises the limit). Otherwise InvalidArgument saying what is wrong, naming the
// record where there is one (the path is left to the caller), or NotFound when the file cannot be opened.
absl::Status VerifyZipChecksums(const std::string& path);
// Where the stored (not deflated) records of an archive lie: the offset of each one's first byte, and its size.
using StoredRanges = std::unordered_map<uint64_t, uint64_t>;

// An archive read whole into memory, at a 64-byte boundary (from 2 MiB on, at a 2 MiB boundary in memory whose pages
// the kernel is asked to make huge), and where its stored records lie. The bytes are shared:
// they live as long as the last holder (a tensor read from them in place, torch_file.h).
struct ArchiveBytes {
  std::shared_ptr<uint8_t> data;
  size_t size = 0;
  StoredRanges stored;
  uint64_t inflated = 0;  // What its deflated records inflate to, together (at most MaxInflatedBytes).
};

// Reads `path` into memory while checking it as VerifyZipChecksums does, in one pass: each record's bytes are read
// into place and their CRC computed while they are in the cache. The same errors, and NotFound when the file cannot
// be opened; ResourceExhausted when it does not fit in memory.
absl::StatusOr<ArchiveBytes> ReadVerifiedZip(const std::string& path);
// The same for the archive that is the `length` bytes at `offset` in `path` (a record of a sharded checkpoint's
// .distcp file, sharded_checkpoint.h); InvalidArgument when they run past the file's end.
absl::StatusOr<ArchiveBytes> ReadVerifiedZip(const std::string& path, uint64_t offset, uint64_t length);

}  // namespace kiln

#endif  // KILN_TRAINER_CHECKPOINT_FORMAT_ZIP_CHECKSUMS_H_
