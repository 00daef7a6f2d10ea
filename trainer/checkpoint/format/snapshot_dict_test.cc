#include "trainer/checkpoint/format/snapshot_dict.h"

#include <memory>
#include <string>

#include "ATen/ATen.h"
#include "caffe2/serialize/in_memory_adapter.h"
#include "caffe2/serialize/inline_container.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint/format/torch_file.h"
#include "trainer/checkpoint/format/value_testing.h"

namespace kiln {
namespace {

// Whether `a` and `b` are one string object (IValue::isSameIdentity compares strings by their text).
bool SameObject(const c10::IValue& a, const c10::IValue& b) { return a.internalToPointer() == b.internalToPointer(); }

TEST(SnapshotDictTest, KeysAreSharedAndReadBackByValue) {
  const std::string name = "snapshot_dict_test.key";
  const c10::IValue first = InternedKey(name);
  const c10::IValue again = InternedKey(std::string("snapshot_dict_test.") + "key");  // Another buffer, same text.
  EXPECT_TRUE(SameObject(first, again)) << "the second use of a key made a new string";
  EXPECT_EQ(first.toStringRef(), name);
  EXPECT_FALSE(SameObject(first, InternedKey("snapshot_dict_test.other")));

  c10::impl::GenericDict dict = NewDict(/*capacity=*/2);
  Put(dict, name, int64_t{1});
  Put(dict, "b", 2.5);
  Put(dict, name, int64_t{3});  // Assigns: one entry per key.
  ASSERT_EQ(dict.size(), 2u);
  EXPECT_EQ(dict.at(c10::IValue(name)).toInt(), 3);  // Found by a key made elsewhere, as a reader makes them.
  EXPECT_EQ(dict.at(c10::IValue(std::string("b"))).toDouble(), 2.5);
}

TEST(SnapshotDictTest, DictKeysAreTheInternedKeysAndContainersAreAnyTyped) {
  const DictKey key("snapshot_dict_test.fixed");
  EXPECT_TRUE(SameObject(key.value(), InternedKey("snapshot_dict_test.fixed")));
  c10::impl::GenericDict dict = NewDict(/*capacity=*/1);
  Put(dict, key, int64_t{1});
  Put(dict, key, int64_t{2});
  ASSERT_EQ(dict.size(), 1u);
  EXPECT_EQ(dict.at(c10::IValue(std::string("snapshot_dict_test.fixed"))).toInt(), 2);
  // Any-typed, so that the writer pickles them as they are (torch_file.cc copies narrower containers first).
  EXPECT_EQ(dict.keyType()->kind(), c10::TypeKind::AnyType);
  EXPECT_EQ(dict.valueType()->kind(), c10::TypeKind::AnyType);
  EXPECT_EQ(NewList(/*capacity=*/3).elementType()->kind(), c10::TypeKind::AnyType);
}

TEST(SnapshotDictTest, KeysPastTheTableLimitAreStillRight) {
  // Fill the table past its limit: later keys are made afresh, and still hold their text.
  for (size_t i = 0; i <= kMaxInternedKeys; ++i) InternedKey("snapshot_dict_test.fill" + std::to_string(i));
  const std::string late = "snapshot_dict_test.late";
  const c10::IValue made = InternedKey(late);
  EXPECT_EQ(made.toStringRef(), late);
  EXPECT_FALSE(SameObject(made, InternedKey(late))) << "a key past the limit was kept";
}

// A snapshot's shape: nested dictionaries of both key types, a typed list and dictionary, a tuple, tensors, numbers.
// `interned` builds it with Put's shared keys, else with a fresh string for every key.
c10::impl::GenericDict Snapshot(bool interned) {
  const auto put = [&](c10::impl::GenericDict& dict, const std::string& key, c10::IValue value) {
    if (interned) {
      Put(dict, key, std::move(value));
    } else {
      dict.insert_or_assign(c10::IValue(std::string(key)), std::move(value));
    }
  };
  c10::impl::GenericDict model = NewDict();
  put(model, "net.0.weight", at::arange(6, at::kFloat).reshape({2, 3}));
  put(model, "net.0.bias", at::zeros({2}, at::kDouble));
  c10::impl::GenericDict state(c10::IntType::get(), c10::AnyType::get());
  c10::impl::GenericDict param = NewDict();
  put(param, "step", at::scalar_tensor(3.0, at::kDouble));
  put(param, "exp_avg", at::ones({2, 3}));
  state.insert(int64_t{0}, param);
  c10::impl::GenericDict optimizer = NewDict();
  put(optimizer, "state", state);
  put(optimizer, "betas", c10::ivalue::Tuple::create(0.9, 0.999));
  put(optimizer, "params", c10::List<int64_t>({0, 1}));  // Typed: written as a plain list.
  c10::Dict<std::string, std::string> callback;
  callback.insert("best_model_path", "/tmp/a.ckpt");
  c10::impl::GenericDict contents = NewDict();
  put(contents, "epoch", int64_t{2});
  put(contents, "state_dict", model);
  c10::impl::GenericList optimizers(c10::AnyType::get());
  optimizers.push_back(optimizer);
  put(contents, "optimizer_states", optimizers);
  put(contents, "callbacks", c10::impl::toGenericDict(callback));
  put(contents, "hparams_name", std::string("kwargs"));
  put(contents, "fused", c10::IValue());
  return contents;
}

TEST(SnapshotDictTest, SharedKeysAndContainersWriteWhatPlainCopiesWrite) {
  // The writer pickles a snapshot as it is, sharing its containers and keys; what reads back must be what a plain
  // copy with a string of its own for every key gives.
  const absl::StatusOr<std::string> fresh = SerializeTorchFile(PlainValue(Snapshot(/*interned=*/false), nullptr));
  const absl::StatusOr<std::string> shared = SerializeTorchFile(Snapshot(/*interned=*/true));
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ASSERT_TRUE(shared.ok()) << shared.status();
  const c10::IValue expected = ReadBack(*fresh);
  const c10::IValue read = ReadBack(*shared);
  ASSERT_TRUE(expected.isGenericDict());
  EXPECT_EQ(expected.toGenericDict().size(), 6u);
  ExpectSame(read, expected, "checkpoint");
  // The typed list is written as a plain list of its numbers.
  const c10::IValue params = read.toGenericDict()
                                 .at(c10::IValue(std::string("optimizer_states")))
                                 .toListRef()[0]
                                 .toGenericDict()
                                 .at(c10::IValue(std::string("params")));
  ASSERT_TRUE(params.isList());
  EXPECT_EQ(params.toListRef().size(), 2u);
  // ... with no TorchScript call in the pickle (torch.jit._pickle.build_intlist), which plain Python reads only
  // through TorchScript's helpers.
  caffe2::serialize::PyTorchStreamReader reader(
      std::make_unique<caffe2::serialize::MemoryReadAdapter>(shared->data(), shared->size()));
  const auto [data, size] = reader.getRecord("data.pkl");
  const std::string pickle(static_cast<const char*>(data.get()), size);
  EXPECT_EQ(pickle.find("torch.jit"), std::string::npos) << "a typed list was written with TorchScript's tag";
}

}  // namespace
}  // namespace kiln
