#include "trainer/checkpoint/format/zip_writer.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "trainer/checkpoint/format/zip_format.h"
#include "trainer/io/crc32.h"

namespace kiln {
namespace {

constexpr uint16_t kVersion = 20;       // 2.0: stored records.
constexpr uint16_t kVersionZip64 = 45;  // 4.5: zip64.
constexpr uint32_t kMax32 = 0xFFFFFFFF;

// Little-endian fields written at a cursor into a buffer sized beforehand (a header is written with one
// allocation, not a call into std::string per byte: issue #41 measured 20 k instructions a checkpoint in those).
class Cursor {
 public:
  explicit Cursor(char* at) : at_(at) {}
  void U16(uint16_t value) { Little(value, 2); }
  void U32(uint32_t value) { Little(value, 4); }
  void U64(uint64_t value) { Little(value, 8); }
  void Bytes(absl::string_view bytes) {
    if (bytes.empty()) return;  // An empty view's data may be null, which memcpy must not be given.
    std::memcpy(at_, bytes.data(), bytes.size());
    at_ += bytes.size();
  }
  void Fill(size_t n, char c) {
    std::memset(at_, c, n);
    at_ += n;
  }
  char* at() const { return at_; }

 private:
  void Little(uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) *at_++ = static_cast<char>((value >> (8 * i)) & 0xFF);
  }
  char* at_;
};

// `out` grown by `n` bytes, and a cursor at the first of them.
Cursor Extend(std::string& out, size_t n) {
  const size_t start = out.size();
  out.resize(start + n);
  return Cursor(out.data() + start);
}

uint32_t Clamp32(uint64_t value) { return static_cast<uint32_t>(std::min<uint64_t>(value, kMax32)); }

}  // namespace

std::string& ZipWriter::Own(std::string bytes) {
  owned_.push_back(std::move(bytes));
  return owned_.back();
}

void ZipWriter::Add(absl::string_view name, absl::string_view data) {
  const uint64_t size = data.size();
  const uint32_t crc = Crc32(0, data.data(), data.size());
  const bool zip64_size = size >= kMax32;
  const bool zip64_offset = offset_ >= kMax32;

  // Local header: the sizes in a zip64 field when they do not fit, then LibTorch's "FB" field, padded with 'Z' so
  // that the data starts at a multiple of kAlignment.
  const uint64_t zip64_field = zip64_size ? 4 + 16 : 0;
  const uint64_t before_padding = offset_ + kLocalSize + name.size() + zip64_field + 4;
  const uint64_t padding = (kAlignment - before_padding % kAlignment) % kAlignment;
  std::string& header = Own({});
  Cursor local = Extend(header, kLocalSize + name.size() + zip64_field + 4 + padding);
  local.U32(kLocalHeader);
  local.U16(zip64_size ? kVersionZip64 : kVersion);
  local.U16(0);  // Flags.
  local.U16(0);  // Stored.
  local.U32(0);  // Time and date (LibTorch's writer leaves them 0 too).
  local.U32(crc);
  local.U32(zip64_size ? kMax32 : static_cast<uint32_t>(size));
  local.U32(zip64_size ? kMax32 : static_cast<uint32_t>(size));
  local.U16(static_cast<uint16_t>(name.size()));
  local.U16(static_cast<uint16_t>(zip64_field + 4 + padding));
  local.Bytes(name);
  if (zip64_size) {
    local.U16(kZip64ExtraField);
    local.U16(16);
    local.U64(size);
    local.U64(size);
  }
  local.Bytes("FB");
  local.U16(static_cast<uint16_t>(padding));
  local.Fill(padding, 'Z');
  pieces_.push_back(header);
  if (size > 0) pieces_.push_back(data);

  // Its central directory entry, with a zip64 field for what does not fit in 32 bits (in the order the format
  // gives: size, compressed size, local header offset).
  const size_t zip64_values = (zip64_size ? 16 : 0) + (zip64_offset ? 8 : 0);
  const size_t zip64_extra = zip64_values == 0 ? 0 : 4 + zip64_values;
  Cursor entry = Extend(central_, kCentralSize + name.size() + zip64_extra);
  entry.U32(kCentralHeader);
  entry.U16(kVersionZip64);  // Made by.
  entry.U16(zip64_values == 0 ? kVersion : kVersionZip64);
  entry.U16(0);
  entry.U16(0);
  entry.U32(0);
  entry.U32(crc);
  entry.U32(zip64_size ? kMax32 : static_cast<uint32_t>(size));
  entry.U32(zip64_size ? kMax32 : static_cast<uint32_t>(size));
  entry.U16(static_cast<uint16_t>(name.size()));
  entry.U16(static_cast<uint16_t>(zip64_extra));
  entry.U16(0);  // Comment.
  entry.U16(0);  // Disk.
  entry.U16(0);  // Internal attributes.
  entry.U32(0);  // External attributes.
  entry.U32(zip64_offset ? kMax32 : static_cast<uint32_t>(offset_));
  entry.Bytes(name);
  if (zip64_values != 0) {
    entry.U16(kZip64ExtraField);
    entry.U16(static_cast<uint16_t>(zip64_values));
    if (zip64_size) {
      entry.U64(size);
      entry.U64(size);
    }
    if (zip64_offset) entry.U64(offset_);
  }
  offset_ += header.size() + size;
  ++entries_;
  for (const uint64_t value : {uint64_t{name.size()}, size, uint64_t{crc}}) {
    fingerprint_ = (fingerprint_ ^ value) * 0x100000001b3;  // FNV-1a's prime, a word at a time.
  }
}

const std::vector<absl::string_view>& ZipWriter::Finish() {
  const uint64_t directory_offset = offset_;
  const uint64_t directory_size = central_.size();
  std::string& end = Own(std::move(central_));
  const uint64_t zip64_end_offset = directory_offset + directory_size;
  // The zip64 end record and its locator always, as LibTorch's writer does; then the classic end record, with the
  // values that do not fit saturated.
  Cursor out = Extend(end, kZip64EndSize + kLocatorSize + kEndSize);
  out.U32(kZip64EndOfCentralDirectory);
  out.U64(44);  // The size of the rest of this record.
  out.U16(kVersionZip64);
  out.U16(kVersionZip64);
  out.U32(0);
  out.U32(0);
  out.U64(entries_);
  out.U64(entries_);
  out.U64(directory_size);
  out.U64(directory_offset);
  out.U32(kZip64Locator);
  out.U32(0);
  out.U64(zip64_end_offset);
  out.U32(1);
  out.U32(kEndOfCentralDirectory);
  out.U16(0);
  out.U16(0);
  out.U16(static_cast<uint16_t>(std::min<uint64_t>(entries_, 0xFFFF)));
  out.U16(static_cast<uint16_t>(std::min<uint64_t>(entries_, 0xFFFF)));
  out.U32(Clamp32(directory_size));
  out.U32(Clamp32(directory_offset));
  out.U16(0);  // Comment.
  pieces_.push_back(end);
  offset_ += end.size();
  return pieces_;
}

}  // namespace kiln
