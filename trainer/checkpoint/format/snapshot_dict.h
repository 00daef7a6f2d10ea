// The containers a checkpoint snapshot is made of (Any -> Any dictionaries, Any lists, as torch.save writes a state
// dict), built for each save: a snapshot's ~80 keys and ~60 dictionaries are made at every checkpoint, so none of
// them may cost more than it must.
//
// Every container is Any-typed from the start, so that the writer pickles the snapshot as it is: torch_file.cc
// copies a container whose type is narrower (a c10::List<int64_t>, say) into an Any-typed one before pickling.
//
// Keys are interned: the first use of a key makes its string IValue, and every later dictionary shares it (strings
// are immutable, and LibTorch's pickler memoises strings by value, so sharing changes no byte of a file). The table
// keeps at most kMaxInternedKeys keys; past that, keys are made afresh. A fixed layout's keys (Lightning's loops,
// the checkpoint's top level) are looked up once, as DictKeys, rather than in the table on every save. Thread-safe.
#ifndef KILN_TRAINER_CHECKPOINT_FORMAT_SNAPSHOT_DICT_H_
#define KILN_TRAINER_CHECKPOINT_FORMAT_SNAPSHOT_DICT_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "ATen/core/Dict.h"
#include "ATen/core/List.h"
#include "ATen/core/ivalue.h"
#include "trainer/checkpoint/format/pickle_writer.h"

namespace kiln {

inline constexpr size_t kMaxInternedKeys = 4096;

// A string IValue holding `key`, shared with every other use of the same key.
c10::IValue InternedKey(std::string_view key);

// A key of a fixed layout, interned once when it is made; Put with it does no look-up. Make them once (in a table
// that is never destroyed, as the interned keys are not), not on every save.
class DictKey {
 public:
  explicit DictKey(std::string_view text) : value_(InternedKey(text)), text_(value_.toStringRef()) {}
  const c10::IValue& value() const { return value_; }
  // Its text, held by value() (no look-up through the IValue: a checkpoint's pickle writes some hundreds of keys).
  std::string_view text() const { return text_; }

 private:
  c10::IValue value_;
  std::string_view text_;
};

// An empty Any -> Any dictionary with room for `capacity` entries, so that filling it does not rehash.
c10::impl::GenericDict NewDict(size_t capacity = 0);

// An empty Any list with room for `capacity` items.
c10::impl::GenericList NewList(size_t capacity = 0);

// The other way to make a snapshot's value: piece by piece, with the calls of PickleWriter (pickle_writer.h), so that
// one function written against either (a template over its sink) both pickles a fixed layout straight from its
// fields, with no dictionary made, and makes the dictionary that layout pickles as (the same bytes: a test checks
// it). Containers are Any-typed, keys interned.
class ValueBuilder {
 public:
  void None() { Add(c10::IValue()); }
  void Bool(bool value) { Add(value); }
  void Int(int64_t value) { Add(value); }
  void Double(double value) { Add(value); }
  void String(std::string_view text) { Add(std::string(text)); }
  void Tensor(const at::Tensor& tensor) { Add(tensor); }
  void Value(c10::IValue value) { Add(std::move(value)); }
  void Key(std::string_view key) { Add(InternedKey(key)); }
  void Key(const DictKey& key) { Add(key.value()); }
  void BeginDict(size_t capacity = 0);
  void EndDict() { End(); }
  void BeginList(size_t capacity = 0);
  void EndList() { End(); }
  void BeginTuple();
  void EndTuple() { End(); }
  // The value made (throws c10::Error when a container is still open or nothing was made).
  c10::IValue Finish();

 private:
  struct Open {
    c10::IValue container;           // A dictionary or a list; None for a tuple, whose items gather in `items`.
    std::vector<c10::IValue> items;  // A tuple's items.
    c10::IValue key;                 // A dictionary's key waiting for its value.
    bool has_key = false;
  };
  void Add(c10::IValue value);
  void End();
  std::vector<Open> open_;
  c10::IValue made_;
  bool done_ = false;
};

// A fixed layout's key, written by either sink.
inline void WriteKey(PickleWriter& out, const DictKey& key) { out.Key(key.text()); }
inline void WriteKey(ValueBuilder& out, const DictKey& key) { out.Key(key); }

// A dictionary item of a fixed layout, key and value, written by either sink.
template <typename Sink>
void Item(Sink& out, const DictKey& key, double value) {
  WriteKey(out, key);
  out.Double(value);
}
template <typename Sink>
void Item(Sink& out, const DictKey& key, bool value) {
  WriteKey(out, key);
  out.Bool(value);
}
template <typename Sink>
void Item(Sink& out, const DictKey& key, const c10::IValue& value) {
  WriteKey(out, key);
  out.Value(value);
}

// dict[key] = value.
inline void Put(c10::impl::GenericDict& dict, std::string_view key, c10::IValue value) {
  dict.insert_or_assign(InternedKey(key), std::move(value));
}
inline void Put(c10::impl::GenericDict& dict, const DictKey& key, c10::IValue value) {
  dict.insert_or_assign(key.value(), std::move(value));
}

}  // namespace kiln

#endif  // KILN_TRAINER_CHECKPOINT_FORMAT_SNAPSHOT_DICT_H_
