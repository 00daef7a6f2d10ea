#include "trainer/loggers/proto_wire.h"

#include <cstring>

namespace kiln {
namespace {

constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLengthDelimited = 2;
constexpr int kFixed32 = 5;

void AppendLittleEndian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

}  // namespace

void ProtoWriter::RawVarint(uint64_t value) {
  while (value >= 0x80) {
    bytes_.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  bytes_.push_back(static_cast<char>(value));
}

void ProtoWriter::Key(int field, int wire_type) {
  RawVarint((static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
}

void ProtoWriter::Varint(int field, uint64_t value) {
  Key(field, kVarint);
  RawVarint(value);
}

void ProtoWriter::Double(int field, double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  Key(field, kFixed64);
  AppendLittleEndian(bytes_, bits, 8);
}

void ProtoWriter::Float(int field, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  Key(field, kFixed32);
  AppendLittleEndian(bytes_, bits, 4);
}

void ProtoWriter::String(int field, absl::string_view value) {
  Key(field, kLengthDelimited);
  RawVarint(value.size());
  bytes_.append(value.data(), value.size());
}

}  // namespace kiln
