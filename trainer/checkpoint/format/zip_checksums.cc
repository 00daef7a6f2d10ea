#include "trainer/checkpoint/format/zip_checksums.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>
#include <unordered_set>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/checkpoint/format/zip_format.h"
#include "trainer/io/crc32.h"

namespace kiln {
namespace {

// General-purpose flags no LibTorch archive has: encrypted, compressed patch, strong encryption, encrypted directory.
constexpr uint16_t kUnsupportedFlags = 0x0001 | 0x0020 | 0x0040 | 0x2000;
constexpr uint16_t kStored = 0;
constexpr uint16_t kDeflated = 8;

uint16_t U16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }
uint32_t U32(const uint8_t* p) { return U16(p) | static_cast<uint32_t>(U16(p + 2)) << 16; }
uint64_t U64(const uint8_t* p) { return U32(p) | static_cast<uint64_t>(U32(p + 4)) << 32; }

absl::Status Damaged(absl::string_view why) { return absl::InvalidArgumentError(why); }

// The archive being checked: an open file (closed on every path out), possibly read into an image of it in memory as
// it is checked ("read through": every byte read lands at its own offset in the image, so that each record's CRC is
// computed over its bytes while they are in the cache, and nothing is read twice).
class File {
 public:
  explicit File(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  // The `length` bytes at `base` in `path`, read as if they were the whole file.
  File(const std::string& path, uint64_t base, uint64_t length) : File(path) {
    base_ = base;
    window_ = length;
  }
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // The file's size; an error naming `path` when it cannot be opened (NotFound) or its size read.
  absl::StatusOr<uint64_t> Size(const std::string& path) const {
    if (fd_ < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
    struct stat info;
    if (::fstat(fd_, &info) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot stat it: ", std::strerror(errno)));
    }
    const uint64_t size = static_cast<uint64_t>(info.st_size);
    if (window_.has_value()) {
      if (base_ > size || *window_ > size - base_) {
        return absl::InvalidArgumentError(absl::StrCat("its ", *window_, " bytes at offset ", base_,
                                                       " run past the end of the file (", size, " bytes)"));
      }
      return *window_;
    }
    return size;
  }
  bool reading_through() const { return image_ != nullptr; }
  // From now on, reads land in `image` (`size` bytes, the file's size) too.
  void ReadThrough(uint8_t* image, uint64_t size) {
    image_ = image;
    size_ = size;
  }

  // Exactly `size` bytes at `offset`, or false.
  bool ReadAt(uint64_t offset, size_t size, uint8_t* out) {
    const uint8_t* in_memory = View(offset, size);
    if (in_memory != nullptr) {
      std::memcpy(out, in_memory, size);
      return true;
    }
    return image_ == nullptr && Pread(offset, size, out);
  }
  // The `size` bytes at `offset` in the image, read into it first; null when not reading through, past the end, or
  // when they cannot be read.
  const uint8_t* View(uint64_t offset, uint64_t size) {
    if (image_ == nullptr || offset > size_ || size > size_ - offset || !Pread(offset, size, image_ + offset)) {
      return nullptr;
    }
    loaded_.emplace_back(offset, offset + size);
    return image_ + offset;
  }
  // Reads the `size` bytes at `offset` into the image (which the caller checked they fit), without noting them as
  // read: for several threads at once, each on its own bytes; the caller then notes them (Loaded). False when they
  // cannot be read.
  bool ReadIntoImage(uint64_t offset, uint64_t size) const { return Pread(offset, size, image_ + offset); }
  void Loaded(uint64_t offset, uint64_t size) { loaded_.emplace_back(offset, offset + size); }
  uint8_t* image() const { return image_; }
  // Reads what the checks did not (the padding of local headers, data descriptors), so that the image is whole.
  bool ReadTheRest() {
    std::sort(loaded_.begin(), loaded_.end());
    uint64_t next = 0;
    for (const auto& [begin, end] : loaded_) {
      if (begin > next && !Pread(next, begin - next, image_ + next)) return false;
      next = std::max(next, end);
    }
    return next >= size_ || Pread(next, size_ - next, image_ + next);
  }

 private:
  bool Pread(uint64_t offset, size_t size, uint8_t* out) const {
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::pread(fd_, out + done, size - done, static_cast<off_t>(base_ + offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  int fd_ = -1;
  uint64_t base_ = 0;                // Where the file read begins in `path`.
  std::optional<uint64_t> window_;  // Set: how many bytes from base_ the file read is.
  uint8_t* image_ = nullptr;  // Reading through: the image, of the file's `size_` bytes.
  uint64_t size_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> loaded_;  // The image's ranges read so far, [begin, end).
};

struct Directory {
  uint64_t entries = 0;
  uint64_t size = 0;
  uint64_t offset = 0;
};

// The central directory, from the end-of-central-directory record (and its zip64 form when the archive has one).
absl::StatusOr<Directory> FindDirectory(File& file, uint64_t file_size) {
  if (file_size < kEndSize) return Damaged(absl::StrCat("it has ", file_size, " bytes, too few for a zip archive"));
  const uint64_t tail_size = std::min<uint64_t>(file_size, kEndSize + 0xFFFF + kLocatorSize + kZip64EndSize);
  std::vector<uint8_t> tail(tail_size);
  if (!file.ReadAt(file_size - tail_size, tail_size, tail.data())) return Damaged("its end cannot be read");
  // The end record is the last one whose comment runs exactly to the end of the file.
  int64_t end = -1;
  for (int64_t i = static_cast<int64_t>(tail_size - kEndSize); i >= 0; --i) {
    if (U32(&tail[i]) == kEndOfCentralDirectory && i + kEndSize + U16(&tail[i + 20]) == tail_size) {
      end = i;
      break;
    }
  }
  if (end < 0) return Damaged("it has no zip end-of-central-directory record (truncated, or not a zip archive)");
  const uint8_t* record = &tail[end];
  if (U16(record + 4) != 0 || U16(record + 6) != 0 || U16(record + 8) != U16(record + 10)) {
    return Damaged("it is a multi-disk zip archive, or its end record is damaged");
  }
  Directory directory{U16(record + 10), U32(record + 12), U32(record + 16)};
  const uint64_t end_offset = file_size - tail_size + end;
  uint64_t directory_end = end_offset;
  if (end >= static_cast<int64_t>(kLocatorSize) && U32(&tail[end - kLocatorSize]) == kZip64Locator) {
    const uint64_t zip64_offset = U64(&tail[end - kLocatorSize + 8]);
    uint8_t zip64[kZip64EndSize];
    if (zip64_offset > end_offset - kLocatorSize || end_offset - kLocatorSize - zip64_offset < kZip64EndSize ||
        !file.ReadAt(zip64_offset, kZip64EndSize, zip64) || U32(zip64) != kZip64EndOfCentralDirectory) {
      return Damaged("its zip64 end-of-central-directory record is missing or out of place");
    }
    const uint8_t* locator = &tail[end - kLocatorSize];
    if (U32(locator + 4) != 0 || U32(locator + 16) > 1 || U32(zip64 + 16) != 0 || U32(zip64 + 20) != 0 ||
        U64(zip64 + 24) != U64(zip64 + 32)) {
      return Damaged("its zip64 end-of-central-directory record names another disk (a multi-disk archive?)");
    }
    directory = Directory{U64(zip64 + 32), U64(zip64 + 40), U64(zip64 + 48)};
    directory_end = zip64_offset;
  }
  if (directory.offset > directory_end || directory.size > directory_end - directory.offset) {
    return Damaged("its central directory lies outside the file");
  }
  if (directory.entries > directory.size / kCentralSize) {
    return Damaged(
        absl::StrCat("its central directory is too small for the ", directory.entries, " records it announces"));
  }
  return directory;
}

struct Entry {
  std::string name;
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t compressed_size = 0;  // In the file.
  uint64_t size = 0;             // Once inflated.
  uint64_t local_offset = 0;
};

// One central-directory entry at `p` (with `available` bytes left in the directory); advances `consumed`.
absl::StatusOr<Entry> ParseEntry(const uint8_t* p, uint64_t available, uint64_t& consumed) {
  if (available < kCentralSize || U32(p) != kCentralHeader) return Damaged("its central directory is damaged");
  const uint16_t flags = U16(p + 8);
  const uint16_t method = U16(p + 10);
  Entry entry;
  entry.crc = U32(p + 16);
  uint64_t compressed = U32(p + 20);
  uint64_t uncompressed = U32(p + 24);
  const uint16_t name_length = U16(p + 28);
  const uint16_t extra_length = U16(p + 30);
  const uint16_t comment_length = U16(p + 32);
  if (U16(p + 34) != 0) return Damaged("its central directory names another disk (a multi-disk archive?)");
  entry.local_offset = U32(p + 42);
  const uint64_t length = kCentralSize + name_length + extra_length + comment_length;
  if (length > available) return Damaged("its central directory is damaged (an entry runs past its end)");
  entry.name.assign(reinterpret_cast<const char*>(p + kCentralSize), name_length);
  // miniz (inside LibTorch) takes an entry for a folder, and reads nothing from it, when its name ends with '/' or
  // its DOS attributes say so; no record of a LibTorch archive is one.
  if (entry.name.empty() || entry.name.back() == '/' || (U32(p + 38) & 0x10) != 0) {
    return Damaged(absl::StrCat("record '", entry.name, "' is marked as a folder"));
  }
  // Sizes and offsets too large for 32 bits are in the zip64 extra field, in this order, when they are 0xFFFFFFFF.
  const uint8_t* extra = p + kCentralSize + name_length;
  for (uint64_t at = 0; at + 4 <= extra_length;) {
    const uint16_t id = U16(extra + at);
    const uint16_t size = U16(extra + at + 2);
    if (at + 4 + size > extra_length)
      return Damaged(absl::StrCat("record '", entry.name, "' has a damaged extra field"));
    if (id == kZip64ExtraField) {
      uint64_t field = at + 4;
      for (uint64_t* value : {&uncompressed, &compressed, &entry.local_offset}) {
        if (*value != 0xFFFFFFFF) continue;
        if (field + 8 > at + 4 + size)
          return Damaged(absl::StrCat("record '", entry.name, "' has a short zip64 field"));
        *value = U64(extra + field);
        field += 8;
      }
    }
    at += 4 + size;
  }
  if ((flags & kUnsupportedFlags) != 0) {
    return Damaged(absl::StrCat("record '", entry.name, "' is encrypted or a patch (flags ", flags, ")"));
  }
  // LibTorch stores tensors as they are and deflates some of the TorchScript code it saves beside them.
  if (!(method == kStored && compressed == uncompressed) && method != kDeflated) {
    return Damaged(absl::StrCat("record '", entry.name, "' is compressed with method ", method,
                                ", which LibTorch archives do not use"));
  }
  // Checked before anything is inflated: LibTorch allocates a record's whole size to read it (a 0.5 MB deflate bomb
  // took 2.3 GB and 18 s before it failed).
  if (method == kDeflated && uncompressed > MaxInflatedBytes()) {
    return InflatesTooFar(absl::StrCat("record '", entry.name, "' (", uncompressed, " bytes, says the zip directory)"));
  }
  entry.method = method;
  entry.compressed_size = compressed;
  entry.size = uncompressed;
  consumed += length;
  return entry;
}

// The CRC-32 of a record's content: its bytes as they are when stored, inflated when deflated (and then exactly
// `size` bytes must come out).
absl::StatusOr<uint32_t> RecordCrc(File& file, uint64_t data, const Entry& entry, std::vector<uint8_t>& buffer) {
  uint32_t crc = 0;
  const auto unreadable = [&] { return Damaged(absl::StrCat("record '", entry.name, "' cannot be read")); };
  if (buffer.empty()) buffer.resize(1 << 20);
  if (entry.method == kStored) {
    for (uint64_t done = 0; done < entry.size;) {
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(buffer.size(), entry.size - done));
      if (!file.ReadAt(data + done, chunk, buffer.data())) return unreadable();
      crc = Crc32(crc, buffer.data(), chunk);
      done += chunk;
    }
    return crc;
  }
  z_stream stream{};
  if (inflateInit2(&stream, -MAX_WBITS) != Z_OK) return absl::InternalError("zlib's inflateInit2 failed");
  std::vector<uint8_t> out(buffer.size());
  uint64_t read = 0;
  uint64_t inflated = 0;
  int result = Z_OK;
  while (result != Z_STREAM_END) {
    if (stream.avail_in == 0) {
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(buffer.size(), entry.compressed_size - read));
      if (chunk == 0) break;  // Out of input before the end of the stream.
      if (!file.ReadAt(data + read, chunk, buffer.data())) {
        inflateEnd(&stream);
        return unreadable();
      }
      read += chunk;
      stream.next_in = buffer.data();
      stream.avail_in = static_cast<uInt>(chunk);
    }
    stream.next_out = out.data();
    stream.avail_out = static_cast<uInt>(out.size());
    result = inflate(&stream, Z_NO_FLUSH);
    const size_t produced = out.size() - stream.avail_out;
    inflated += produced;
    if (inflated > entry.size) break;
    crc = Crc32(crc, out.data(), produced);
    if (result != Z_OK && result != Z_STREAM_END) break;
  }
  inflateEnd(&stream);
  if (result != Z_STREAM_END || inflated != entry.size) {
    return Damaged(absl::StrCat("record '", entry.name, "' does not inflate to its ", entry.size, " bytes"));
  }
  return crc;
}

// A stored record whose bytes are to be read into the image and checked.
struct StoredRecord {
  std::string name;
  uint64_t data = 0;  // Where its bytes begin in the file.
  uint64_t size = 0;
  uint32_t crc = 0;   // As the directory says.
};

// Part of one record's bytes, read and checked by one thread.
struct Span {
  size_t record = 0;
  uint64_t begin = 0;  // In the record.
  uint64_t length = 0;
  uint32_t crc = 0;
  bool read = false;
};

// Reads each span's bytes into the image and computes their CRC-32, 256 KiB at a time, so that each piece is checked
// while it is in the cache (one pass over 6.4 MB read and checked so took 2.1 ms here against 3.2 for the read and
// then the check).
void ReadSpans(const File& file, const std::vector<StoredRecord>& records, Span* spans, size_t count) {
  constexpr uint64_t kPiece = 256 << 10;
  for (Span* span = spans; span != spans + count; ++span) {
    const uint64_t start = records[span->record].data + span->begin;
    uint32_t crc = 0;
    span->read = true;
    for (uint64_t done = 0; done < span->length && span->read;) {
      const uint64_t piece = std::min(kPiece, span->length - done);
      span->read = file.ReadIntoImage(start + done, piece);
      crc = Crc32(crc, file.image() + start + done, span->read ? piece : 0);
      done += piece;
    }
    span->crc = crc;
  }
}

// Reads the stored records into the image and checks their CRC-32s. From kTwoThreads bytes on, a second thread reads
// and checks the second half of the bytes (their pages copied out of the kernel's cache by two cores: 6.4 MB in
// 0.58 ms here instead of 0.84); a record split between the two is checked by combining its halves' CRCs. Records
// that share bytes (no zip writer makes them; a damaged or crafted directory can) are read by one thread, so that no
// two threads write the same bytes of the image. Errors name the first record, in the directory's order, that cannot
// be read or fails its check.
absl::Status CheckStoredRecords(File& file, const std::vector<StoredRecord>& records) {
  constexpr uint64_t kTwoThreads = uint64_t{2} << 20;
  uint64_t total = 0;
  bool apart = true;  // Each record after the one before it in the file, sharing no byte.
  for (size_t i = 0; i < records.size(); ++i) {
    total += records[i].size;
    if (i > 0 && records[i].data < records[i - 1].data + records[i - 1].size) apart = false;
  }
  const bool two = apart && total >= kTwoThreads && std::thread::hardware_concurrency() > 1;
  std::vector<Span> spans;
  spans.reserve(records.size() + 1);
  const uint64_t half = two ? total / 2 : total;  // The first thread's bytes.
  size_t first_thread_spans = 0;
  uint64_t at = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const uint64_t size = records[i].size;
    if (at < half && at + size > half) {  // Split between the threads.
      spans.push_back({.record = i, .begin = 0, .length = half - at});
      first_thread_spans = spans.size();
      spans.push_back({.record = i, .begin = half - at, .length = at + size - half});
    } else {
      spans.push_back({.record = i, .begin = 0, .length = size});
      if (at + size <= half) first_thread_spans = spans.size();
    }
    at += size;
  }
  std::optional<std::thread> second;
  if (two) {
    try {
      second.emplace(ReadSpans, std::cref(file), std::cref(records), spans.data() + first_thread_spans,
                     spans.size() - first_thread_spans);
    } catch (const std::system_error&) {
      second.reset();  // No thread to be had: this one reads them all.
      first_thread_spans = spans.size();
    }
  }
  ReadSpans(file, records, spans.data(), first_thread_spans);
  if (second.has_value()) second->join();
  for (size_t s = 0; s < spans.size(); ++s) {
    const StoredRecord& record = records[spans[s].record];
    if (!spans[s].read) return Damaged(absl::StrCat("record '", record.name, "' cannot be read"));
    file.Loaded(record.data + spans[s].begin, spans[s].length);
    uint32_t crc = spans[s].crc;
    if (s + 1 < spans.size() && spans[s + 1].record == spans[s].record) {
      ++s;
      if (!spans[s].read) return Damaged(absl::StrCat("record '", record.name, "' cannot be read"));
      file.Loaded(record.data + spans[s].begin, spans[s].length);
      crc = static_cast<uint32_t>(crc32_combine(crc, spans[s].crc, static_cast<z_off_t>(spans[s].length)));
    }
    if (crc != record.crc) {
      return Damaged(absl::StrFormat("record '%s' fails its CRC-32 check (stored %08x, computed %08x)", record.name,
                                     record.crc, crc));
    }
  }
  return absl::OkStatus();
}

absl::Status Verify(File& file, uint64_t file_size, StoredRanges* stored, uint64_t* inflated = nullptr) {
  absl::StatusOr<Directory> directory = FindDirectory(file, file_size);
  if (!directory.ok()) return directory.status();

  std::vector<uint8_t> central(directory->size);
  if (!file.ReadAt(directory->offset, central.size(), central.data())) {
    return Damaged("its central directory cannot be read");
  }
  std::vector<uint8_t> buffer;  // Made when a record is read through it (all but stored ones read through).
  uint64_t consumed = 0;
  // LibTorch's zip reader (miniz) finds a record by its name compared without case: two records whose names differ
  // at most in case leave which one is read to its search order (a short data/0 and then a whole one read past the
  // short one's end). A file torch.save wrote names each record once.
  std::unordered_set<std::string> names;
  std::vector<StoredRecord> stored_records;
  // What the deflated records inflate to together: each is read whole into memory, and one file is one compressed
  // input (MaxInflatedBytes), however many records it splits its bytes into.
  uint64_t inflated_total = 0;
  for (uint64_t i = 0; i < directory->entries; ++i) {
    absl::StatusOr<Entry> entry = ParseEntry(central.data() + consumed, central.size() - consumed, consumed);
    if (!entry.ok()) return entry.status();
    if (entry->method == kDeflated) {
      if (__builtin_add_overflow(inflated_total, entry->size, &inflated_total) ||
          inflated_total > MaxInflatedBytes()) {
        return InflatesTooFar(absl::StrCat("what its deflated records hold together (", inflated_total,
                                           " bytes by record '", entry->name, "', says the zip directory)"));
      }
    }
    if (!names.insert(absl::AsciiStrToLower(entry->name)).second) {
      return Damaged(absl::StrCat("record '", entry->name, "' appears twice (names compared without case)"));
    }
    uint8_t local[kLocalSize];
    if (entry->local_offset > directory->offset || directory->offset - entry->local_offset < kLocalSize ||
        !file.ReadAt(entry->local_offset, kLocalSize, local) || U32(local) != kLocalHeader) {
      return Damaged(absl::StrCat("record '", entry->name, "' has no local header where the directory says"));
    }
    // LibTorch reads the local header too: it must agree with the directory.
    const uint16_t local_name_length = U16(local + 26);
    std::string local_name(local_name_length, '\0');
    if ((U16(local + 6) & kUnsupportedFlags) != 0 || U16(local + 8) != entry->method ||
        local_name_length != entry->name.size() ||
        !file.ReadAt(entry->local_offset + kLocalSize, local_name_length,
                     reinterpret_cast<uint8_t*>(local_name.data())) ||
        local_name != entry->name) {
      return Damaged(absl::StrCat("record '", entry->name, "' has a local header that disagrees with the directory"));
    }
    const uint64_t data = entry->local_offset + kLocalSize + local_name_length + U16(local + 28);
    if (data > directory->offset || entry->compressed_size > directory->offset - data) {
      return Damaged(absl::StrCat("record '", entry->name, "' runs past the end of the data (truncated?)"));
    }
    if (stored != nullptr && entry->method == kStored) (*stored)[data] = entry->size;
    if (entry->method == kStored && file.reading_through()) {
      // Checked with the other stored records once the directory is (CheckStoredRecords).
      if (data + entry->size > file_size) return Damaged(absl::StrCat("record '", entry->name, "' cannot be read"));
      stored_records.push_back({.name = entry->name, .data = data, .size = entry->size, .crc = entry->crc});
      continue;
    }
    absl::StatusOr<uint32_t> crc = RecordCrc(file, data, *entry, buffer);
    if (!crc.ok()) return crc.status();
    if (*crc != entry->crc) {
      return Damaged(absl::StrFormat("record '%s' fails its CRC-32 check (stored %08x, computed %08x)", entry->name,
                                     entry->crc, *crc));
    }
  }
  if (inflated != nullptr) *inflated = inflated_total;
  return CheckStoredRecords(file, stored_records);
}

// Memory for an image of `size` bytes (never empty); null when there is none. At a 64-byte boundary (where torch.save
// puts every record), and from kHugePage bytes on a mapping of its own at a kHugePage boundary whose pages the kernel
// is asked to make huge (MADV_HUGEPAGE: one fault and one zeroing per 2 MiB instead of per 4 KiB; the kernel makes
// small pages where it has no huge one, or where transparent huge pages are off). A checkpoint read at a resume lands
// in memory the process has not touched, so that the image's page faults cost as much as its copy: reading 6.4 MB
// so went from 2.7 to 3.8-4.6 GB/s here (checkpoint_bench, 2026-12-05). (Making the small pages in one call instead,
// mmap's MAP_POPULATE, was slower.)
std::shared_ptr<uint8_t> AllocateImage(size_t size) {
  constexpr size_t kHugePage = size_t{2} << 20;
  if (size < kHugePage) {
    void* image = std::aligned_alloc(64, std::max<size_t>(64, (size + 63) / 64 * 64));
    if (image == nullptr) return nullptr;
    return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(image), [](uint8_t* p) { std::free(p); });
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t length = (size + page - 1) / page * page;
  if (length > SIZE_MAX - kHugePage) return nullptr;
  // Mapped a huge page longer than needed, and what lies before the first boundary and after the image given back.
  void* mapped = mmap(nullptr, length + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return nullptr;
  uint8_t* const begin = static_cast<uint8_t*>(mapped);
  uint8_t* const image = begin + (kHugePage - reinterpret_cast<uintptr_t>(begin) % kHugePage) % kHugePage;
  if (image > begin) munmap(begin, image - begin);
  munmap(image + length, begin + kHugePage - image);  // Never empty: image lies less than kHugePage on from begin.
  (void)madvise(image, length, MADV_HUGEPAGE);  // Advice: without it (EINVAL where the kernel has none) small pages.
  return std::shared_ptr<uint8_t>(image, [length](uint8_t* p) { munmap(p, length); });
}

// Reads `file` into memory while checking it (ReadVerifiedZip).
absl::StatusOr<ArchiveBytes> ReadVerified(File& file, const std::string& path) {
  absl::StatusOr<uint64_t> size = file.Size(path);
  if (!size.ok()) return size.status();
  ArchiveBytes bytes;
  bytes.size = static_cast<size_t>(*size);
  bytes.data = AllocateImage(bytes.size);
  if (bytes.data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot hold its ", bytes.size, " bytes in memory"));
  }
  file.ReadThrough(bytes.data.get(), bytes.size);
  if (absl::Status status = Verify(file, bytes.size, &bytes.stored, &bytes.inflated); !status.ok()) return status;
  if (!file.ReadTheRest()) return Damaged("it cannot be read whole (shortened while read?)");
  return bytes;
}

}  // namespace

absl::Status VerifyZipChecksums(const std::string& path) {
  File file(path);
  absl::StatusOr<uint64_t> size = file.Size(path);
  if (!size.ok()) return size.status();
  return Verify(file, *size, nullptr);
}

absl::StatusOr<ArchiveBytes> ReadVerifiedZip(const std::string& path) {
  File file(path);
  return ReadVerified(file, path);
}

absl::StatusOr<ArchiveBytes> ReadVerifiedZip(const std::string& path, uint64_t offset, uint64_t length) {
  File file(path, offset, length);
  return ReadVerified(file, path);
}


}  // namespace kiln
