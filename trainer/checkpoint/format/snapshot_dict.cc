#include "trainer/checkpoint/format/snapshot_dict.h"

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

void ValueBuilder::BeginDict(size_t capacity) { open_.push_back(Open{NewDict(capacity)}); }

void ValueBuilder::BeginList(size_t capacity) { open_.push_back(Open{NewList(capacity)}); }

void ValueBuilder::BeginTuple() { open_.push_back(Open{}); }

void ValueBuilder::Add(c10::IValue value) {
  if (open_.empty()) {
    TORCH_CHECK(!done_, "ValueBuilder: a second value after the first was made");
    made_ = std::move(value);
    done_ = true;
    return;
  }
  Open& top = open_.back();
  if (top.container.isGenericDict()) {
    if (!top.has_key) {
      top.key = std::move(value);
      top.has_key = true;
    } else {
      top.container.toGenericDict().insert_or_assign(std::move(top.key), std::move(value));
      top.key = c10::IValue();
      top.has_key = false;
    }
  } else if (top.container.isList()) {
    top.container.toList().push_back(std::move(value));
  } else {
    top.items.push_back(std::move(value));
  }
}

void ValueBuilder::End() {
  TORCH_CHECK(!open_.empty(), "ValueBuilder: an End without its Begin");
  TORCH_CHECK(!open_.back().has_key, "ValueBuilder: a dictionary ended with a key and no value");
  Open top = std::move(open_.back());
  open_.pop_back();
  Add(top.container.isNone() ? c10::IValue(c10::ivalue::Tuple::create(std::move(top.items)))
                             : std::move(top.container));
}

c10::IValue ValueBuilder::Finish() {
  TORCH_CHECK(open_.empty() && done_, "ValueBuilder: finished with ", open_.size(), " container(s) open");
  return std::move(made_);
}

}  // namespace kiln
