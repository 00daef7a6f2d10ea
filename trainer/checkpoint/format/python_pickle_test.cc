// The pickle rewrite (python_pickle.h), through ReadTorchFile: each construct Python's pickler writes for a
// checkpoint, spelled out opcode by opcode as CPython 3.11's pickle module writes it with protocol 2 (checked with
// pickletools), then read by LibTorch's unpickler.
#include "trainer/checkpoint/format/python_pickle.h"

#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ATen/ATen.h"
#include "caffe2/serialize/inline_container.h"
#include "caffe2/serialize/istream_adapter.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint/format/torch_file.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

// Opcodes with their arguments.
std::string Unicode(const std::string& text) {
  std::string out = "X";
  const uint32_t size = static_cast<uint32_t>(text.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((size >> (8 * i)) & 0xff));
  return out + text;
}
std::string Global(const std::string& module, const std::string& name) { return "c" + module + "\n" + name + "\n"; }
std::string Put(int id) { return std::string("q") + static_cast<char>(id); }
std::string Get(int id) { return std::string("h") + static_cast<char>(id); }
std::string Int(int value) { return std::string("K") + static_cast<char>(value); }
// Any 64-bit integer (LONG1 with 8 bytes, as LibTorch reads it).
std::string Long(int64_t value) {
  std::string out("\x8a\x08", 2);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((static_cast<uint64_t>(value) >> (8 * i)) & 0xff));
  return out;
}

// A float tensor as torch.save pickles one: _rebuild_tensor_v2(storage data/<key> of `numel` floats, offset, sizes,
// strides, requires_grad=False, OrderedDict()).
std::string TensorPickle(const std::string& key, int64_t numel, int64_t offset, const std::vector<int64_t>& sizes,
                         const std::vector<int64_t>& strides) {
  std::string out = Global("torch._utils", "_rebuild_tensor_v2") + "((" + Unicode("storage") +
                    Global("torch", "FloatStorage") + Unicode(key) + Unicode("cpu") + Long(numel) + "tQ" +
                    Long(offset) + "(";
  for (int64_t size : sizes) out += Long(size);
  out += "t(";
  for (int64_t stride : strides) out += Long(stride);
  return out + "t\x89" + Global("collections", "OrderedDict") + ")RtR";
}

std::string Floats(int n) {
  std::string bytes;
  for (int i = 0; i < n; ++i) {
    const float value = static_cast<float>(i);
    bytes.append(reinterpret_cast<const char*>(&value), sizeof(value));
  }
  return bytes;
}
const std::string kProto = std::string("\x80\x02", 2);

// A torch.save file whose data.pkl is `pickle`, with more records (name, bytes), read back.
absl::StatusOr<c10::IValue> Read(const std::string& pickle,
                                 const std::vector<std::pair<std::string, std::string>>& records = {}) {
  std::string zip;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) -> size_t {
      zip.append(static_cast<const char*>(data), size);
      return size;
    });
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    for (const auto& [name, bytes] : records) writer.writeRecord(name, bytes.data(), bytes.size());
    writer.writeEndOfFile();
  }
  std::istringstream stream(zip);
  caffe2::serialize::PyTorchStreamReader reader(std::make_unique<caffe2::serialize::IStreamAdapter>(&stream));
  return ReadTorchFile(reader);
}

c10::impl::GenericDict Dict(const absl::StatusOr<c10::IValue>& value) {
  EXPECT_TRUE(value.ok()) << value.status();
  EXPECT_TRUE(value->isGenericDict()) << value->tagKind();
  return value->toGenericDict();
}

TEST(PythonPickleTest, OrderedDictsAreDictionariesOfTheirOwnEvenWhenTheClassIsMemoized) {
  // {"a": OrderedDict(x=1), "b": OrderedDict(y=2)}: the second call reuses the memoized class.
  const std::string pickle = kProto + "}" + Put(0) + "(" + Unicode("a") + Global("collections", "OrderedDict") +
                             Put(1) + ")R" + Put(2) + "(" + Unicode("x") + Int(1) + "u" + Unicode("b") + Get(1) + ")R" +
                             Put(3) + "(" + Unicode("y") + Int(2) + "uu.";
  const c10::impl::GenericDict dict = Dict(Read(pickle));
  const c10::impl::GenericDict a = dict.at(std::string("a")).toGenericDict();
  const c10::impl::GenericDict b = dict.at(std::string("b")).toGenericDict();
  EXPECT_EQ(a.size(), 1u);
  EXPECT_EQ(a.at(std::string("x")).toInt(), 1);
  EXPECT_EQ(b.size(), 1u);
  EXPECT_EQ(b.at(std::string("y")).toInt(), 2);
}

TEST(PythonPickleTest, AStateDictsMetadataIsDropped) {
  // OrderedDict(w=3) with the attribute _metadata = {"": {"version": 1}}, as a module's state_dict() pickles.
  const std::string pickle = kProto + Global("collections", "OrderedDict") + Put(0) + ")R" + Put(1) + "(" +
                             Unicode("w") + Int(3) + "u}" + Put(2) + Unicode("_metadata") + Put(3) + "}" + Put(4) +
                             Unicode("") + "}" + Unicode("version") + Int(1) + "sssb.";
  const c10::impl::GenericDict dict = Dict(Read(pickle));
  EXPECT_EQ(dict.size(), 1u) << c10::IValue(dict);
  EXPECT_EQ(dict.at(std::string("w")).toInt(), 3);
}

TEST(PythonPickleTest, OneElementListsAndShortLongsAreRead) {
  // {"one": [5], "big": 2**40, "negative": -2**33, "zero": LONG1 with no bytes}
  const std::string pickle = kProto + "}(" + Unicode("one") + "]" + Int(5) + "a" + Unicode("big") +
                             std::string("\x8a\x06\x00\x00\x00\x00\x00\x01", 8) + Unicode("negative") +
                             std::string("\x8a\x05\x00\x00\x00\x00\xfe", 7) + Unicode("zero") +
                             std::string("\x8a\x00", 2) + "u.";
  const c10::impl::GenericDict dict = Dict(Read(pickle));
  ASSERT_EQ(dict.at(std::string("one")).toListRef().size(), 1u);
  EXPECT_EQ(dict.at(std::string("one")).toListRef()[0].toInt(), 5);
  EXPECT_EQ(dict.at(std::string("big")).toInt(), int64_t{1} << 40);
  EXPECT_EQ(dict.at(std::string("negative")).toInt(), -(int64_t{1} << 33));
  EXPECT_EQ(dict.at(std::string("zero")).toInt(), 0);
}

TEST(PythonPickleTest, ObjectsOfOtherClassesBecomeDictionariesNamingTheirClass) {
  // argparse.Namespace(lr=0.5), pickled as Namespace() with BUILD {"lr": 0.5}, inside a dict.
  const std::string pickle = kProto + "}(" + Unicode("hparams") + Global("argparse", "Namespace") + Put(0) + ")R" +
                             Put(1) + "}" + Unicode("lr") + "G" + std::string("\x3f\xe0\x00\x00\x00\x00\x00\x00", 8) +
                             "sbu.";
  const c10::impl::GenericDict dict = Dict(Read(pickle));
  const c10::impl::GenericDict object = dict.at(std::string("hparams")).toGenericDict();
  EXPECT_EQ(object.at(std::string(kPythonClassKey)).toStringRef(), "argparse.Namespace");
  EXPECT_TRUE(object.at(std::string(kPythonArgsKey)).isTuple());
  EXPECT_EQ(object.at(std::string(kPythonStateKey)).toGenericDict().at(std::string("lr")).toDouble(), 0.5);
}

TEST(PythonPickleTest, LightningsAttributeDictIsADictionary) {
  // AttributeDict(hidden=8), a dict subclass: protocol 2 pickles it with NEWOBJ.
  const std::string pickle = kProto + Global("lightning_fabric.utilities.data", "AttributeDict") + Put(0) + ")" +
                             "\x81" + Put(1) + Unicode("hidden") + Int(8) + "s.";
  const c10::impl::GenericDict dict = Dict(Read(pickle));
  EXPECT_EQ(dict.size(), 1u);
  EXPECT_EQ(dict.at(std::string("hidden")).toInt(), 8);
}

TEST(PythonPickleTest, WhatLibTorchWritesReadsBackTheSame) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert(std::string("tensor"), at::arange(4, at::kFloat));
  dict.insert(std::string("list"), c10::impl::GenericList(c10::AnyType::get()));
  dict.insert(std::string("number"), 0.25);
  dict.insert(std::string("big"), int64_t{1} << 40);
  absl::StatusOr<std::string> file = SerializeTorchFile(dict);
  ASSERT_TRUE(file.ok()) << file.status();
  std::istringstream stream(*file);
  caffe2::serialize::PyTorchStreamReader reader(std::make_unique<caffe2::serialize::IStreamAdapter>(&stream));
  const c10::impl::GenericDict read = Dict(ReadTorchFile(reader));
  EXPECT_TRUE(read.at(std::string("tensor")).toTensor().equal(at::arange(4, at::kFloat)));
  EXPECT_EQ(read.at(std::string("big")).toInt(), int64_t{1} << 40);
}

TEST(PythonPickleTest, TensorsAreReadWithinTheirRecords) {
  const absl::StatusOr<c10::IValue> whole = Read(kProto + TensorPickle("0", 8, 2, {2, 3}, {3, 1}) + ".",
                                                 {{"data/0", Floats(8)}});
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(whole->toTensor().equal(at::arange(2, 8, at::kFloat).view({2, 3})));
  // An empty tensor may sit anywhere, as Python allows.
  EXPECT_TRUE(Read(kProto + TensorPickle("0", 0, 5, {0}, {1}) + ".", {{"data/0", ""}}).ok());
}

// The pickle states each storage's size and each tensor's offset, sizes and strides; none of it may reach past the
// bytes of the record (each of these read memory Kiln does not own, or crashed, before the check).
TEST(PythonPickleTest, TensorsThatReachPastTheirRecordAreRefused) {
  const std::vector<std::pair<std::string, std::string>> four_bytes = {{"data/0", Floats(1)}};
  EXPECT_THAT(Read(kProto + TensorPickle("0", 32, 0, {32}, {1}) + ".", four_bytes).status().message(),
              HasSubstr("gives record data/0 a storage of 128 bytes, but the record holds 4"));
  const std::vector<std::pair<std::string, std::string>> eight = {{"data/0", Floats(8)}};
  for (const auto& [offset, sizes, strides] :
       std::vector<std::tuple<int64_t, std::vector<int64_t>, std::vector<int64_t>>>{
           {1000, {1}, {1}},
           {int64_t{1} << 40, {1}, {1}},
           {0, {2, 2}, {int64_t{1} << 36, 1}},
           {0, {9}, {1}},
           {7, {2}, {1}},
           {0, {3, 3}, {int64_t{1} << 62, int64_t{1} << 62}},  // Overflows int64 on the way.
       }) {
    EXPECT_THAT(Read(kProto + TensorPickle("0", 8, offset, sizes, strides) + ".", eight).status().message(),
                HasSubstr("reaches past the 32 bytes of record data/0"))
        << "offset " << offset << ", sizes " << at::IntArrayRef(sizes) << ", strides " << at::IntArrayRef(strides);
  }
  EXPECT_THAT(Read(kProto + TensorPickle("0", 8, -(int64_t{1} << 40), {1}, {1}) + ".", eight).status().message(),
              HasSubstr("negative"));
  // LibTorch would replace a negative stride with the contiguous one (here (-3, 5) with (10, 5)); it is refused as
  // written (NegativeSizesAndStridesAreRefused).
  EXPECT_THAT(Read(kProto + TensorPickle("0", 8, 0, {2, 2}, {-3, 5}) + ".", eight).status().message(),
              HasSubstr("a tensor's stride 0 is -3"));
}

// LibTorch frees nested values recursively: a pickle nested 200,000 deep crashed Kiln when it was freed.
TEST(PythonPickleTest, DeepNestingIsRefusedBeforeLibTorchBuildsIt) {
  constexpr int kDeep = 200000;
  EXPECT_THAT(RewritePythonPickle(kProto + std::string(kDeep, ']') + std::string(kDeep - 1, 'a') + ".")
                  .status()
                  .message(),
              HasSubstr("containers nest more than 100 deep"));
  EXPECT_THAT(RewritePythonPickle(kProto + std::string(kDeep, '(') + std::string(kDeep, 'l') + ".").status().message(),
              HasSubstr("containers nest more than 100 deep"));
  EXPECT_THAT(Read(kProto + std::string(kDeep, '(') + std::string(kDeep, 'l') + ".").status().message(),
              HasSubstr("data.pkl: pickle byte"));
  // What a checkpoint nests reads.
  const absl::StatusOr<c10::IValue> nested = Read(kProto + std::string(20, ']') + std::string(19, 'a') + ".");
  ASSERT_TRUE(nested.ok()) << nested.status();
}

// Containers stored in the memo and linked through it afterwards hide their depth from the rewrite's count; the
// value LibTorch built is measured again, and freed without recursion when it is refused.
TEST(PythonPickleTest, NestingHiddenBehindTheMemoIsRefusedToo) {
  constexpr int kLists = 200;
  std::string pickle = kProto + "]";  // The outer list, which will hold every other one.
  for (int i = 0; i < kLists; ++i) pickle += "]r" + std::string(reinterpret_cast<const char*>(&i), 4) + "a";
  // Each list i holds list i + 1: get both, APPEND, and the (now longer) list i goes into the outer list.
  for (int i = 0; i + 1 < kLists; ++i) {
    const int next = i + 1;
    pickle += "j" + std::string(reinterpret_cast<const char*>(&i), 4) + "j" +
              std::string(reinterpret_cast<const char*>(&next), 4) + "aa";
  }
  ASSERT_TRUE(RewritePythonPickle(pickle + ".").ok()) << "the rewrite saw the depth: this test no longer hides it";
  EXPECT_THAT(Read(pickle + ".").status().message(), HasSubstr("nests containers more than 64 deep"));
  // A list that holds itself.
  EXPECT_THAT(Read(kProto + "]" + Put(0) + Get(0) + "a.").status().message(), HasSubstr("a container holds itself"));
}

TEST(PythonPickleTest, WhatCannotBeReadIsRefusedNamingTheByte) {
  EXPECT_THAT(RewritePythonPickle(std::string("\x80\x04", 2) + "N.").status().message(),
              HasSubstr("pickle byte 0: pickle protocol 4"));
  EXPECT_THAT(RewritePythonPickle(kProto + "N0N.").status().message(), HasSubstr("pickle byte 3: opcode 0x30"));
  EXPECT_THAT(RewritePythonPickle(kProto + "}").status().message(), HasSubstr("ends before its STOP"));
  EXPECT_THAT(RewritePythonPickle(kProto + std::string("\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01", 11) + ".")
                  .status()
                  .message(),
              HasSubstr("wider than 64 bits"));
  EXPECT_THAT(RewritePythonPickle(kProto + "u.").status().message(), HasSubstr("needs a MARK"));
  EXPECT_THAT(RewritePythonPickle(kProto + "NN.").status().message(), HasSubstr("leaves 2 values"));
  EXPECT_THAT(RewritePythonPickle(kProto + Unicode("abc").substr(0, 6)).status().message(), HasSubstr("truncated"));
  // A class used as a value, not called.
  EXPECT_THAT(RewritePythonPickle(kProto + "(" + Global("argparse", "Namespace") + "t.").status().message(),
              HasSubstr("the class argparse.Namespace is used as a value"));
  // Through ReadTorchFile, the error names data.pkl.
  EXPECT_THAT(Read(kProto + "N0N.").status().message(), HasSubstr("data.pkl: pickle byte 3"));
}

// LibTorch's unpickler appends each PUT to its memo whatever slot it names, and a GET indexes what was appended; the
// rewrite numbers the slots in order, so a value shared after a memoized class (which stays out of LibTorch's memo)
// is the right one, a slot never stored is an error, and a huge slot number allocates nothing.
TEST(PythonPickleTest, MemoSlotsAreTheOnesThePickleNames) {
  // {"c": OrderedDict(), "x": [7], "y": <x through the memo>}, the class in slot 1 and the list in slot 3.
  const std::string shared = kProto + "}" + Put(0) + "(" + Unicode("c") + Global("collections", "OrderedDict") +
                             Put(1) + ")R" + Put(2) + Unicode("x") + "]" + Put(3) + Int(7) + "a" + Unicode("y") +
                             Get(3) + "u.";
  const c10::impl::GenericDict dict = Dict(Read(shared));
  ASSERT_TRUE(dict.at(std::string("y")).isList()) << dict.at(std::string("y")).tagKind();
  EXPECT_EQ(dict.at(std::string("y")).toListRef().at(0).toInt(), 7);
  // A slot of 2^32 - 1 (LibTorch reserved room for twice that: 137 GB).
  const std::string huge =
      kProto + "]" + std::string("r\xff\xff\xff\xff", 5) + "j" + std::string("\xff\xff\xff\xff", 4) + "a.";
  EXPECT_THAT(Read(huge).status().message(), HasSubstr("a container holds itself"));
  const std::string far = kProto + "}" + std::string("r\xff\xff\xff\xff", 5) + Unicode("k") + Int(1) + "s.";
  EXPECT_EQ(Dict(Read(far)).size(), 1u);
  // Read before it is stored (LibTorch's own message was "vector::_M_range_check: __n (which is 200) >= this->size()").
  EXPECT_THAT(Read(kProto + "]" + Put(0) + std::string("h\xc8", 2) + "a.").status().message(),
              HasSubstr("memo slot 200 is read before anything is stored in it"));
}

// LibTorch builds a tensor whose declared stride is negative with a contiguous stride instead (a fuzzer found that
// this restored values from another layout than the file declares, silently): the rewrite refuses the declaration,
// through the memo too.
TEST(PythonPickleTest, NegativeSizesAndStridesAreRefused) {
  const std::vector<std::pair<std::string, std::string>> records = {{"data/0", Floats(8)}};
  EXPECT_THAT(Read(kProto + "}" + Unicode("w") + TensorPickle("0", 8, 0, {2, 4}, {4, -1}) + "s.", records)
                  .status()
                  .message(),
              HasSubstr("a tensor's stride 1 is -1"));
  EXPECT_THAT(Read(kProto + "}" + Unicode("w") + TensorPickle("0", 8, 0, {-2}, {1}) + "s.", records).status().message(),
              HasSubstr("a tensor's size 0 is -2"));
  // Sizes that are not a tuple of integers (here a string), or more than 64 of them, are not checked by LibTorch
  // either: refused too.
  std::string text_sizes = TensorPickle("0", 8, 0, {8}, {1});
  text_sizes.replace(text_sizes.find("(" + Long(8) + "t"), Long(8).size() + 2, "(" + Unicode("8") + "t");
  EXPECT_THAT(Read(kProto + "}" + Unicode("w") + text_sizes + "s.", records).status().message(),
              HasSubstr("a tensor's sizes are not a tuple of at most 64 integers"));
  EXPECT_THAT(Read(kProto + "}" + Unicode("w") +
                       TensorPickle("0", 8, 0, std::vector<int64_t>(65, 1), std::vector<int64_t>(65, 1)) + "s.",
                   records)
                  .status()
                  .message(),
              HasSubstr("a tensor's sizes are not a tuple of at most 64 integers"));
  // A storage of a negative element count (LibTorch said "Expected !size_bytes_is_heap_allocated_ to be true").
  EXPECT_THAT(Read(kProto + "}" + Unicode("w") + TensorPickle("0", -8, 0, {8}, {1}) + "s.", records).status().message(),
              HasSubstr("a storage's element count is -8"));
  // The same tensor declared right reads.
  const absl::StatusOr<c10::IValue> right =
      Read(kProto + "}" + Unicode("w") + TensorPickle("0", 8, 0, {2, 4}, {4, 1}) + "s.", records);
  ASSERT_TRUE(right.ok()) << right.status();
  // The strides as a memoized tuple fetched by a GET, as a pickler that shares equal tuples would write them.
  std::string shared = TensorPickle("0", 8, 0, {2, 4}, {4, -1});
  const std::string strides = "(" + Long(4) + Long(-1) + "t";
  const size_t at = shared.find(strides);
  ASSERT_NE(at, std::string::npos);
  shared.replace(at, strides.size(), Get(0));
  EXPECT_THAT(Read(kProto + "}" + Unicode("s") + "(" + Long(4) + Long(-1) + "t" + Put(0) + "s" + Unicode("w") + shared +
                       "s.",
                   records)
                  .status()
                  .message(),
              HasSubstr("a tensor's stride 1 is -1"));
}

}  // namespace
}  // namespace kiln
