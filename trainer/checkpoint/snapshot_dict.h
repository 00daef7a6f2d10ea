// The dictionaries a checkpoint snapshot is made of (str -> Any, as torch.save writes a state dict), built for the
// training step: a snapshot is taken on the step at every save, so its ~80 keys must not cost an allocation each.
//
// Keys are interned: the first use of a key makes its string IValue, and every later dictionary shares it (strings
// are immutable, and LibTorch's pickler memoises strings by value, so sharing changes no byte of a file). The table
// keeps at most kMaxInternedKeys keys; past that, keys are made afresh. Thread-safe.
#ifndef KILN_TRAINER_CHECKPOINT_SNAPSHOT_DICT_H_
#define KILN_TRAINER_CHECKPOINT_SNAPSHOT_DICT_H_

#include <cstddef>
#include <string_view>

#include "ATen/core/Dict.h"
#include "ATen/core/ivalue.h"

namespace kiln {

inline constexpr size_t kMaxInternedKeys = 4096;

// A string IValue holding `key`, shared with every other use of the same key.
c10::IValue InternedKey(std::string_view key);

// An empty str -> Any dictionary with room for `capacity` entries, so that filling it does not rehash.
c10::impl::GenericDict NewDict(size_t capacity = 0);

// dict[key] = value.
inline void Put(c10::impl::GenericDict& dict, std::string_view key, c10::IValue value) {
  dict.insert_or_assign(InternedKey(key), std::move(value));
}

}  // namespace kiln

#endif  // KILN_TRAINER_CHECKPOINT_SNAPSHOT_DICT_H_
