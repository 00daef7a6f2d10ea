#include "trainer/core/batch.h"

#include <string>
#include <vector>

#include "ATen/core/Dict.h"
#include "ATen/core/List.h"
#include "c10/util/Exception.h"

namespace kiln {
namespace {

// Calls fn on every defined tensor of `value`, depth first; stops when fn returns true.
bool VisitTensors(const c10::IValue& value, const std::function<bool(const at::Tensor&)>& fn) {
  if (value.isTensor()) return value.toTensor().defined() && fn(value.toTensor());
  if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) {
      if (VisitTensors(entry.value(), fn)) return true;
    }
  } else if (value.isList()) {
    for (const c10::IValue& item : value.toListRef()) {
      if (VisitTensors(item, fn)) return true;
    }
  } else if (value.isTuple()) {
    for (const c10::IValue& item : value.toTupleRef().elements()) {
      if (VisitTensors(item, fn)) return true;
    }
  }
  return false;
}

}  // namespace

int64_t Batch::size() const {
  if (input.defined()) return input.dim() > 0 ? input.size(0) : 0;
  int64_t size = 0;
  VisitTensors(data, [&](const at::Tensor& tensor) {
    size = tensor.dim() > 0 ? tensor.size(0) : 0;
    return true;
  });
  return size;
}

at::Tensor Batch::operator[](std::string_view key) const {
  TORCH_CHECK(data.isGenericDict(), "batch[\"", key, "\"]: the batch is not a dictionary (",
              structured() ? data.tagKind() : "an input and a target", ")");
  const c10::impl::GenericDict dict = data.toGenericDict();
  auto found = dict.find(c10::IValue(std::string(key)));
  if (found == dict.end() || !found->value().isTensor()) {
    std::string keys;
    for (const auto& entry : dict) {
      if (!keys.empty()) keys += ", ";
      keys += entry.key().isString() ? entry.key().toStringRef() : entry.key().tagKind();
    }
    TORCH_CHECK(false, "batch[\"", key, "\"]: the batch has ", found == dict.end() ? "no such key" : "no tensor there",
                "; its keys are: ", keys);
  }
  return found->value().toTensor();
}

c10::IValue MapTensors(const c10::IValue& value, const std::function<at::Tensor(const at::Tensor&)>& fn) {
  if (value.isTensor()) return fn(value.toTensor());
  if (value.isGenericDict()) {
    const c10::impl::GenericDict dict = value.toGenericDict();
    c10::impl::GenericDict mapped(dict.keyType(), dict.valueType());
    mapped.reserve(dict.size());
    for (const auto& entry : dict) mapped.insert(entry.key(), MapTensors(entry.value(), fn));
    return mapped;
  }
  if (value.isTensorList()) {
    c10::List<at::Tensor> mapped;
    for (const at::Tensor& tensor : value.toTensorList()) mapped.push_back(fn(tensor));
    return mapped;
  }
  if (value.isList()) {
    const c10::List<c10::IValue> list = value.toList();
    c10::impl::GenericList mapped(list.elementType());
    mapped.reserve(list.size());
    for (const c10::IValue& item : list) mapped.push_back(MapTensors(item, fn));
    return mapped;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> items;
    for (const c10::IValue& item : value.toTupleRef().elements()) items.push_back(MapTensors(item, fn));
    return c10::ivalue::Tuple::create(std::move(items));
  }
  return value;
}

Batch MapTensors(const Batch& batch, const std::function<at::Tensor(const at::Tensor&)>& fn) {
  Batch mapped;
  mapped.input = batch.input.defined() ? fn(batch.input) : batch.input;
  mapped.target = batch.target.defined() ? fn(batch.target) : batch.target;
  mapped.data = batch.structured() ? MapTensors(batch.data, fn) : batch.data;
  return mapped;
}

Batch MoveBatch(const Batch& batch, const c10::Device& device) {
  if (!batch.structured() && (!batch.input.defined() || batch.input.device() == device) &&
      (!batch.target.defined() || batch.target.device() == device)) {
    return batch;
  }
  return MapTensors(batch, [&](const at::Tensor& tensor) {
    if (!tensor.defined() || tensor.device() == device) return tensor;
    return tensor.to(tensor.options().device(device), /*non_blocking=*/true);
  });
}

std::vector<at::Tensor> BatchTensors(const Batch& batch) {
  std::vector<at::Tensor> tensors;
  for (const at::Tensor* tensor : {&batch.input, &batch.target}) {
    if (tensor->defined()) tensors.push_back(*tensor);
  }
  VisitTensors(batch.data, [&](const at::Tensor& tensor) {
    tensors.push_back(tensor);
    return false;
  });
  return tensors;
}

}  // namespace kiln
