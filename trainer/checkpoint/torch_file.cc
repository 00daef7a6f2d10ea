#include "trainer/checkpoint/torch_file.h"

#include <exception>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "caffe2/serialize/inline_container.h"
#include "torch/csrc/jit/serialization/export.h"
#include "torch/csrc/jit/serialization/pickler.h"
#include "torch/csrc/jit/serialization/unpickler.h"
#include "trainer/checkpoint/python_pickle.h"

namespace kiln {
namespace {

// Containers deeper than this are taken for damage (a checkpoint nests a handful of levels).
constexpr int kMaxDepth = 64;

// What python_pickle.h left for this reader to finish: drops dictionaries' own attributes and unwraps parameters.
c10::IValue Finish(const c10::IValue& value, int depth) {
  TORCH_CHECK(depth < kMaxDepth, "the file nests containers more than ", kMaxDepth, " deep");
  if (value.isGenericDict()) {
    c10::impl::GenericDict dict = value.toGenericDict();
    const c10::IValue state_key{std::string(kDictStateKey)};
    if (dict.contains(state_key)) (void)dict.erase(state_key);
    const c10::IValue class_key{std::string(kPythonClassKey)};
    if (dict.contains(class_key)) {
      const c10::IValue& name = dict.at(class_key);
      const c10::IValue args_key{std::string(kPythonArgsKey)};
      // torch.nn.Parameter pickles as _rebuild_parameter(data, requires_grad, backward_hooks).
      if (name.isString() && name.toStringRef() == "torch._utils._rebuild_parameter" && dict.contains(args_key) &&
          dict.at(args_key).isTuple() && !dict.at(args_key).toTupleRef().elements().empty() &&
          dict.at(args_key).toTupleRef().elements()[0].isTensor()) {
        return dict.at(args_key).toTupleRef().elements()[0];
      }
    }
    for (const auto& entry : dict) {
      c10::IValue finished = Finish(entry.value(), depth + 1);
      if (!finished.isSameIdentity(entry.value())) dict.insert_or_assign(entry.key(), std::move(finished));
    }
    return dict;
  }
  if (value.isList()) {
    c10::List<c10::IValue> list = value.toList();
    for (size_t i = 0; i < list.size(); ++i) {
      c10::IValue item = list.get(i);
      c10::IValue finished = Finish(item, depth + 1);
      if (!finished.isSameIdentity(item)) list.set(i, std::move(finished));
    }
    return value;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> items;
    bool changed = false;
    for (const c10::IValue& item : value.toTupleRef().elements()) {
      items.push_back(Finish(item, depth + 1));
      changed = changed || !items.back().isSameIdentity(item);
    }
    return changed ? c10::IValue(c10::ivalue::Tuple::create(std::move(items))) : value;
  }
  return value;
}

// What the pickler writes without a type tag: `value` itself when it holds no typed list (a c10::List<int64_t>,
// say, which the pickler writes as a TorchScript-only build_intlist call), else a copy with those lists made plain,
// sharing every part that holds none. The pickler is made with tag_aggregates off, so dictionaries of any type and
// tuples are written as Python's, and a snapshot's ~20 dictionaries need not be copied again on the writer's thread.
c10::IValue Untyped(const c10::IValue& value) {
  if (value.isList()) {
    const c10::impl::GenericList list = value.toList();
    const bool plain = list.elementType()->kind() == c10::TypeKind::AnyType;
    std::vector<c10::IValue> items;
    bool changed = !plain;
    items.reserve(list.size());
    for (const c10::IValue& item : value.toListRef()) {
      items.push_back(Untyped(item));
      changed = changed || !items.back().isSameIdentity(item);
    }
    if (!changed) return value;
    c10::impl::GenericList rebuilt(c10::AnyType::get());
    rebuilt.reserve(items.size());
    for (c10::IValue& item : items) rebuilt.push_back(std::move(item));
    return rebuilt;
  }
  if (value.isGenericDict()) {
    const c10::impl::GenericDict dict = value.toGenericDict();
    std::vector<c10::IValue> values;
    bool changed = false;
    values.reserve(dict.size());
    for (const auto& entry : dict) {
      values.push_back(Untyped(entry.value()));
      changed = changed || !values.back().isSameIdentity(entry.value());
    }
    if (!changed) return value;
    c10::impl::GenericDict rebuilt(c10::AnyType::get(), c10::AnyType::get());
    rebuilt.reserve(dict.size());
    size_t i = 0;
    for (const auto& entry : dict) rebuilt.insert(entry.key(), std::move(values[i++]));
    return rebuilt;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> items;
    bool changed = false;
    for (const c10::IValue& item : value.toTupleRef().elements()) {
      items.push_back(Untyped(item));
      changed = changed || !items.back().isSameIdentity(item);
    }
    return changed ? c10::IValue(c10::ivalue::Tuple::create(std::move(items))) : value;
  }
  return value;
}

}  // namespace

c10::IValue PlainValue(const c10::IValue& value, const std::function<at::Tensor(const at::Tensor&)>& tensor_fn) {
  if (value.isTensor()) {
    return tensor_fn != nullptr && value.toTensor().defined() ? c10::IValue(tensor_fn(value.toTensor())) : value;
  }
  if (value.isList()) {
    c10::impl::GenericList list(c10::AnyType::get());
    for (const c10::IValue& item : value.toListRef()) list.push_back(PlainValue(item, tensor_fn));
    return list;
  }
  if (value.isGenericDict()) {
    c10::impl::GenericDict dict(c10::AnyType::get(), c10::AnyType::get());
    for (const auto& entry : value.toGenericDict()) dict.insert(entry.key(), PlainValue(entry.value(), tensor_fn));
    return dict;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> items;
    for (const c10::IValue& item : value.toTupleRef().elements()) items.push_back(PlainValue(item, tensor_fn));
    return c10::ivalue::Tuple::create(std::move(items));
  }
  return value;
}

absl::StatusOr<std::string> SerializeTorchFile(const c10::IValue& value) {
  std::string bytes;
  try {
    std::vector<char> pickle;
    torch::jit::Pickler pickler([&](const char* data, size_t size) { pickle.insert(pickle.end(), data, data + size); },
                                /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
                                /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
    pickler.protocol();
    pickler.pushIValue(Untyped(value));
    pickler.stop();
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) -> size_t {
      bytes.append(static_cast<const char*>(data), size);
      return size;
    });
    torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(), writer);
    writer.writeEndOfFile();
  } catch (const c10::Error& e) {
    return absl::InternalError(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return absl::InternalError(e.what());
  }
  return bytes;
}

absl::StatusOr<c10::IValue> ReadTorchFile(caffe2::serialize::PyTorchStreamReader& reader) {
  try {
    if (!reader.hasRecord("data.pkl")) {
      return absl::InvalidArgumentError("it has no data.pkl record, so torch.save did not write it");
    }
    at::DataPtr data;
    size_t size = 0;
    std::tie(data, size) = reader.getRecord("data.pkl");
    absl::StatusOr<std::string> pickle =
        RewritePythonPickle(absl::string_view(static_cast<const char*>(data.get()), size));
    if (!pickle.ok()) return absl::InvalidArgumentError(absl::StrCat("data.pkl: ", pickle.status().message()));
    size_t read = 0;
    torch::jit::Unpickler unpickler(
        [&](char* buffer, size_t wanted) -> size_t {
          const size_t n = std::min(wanted, pickle->size() - read);
          std::memcpy(buffer, pickle->data() + read, n);
          read += n;
          return n;
        },
        /*type_resolver=*/nullptr, /*obj_loader=*/nullptr,
        [&](const std::string& key) -> at::DataPtr {
          const std::string record = "data/" + key;
          TORCH_CHECK(reader.hasRecord(record), "a tensor's storage record ", record, " is missing");
          return std::get<0>(reader.getRecord(record));
        },
        at::Device(at::kCPU));
    return Finish(unpickler.parse_ivalue(), 0);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
}

}  // namespace kiln
