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
#ifndef KILN_TRAINER_CHECKPOINT_SNAPSHOT_DICT_H_
#define KILN_TRAINER_CHECKPOINT_SNAPSHOT_DICT_H_

#include <cstddef>
#include <string_view>
#include <utility>

#include "ATen/core/Dict.h"
#include "ATen/core/List.h"
#include "ATen/core/ivalue.h"

namespace kiln {

inline constexpr size_t kMaxInternedKeys = 4096;

// A string IValue holding `key`, shared with every other use of the same key.
c10::IValue InternedKey(std::string_view key);

// A key of a fixed layout, interned once when it is made; Put with it does no look-up. Make them once (in a table
// that is never destroyed, as the interned keys are not), not on every save.
class DictKey {
 public:
  explicit DictKey(std::string_view text) : value_(InternedKey(text)) {}
  const c10::IValue& value() const { return value_; }

 private:
  c10::IValue value_;
};

// An empty Any -> Any dictionary with room for `capacity` entries, so that filling it does not rehash.
c10::impl::GenericDict NewDict(size_t capacity = 0);

// An empty Any list with room for `capacity` items.
c10::impl::GenericList NewList(size_t capacity = 0);

// dict[key] = value.
inline void Put(c10::impl::GenericDict& dict, std::string_view key, c10::IValue value) {
  dict.insert_or_assign(InternedKey(key), std::move(value));
}
inline void Put(c10::impl::GenericDict& dict, const DictKey& key, c10::IValue value) {
  dict.insert_or_assign(key.value(), std::move(value));
}

}  // namespace kiln

#endif  // KILN_TRAINER_CHECKPOINT_SNAPSHOT_DICT_H_
