// Kiln's pickler (pickle_writer.h): every kind of value a checkpoint holds reads back as it was through Kiln's reader
// (Python's forms, LibTorch's unpickler), at every boundary between the integer forms; tensors of one storage stay one
// record; a value written piece by piece is the same bytes as the value written whole; and what a checkpoint cannot
// hold is refused, named. (Python's torch.load, weights_only too, reads Kiln's checkpoints in
// //tests/cli:python_checkpoint_test.)
#include "trainer/checkpoint/format/pickle_writer.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "ATen/core/ivalue_inl.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint/format/snapshot_dict.h"
#include "trainer/checkpoint/format/torch_file.h"
#include "trainer/checkpoint/format/value_testing.h"

namespace kiln {
namespace {

std::string Serialized(const c10::IValue& value) {
  absl::StatusOr<std::string> bytes = SerializeTorchFile(value);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::string();
}

std::string PickleOf(PickleWriter& writer) { return writer.Finish(); }

TEST(PickleWriterTest, EveryKindOfValueReadsBackAsItWas) {
  c10::impl::GenericDict value = NewDict();
  // Integers on both sides of every boundary between BININT1, BININT2, BININT and LONG1.
  const std::vector<int64_t> integers = {0,
                                         1,
                                         255,
                                         256,
                                         65535,
                                         65536,
                                         -1,
                                         -256,
                                         std::numeric_limits<int32_t>::max(),
                                         int64_t{std::numeric_limits<int32_t>::max()} + 1,
                                         std::numeric_limits<int32_t>::min(),
                                         int64_t{std::numeric_limits<int32_t>::min()} - 1,
                                         std::numeric_limits<int64_t>::max(),
                                         std::numeric_limits<int64_t>::min()};
  c10::impl::GenericList ints = NewList();
  for (int64_t n : integers) ints.push_back(n);
  Put(value, "ints", ints);
  c10::impl::GenericList doubles = NewList();
  for (double x : {0.0, 1.5, -1e300, 5e-324, std::numeric_limits<double>::infinity(),
                   -std::numeric_limits<double>::infinity()}) {
    doubles.push_back(x);
  }
  Put(value, "doubles", doubles);
  Put(value, "negative zero", -0.0);
  Put(value, "nan", std::nan(""));
  Put(value, "texts", c10::ivalue::Tuple::create(std::string(), std::string("\xc3\xa4\xe6\xbc\xa2"),
                                                 std::string(300, 'x')));
  Put(value, "flags", c10::ivalue::Tuple::create(true, false));
  Put(value, "none", c10::IValue());
  Put(value, "empty tuple", c10::ivalue::Tuple::create(std::vector<c10::IValue>{}));
  Put(value, "empty list", NewList());
  Put(value, "empty dict", NewDict());
  Put(value, "typed list", c10::List<int64_t>({1, 2, 3}));
  c10::Dict<int64_t, std::string> by_number;
  by_number.insert(7, "seven");
  by_number.insert(-3, "minus three");
  Put(value, "int keys", c10::impl::toGenericDict(by_number));
  Put(value, "complex", c10::complex<double>(1.5, -2.0));
  Put(value, "device", c10::Device(at::kCPU));
  const at::Tensor base = at::arange(12, at::kFloat).reshape({3, 4});
  Put(value, "float", base);
  Put(value, "bfloat16", base.to(at::kBFloat16));
  Put(value, "int64", at::arange(5, at::kLong));
  Put(value, "bool", at::arange(3, at::kLong).remainder(2).to(at::kBool));
  Put(value, "uint8", at::arange(4, at::kByte));
  Put(value, "scalar", at::scalar_tensor(3.25, at::kDouble));
  Put(value, "requires grad", at::ones({2}).requires_grad_());
  c10::impl::GenericDict nested = NewDict();
  Put(nested, "deeper", c10::ivalue::Tuple::create(NewList(), int64_t{4}));
  Put(value, "nested", nested);

  const c10::IValue read = ReadBack(Serialized(value));
  ASSERT_TRUE(read.isGenericDict());
  c10::impl::GenericDict expected = value.copy();
  const c10::IValue nan_key(std::string("nan"));
  ASSERT_TRUE(read.toGenericDict().at(nan_key).isDouble());
  EXPECT_TRUE(std::isnan(read.toGenericDict().at(nan_key).toDouble()));
  read.toGenericDict().erase(nan_key);
  expected.erase(nan_key);
  // The typed list reads back as a plain list of the same numbers; the dictionary of numbers as a dictionary.
  c10::impl::GenericList plain = NewList();
  for (int64_t n : {1, 2, 3}) plain.push_back(n);
  Put(expected, "typed list", plain);
  ExpectSame(read, expected, "value");
  const double zero = read.toGenericDict().at(std::string("negative zero")).toDouble();
  EXPECT_TRUE(zero == 0.0 && std::signbit(zero)) << "-0.0 read back as " << zero;
  EXPECT_TRUE(read.toGenericDict().at(std::string("requires grad")).toTensor().requires_grad());
  EXPECT_FALSE(read.toGenericDict().at(std::string("float")).toTensor().requires_grad());
}

TEST(PickleWriterTest, ViewsKeepTheirStorageAndOffsetAndShareOneRecord) {
  const at::Tensor base = at::arange(24, at::kFloat).reshape({4, 6});
  const at::Tensor transposed = base.t();
  const at::Tensor slice = base.narrow(0, 1, 2).narrow(1, 2, 3);  // Offset 8, strides (6, 1).
  PickleWriter writer;
  writer.BeginList();
  writer.Tensor(base);
  writer.Tensor(transposed);
  writer.Tensor(slice);
  writer.Tensor(at::ones({2}));
  writer.EndList();
  EXPECT_EQ(writer.tensors().size(), 2u) << "three views of one storage and one tensor of its own";

  c10::impl::GenericList list = NewList();
  for (const at::Tensor& t : {base, transposed, slice}) list.push_back(t);
  const c10::IValue read = ReadBack(Serialized(list));
  const auto items = read.toListRef();
  ASSERT_EQ(items.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const at::Tensor tensor = items[i].toTensor();
    EXPECT_EQ(tensor.strides(), list.get(i).toTensor().strides()) << i;
    EXPECT_EQ(tensor.storage_offset(), list.get(i).toTensor().storage_offset()) << i;
    EXPECT_TRUE(tensor.equal(list.get(i).toTensor())) << i;
    EXPECT_EQ(tensor.storage().data(), items[0].toTensor().storage().data()) << i << " has a storage of its own";
  }
}

// The calls of a layout written piece by piece, into either sink.
template <typename Sink>
void Layout(Sink& out) {
  out.BeginDict(3);
  out.Key("empty dict");
  out.BeginDict();
  out.EndDict();
  out.Key("empty list");
  out.BeginList();
  out.EndList();
  out.Key("empty tuple");
  out.BeginTuple();
  out.EndTuple();
  out.Key("items");
  out.BeginList(2);
  out.Int(70000);
  out.BeginTuple();
  out.String("a");
  out.Double(0.5);
  out.None();
  out.Bool(true);
  out.EndTuple();
  out.Tensor(at::ones({2, 2}));
  out.Value(c10::List<double>({1.0, 2.0}));
  out.EndList();
  out.EndDict();
}

TEST(PickleWriterTest, PieceByPieceIsTheBytesOfTheValueItBuilds) {
  PickleWriter streamed;
  Layout(streamed);
  ValueBuilder builder;
  Layout(builder);
  PickleWriter whole;
  whole.Value(builder.Finish());
  const std::string a = PickleOf(streamed);
  const std::string b = PickleOf(whole);
  EXPECT_EQ(a.size(), b.size());
  EXPECT_TRUE(a == b) << "written piece by piece and written whole differ";
}

TEST(PickleWriterTest, RefusesWhatACheckpointCannotHoldAndNamesIt) {
  const at::Tensor sparse = at::eye(3).to_sparse();
  absl::StatusOr<std::string> bytes = SerializeTorchFile(c10::impl::GenericList(c10::TensorType::get()));
  ASSERT_TRUE(bytes.ok()) << "an empty typed list is a value";
  c10::impl::GenericList with_sparse = NewList();
  with_sparse.push_back(sparse);
  bytes = SerializeTorchFile(with_sparse);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(bytes.status().message().find("Sparse"), absl::string_view::npos) << bytes.status();
  EXPECT_NE(bytes.status().message().find("dense tensors only"), absl::string_view::npos) << bytes.status();

  const c10::IValue future(c10::make_intrusive<c10::ivalue::Future>(c10::IntType::get()));
  bytes = SerializeTorchFile(future);
  ASSERT_FALSE(bytes.ok());
  EXPECT_NE(bytes.status().message().find("Future"), absl::string_view::npos) << bytes.status();

  c10::IValue deep = NewList();
  for (int i = 0; i < PickleWriter::kMaxDepth + 1; ++i) {
    c10::impl::GenericList outer = NewList();
    outer.push_back(deep);
    deep = outer;
  }
  bytes = SerializeTorchFile(deep);
  ASSERT_FALSE(bytes.ok());
  EXPECT_NE(bytes.status().message().find("nests containers more than 64 deep"), absl::string_view::npos)
      << bytes.status();
}

TEST(PickleWriterTest, NamesOnlyTheGlobalsTorchLoadAllowsWithWeightsOnly) {
  c10::impl::GenericDict value = NewDict();
  Put(value, "t", at::ones({2}, at::kHalf));
  Put(value, "typed", c10::List<int64_t>({1}));
  PickleWriter writer;
  writer.Value(value);
  const std::string pickle = PickleOf(writer);
  EXPECT_NE(pickle.find("ctorch._utils\n_rebuild_tensor_v2\n"), std::string::npos);
  EXPECT_NE(pickle.find("ctorch\nHalfStorage\n"), std::string::npos);
  EXPECT_NE(pickle.find("ccollections\nOrderedDict\n"), std::string::npos);
  EXPECT_EQ(pickle.find("torch.jit"), std::string::npos) << "a typed list was written with TorchScript's tag";
  EXPECT_EQ(pickle.substr(0, 2), std::string("\x80\x02", 2)) << "protocol 2";
  EXPECT_EQ(pickle.back(), '.') << "STOP";
}

}  // namespace
}  // namespace kiln
