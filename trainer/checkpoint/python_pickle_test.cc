// The pickle rewrite (python_pickle.h), through ReadTorchFile: each construct Python's pickler writes for a
// checkpoint, spelled out opcode by opcode as CPython 3.11's pickle module writes it with protocol 2 (checked with
// pickletools), then read by LibTorch's unpickler.
#include "trainer/checkpoint/python_pickle.h"

#include <sstream>
#include <string>

#include "ATen/ATen.h"
#include "caffe2/serialize/inline_container.h"
#include "caffe2/serialize/istream_adapter.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint/torch_file.h"

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
const std::string kProto = std::string("\x80\x02", 2);

// A torch.save file whose data.pkl is `pickle`, read back.
absl::StatusOr<c10::IValue> Read(const std::string& pickle) {
  std::string zip;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) -> size_t {
      zip.append(static_cast<const char*>(data), size);
      return size;
    });
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
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

}  // namespace
}  // namespace kiln
