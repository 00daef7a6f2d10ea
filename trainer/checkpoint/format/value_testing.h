// Test support for checkpoint values: comparing two values read back, and reading a torch.save file's bytes.
#ifndef KILN_TRAINER_CHECKPOINT_FORMAT_VALUE_TESTING_H_
#define KILN_TRAINER_CHECKPOINT_FORMAT_VALUE_TESTING_H_

#include <memory>
#include <string>

#include "ATen/ATen.h"
#include "caffe2/serialize/in_memory_adapter.h"
#include "caffe2/serialize/inline_container.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint/format/torch_file.h"

namespace kiln {

// Whether `a` and `b` hold the same values, a list of any element type matching a plain one.
inline void ExpectSame(const c10::IValue& a, const c10::IValue& b, const std::string& where) {
  ASSERT_EQ(a.tagKind(), b.tagKind()) << where;
  if (a.isGenericDict()) {
    const c10::impl::GenericDict x = a.toGenericDict();
    const c10::impl::GenericDict y = b.toGenericDict();
    ASSERT_EQ(x.size(), y.size()) << where;
    for (const auto& entry : x) {
      ASSERT_TRUE(y.contains(entry.key())) << where << " lacks " << entry.key();
      ExpectSame(entry.value(), y.at(entry.key()), where + "." + c10::str(entry.key()));
    }
  } else if (a.isList()) {
    ASSERT_EQ(a.toListRef().size(), b.toListRef().size()) << where;
    for (size_t i = 0; i < a.toListRef().size(); ++i) {
      ExpectSame(a.toListRef()[i], b.toListRef()[i], where + "[" + std::to_string(i) + "]");
    }
  } else if (a.isTuple()) {
    ASSERT_EQ(a.toTupleRef().elements().size(), b.toTupleRef().elements().size()) << where;
    for (size_t i = 0; i < a.toTupleRef().elements().size(); ++i) {
      ExpectSame(a.toTupleRef().elements()[i], b.toTupleRef().elements()[i], where + "(" + std::to_string(i) + ")");
    }
  } else if (a.isTensor()) {
    EXPECT_EQ(a.toTensor().dtype(), b.toTensor().dtype()) << where;
    EXPECT_TRUE(a.toTensor().equal(b.toTensor())) << where;
  } else {
    EXPECT_TRUE(a == b) << where << ": " << a << " and " << b;
  }
}

inline c10::IValue ReadBack(const std::string& bytes) {
  caffe2::serialize::PyTorchStreamReader reader(
      std::make_unique<caffe2::serialize::MemoryReadAdapter>(bytes.data(), bytes.size()));
  absl::StatusOr<c10::IValue> value = ReadTorchFile(reader);
  EXPECT_TRUE(value.ok()) << value.status();
  return value.ok() ? *value : c10::IValue();
}

}  // namespace kiln

#endif  // KILN_TRAINER_CHECKPOINT_FORMAT_VALUE_TESTING_H_
