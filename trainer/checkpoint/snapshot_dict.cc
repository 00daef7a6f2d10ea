#include "trainer/checkpoint/snapshot_dict.h"

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace kiln {

c10::IValue InternedKey(std::string_view key) {
  static absl::Mutex mutex;
  // Guarded by `mutex`; never destroyed, as keys may be used at exit.
  static auto* const keys = new absl::flat_hash_map<std::string, c10::IValue>();
  absl::MutexLock lock(&mutex);
  // Debian's Abseil has a string_view of its own, which its hash maps look up by.
  if (auto found = keys->find(absl::string_view(key.data(), key.size())); found != keys->end()) return found->second;
  c10::IValue made{std::string(key)};
  if (keys->size() < kMaxInternedKeys) keys->emplace(std::string(key), made);
  return made;
}

c10::impl::GenericDict NewDict(size_t capacity) {
  // AnyType is LibTorch's singleton; it is looked up once.
  static const c10::TypePtr any = c10::AnyType::get();
  c10::impl::GenericDict dict(any, any);
  if (capacity > 0) dict.reserve(capacity);
  return dict;
}

c10::impl::GenericList NewList(size_t capacity) {
  static const c10::TypePtr any = c10::AnyType::get();
  c10::impl::GenericList list(any);
  if (capacity > 0) list.reserve(capacity);
  return list;
}

}  // namespace kiln
