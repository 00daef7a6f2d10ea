// Protocol-buffer wire encoding, written by hand for the few messages Kiln writes (TensorBoard's Event and
// Summary), so that no protobuf library or generated code is needed.
//
//   ProtoWriter value;
//   value.String(1, "train_loss");  // tag
//   value.Float(2, 0.25f);          // simple_value
//   ProtoWriter summary;
//   summary.Message(1, value);
//
// Fields are written in the order of the calls; readers accept any order. Proto3 defaults (0, "") are written
// when asked for; callers leave out what should be absent.
#ifndef KILN_TRAINER_LOGGERS_PROTO_WIRE_H_
#define KILN_TRAINER_LOGGERS_PROTO_WIRE_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace kiln {

class ProtoWriter {
 public:
  // int32, int64, uint64, bool and enum fields (varint). Negative values take ten bytes, as in protobuf.
  void Varint(int field, uint64_t value);
  void Int64(int field, int64_t value) { Varint(field, static_cast<uint64_t>(value)); }
  void Double(int field, double value);  // fixed64
  void Float(int field, float value);    // fixed32
  // string, bytes and embedded messages (length-delimited).
  void String(int field, absl::string_view value);
  void Message(int field, const ProtoWriter& message) { String(field, message.bytes_); }

  const std::string& bytes() const { return bytes_; }

 private:
  void Key(int field, int wire_type);
  void RawVarint(uint64_t value);
  std::string bytes_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_LOGGERS_PROTO_WIRE_H_
