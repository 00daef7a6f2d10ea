#include "trainer/checkpoint/zip_writer.h"

#include <algorithm>
#include <utility>

#include "trainer/checkpoint/zip_format.h"
#include "trainer/io/crc32.h"

namespace kiln {
namespace {

constexpr uint16_t kVersion = 20;       // 2.0: stored records.
constexpr uint16_t kVersionZip64 = 45;  // 4.5: zip64.
constexpr uint32_t kMax32 = 0xFFFFFFFF;

void Put16(std::string& out, uint16_t value) {
  out.push_back(static_cast<char>(value & 0xFF));
  out.push_back(static_cast<char>(value >> 8));
}
void Put32(std::string& out, uint32_t value) {
  Put16(out, static_cast<uint16_t>(value & 0xFFFF));
  Put16(out, static_cast<uint16_t>(value >> 16));
}
void Put64(std::string& out, uint64_t value) {
  Put32(out, static_cast<uint32_t>(value & kMax32));
  Put32(out, static_cast<uint32_t>(value >> 32));
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
  std::string& header = Own({});
  Put32(header, kLocalHeader);
  Put16(header, zip64_size ? kVersionZip64 : kVersion);
  Put16(header, 0);  // Flags.
  Put16(header, 0);  // Stored.
  Put32(header, 0);  // Time and date (LibTorch's writer leaves them 0 too).
  Put32(header, crc);
  Put32(header, zip64_size ? kMax32 : static_cast<uint32_t>(size));
  Put32(header, zip64_size ? kMax32 : static_cast<uint32_t>(size));
  const uint64_t zip64_field = zip64_size ? 4 + 16 : 0;
  const uint64_t before_padding = offset_ + kLocalSize + name.size() + zip64_field + 4;
  const uint64_t padding = (kAlignment - before_padding % kAlignment) % kAlignment;
  Put16(header, static_cast<uint16_t>(name.size()));
  Put16(header, static_cast<uint16_t>(zip64_field + 4 + padding));
  header.append(name.data(), name.size());
  if (zip64_size) {
    Put16(header, kZip64ExtraField);
    Put16(header, 16);
    Put64(header, size);
    Put64(header, size);
  }
  header.append("FB");
  Put16(header, static_cast<uint16_t>(padding));
  header.append(padding, 'Z');
  pieces_.push_back(header);
  if (size > 0) pieces_.push_back(data);

  // Its central directory entry, with a zip64 field for what does not fit in 32 bits (in the order the format
  // gives: size, compressed size, local header offset).
  std::string zip64;
  if (zip64_size) {
    Put64(zip64, size);
    Put64(zip64, size);
  }
  if (zip64_offset) Put64(zip64, offset_);
  Put32(central_, kCentralHeader);
  Put16(central_, kVersionZip64);  // Made by.
  Put16(central_, zip64.empty() ? kVersion : kVersionZip64);
  Put16(central_, 0);
  Put16(central_, 0);
  Put32(central_, 0);
  Put32(central_, crc);
  Put32(central_, zip64_size ? kMax32 : static_cast<uint32_t>(size));
  Put32(central_, zip64_size ? kMax32 : static_cast<uint32_t>(size));
  Put16(central_, static_cast<uint16_t>(name.size()));
  Put16(central_, static_cast<uint16_t>(zip64.empty() ? 0 : 4 + zip64.size()));
  Put16(central_, 0);  // Comment.
  Put16(central_, 0);  // Disk.
  Put16(central_, 0);  // Internal attributes.
  Put32(central_, 0);  // External attributes.
  Put32(central_, zip64_offset ? kMax32 : static_cast<uint32_t>(offset_));
  central_.append(name.data(), name.size());
  if (!zip64.empty()) {
    Put16(central_, kZip64ExtraField);
    Put16(central_, static_cast<uint16_t>(zip64.size()));
    central_.append(zip64);
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
  Put32(end, kZip64EndOfCentralDirectory);
  Put64(end, 44);  // The size of the rest of this record.
  Put16(end, kVersionZip64);
  Put16(end, kVersionZip64);
  Put32(end, 0);
  Put32(end, 0);
  Put64(end, entries_);
  Put64(end, entries_);
  Put64(end, directory_size);
  Put64(end, directory_offset);
  Put32(end, kZip64Locator);
  Put32(end, 0);
  Put64(end, zip64_end_offset);
  Put32(end, 1);
  Put32(end, kEndOfCentralDirectory);
  Put16(end, 0);
  Put16(end, 0);
  Put16(end, static_cast<uint16_t>(std::min<uint64_t>(entries_, 0xFFFF)));
  Put16(end, static_cast<uint16_t>(std::min<uint64_t>(entries_, 0xFFFF)));
  Put32(end, Clamp32(directory_size));
  Put32(end, Clamp32(directory_offset));
  Put16(end, 0);  // Comment.
  pieces_.push_back(end);
  offset_ += end.size();
  return pieces_;
}

}  // namespace kiln
