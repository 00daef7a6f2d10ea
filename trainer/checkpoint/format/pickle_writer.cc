#include "trainer/checkpoint/format/pickle_writer.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "c10/core/ScalarType.h"
#include "c10/util/Exception.h"

namespace kiln {
PickleWriter::PickleWriter() {
  Grow(4096);
  Op(kProto);
  Op(2);
}

void PickleWriter::Grow(size_t more) {
  const size_t capacity = std::max(capacity_ * 2, size_ + more);
  std::unique_ptr<char[]> grown(new char[capacity]);
  if (size_ > 0) std::memcpy(grown.get(), buffer_.get(), size_);
  buffer_ = std::move(grown);
  capacity_ = capacity;
}

void PickleWriter::Begin() { open_.push_back(size_); }

bool PickleWriter::EndEmpty() {
  TORCH_CHECK(!open_.empty(), "PickleWriter: an End without its Begin");
  const size_t start = open_.back();
  open_.pop_back();
  if (size_ != start) return false;
  --size_;  // The mark.
  return true;
}

// The smallest of Python's forms that holds `value`; LONG1 always with 8 bytes, the only width LibTorch's unpickler
// reads (Python reads any).
void PickleWriter::Int(int64_t value) {
  if (value >= 0 && value <= 0xff) {
    Op(kBinInt1);
    Op(static_cast<uint8_t>(value));
  } else if (value >= 0 && value <= 0xffff) {
    const uint16_t n = static_cast<uint16_t>(value);
    Op(kBinInt2);
    Bytes(&n, sizeof(n));  // Little-endian, as the machines Kiln builds for (LibTorch's pickler assumes it too).
  } else if (value >= std::numeric_limits<int32_t>::min() && value <= std::numeric_limits<int32_t>::max()) {
    const int32_t n = static_cast<int32_t>(value);
    Op(kBinInt);
    Bytes(&n, sizeof(n));
  } else {
    Op(kLong1);
    Op(8);
    Bytes(&value, sizeof(value));
  }
}

void PickleWriter::Double(double value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  bits = __builtin_bswap64(bits);  // BINFLOAT is big-endian.
  Op(kBinFloat);
  Bytes(&bits, sizeof(bits));
}

void PickleWriter::TooLong(size_t size) {
  TORCH_CHECK(false, "a string of ", size, " bytes is longer than a pickle's 4 GiB");
  __builtin_unreachable();
}

void PickleWriter::Get(uint32_t memo) {
  if (memo <= 0xff) {
    Op(kBinGet);
    Op(static_cast<uint8_t>(memo));
  } else {
    Op(kLongBinGet);
    Bytes(&memo, sizeof(memo));
  }
}

uint32_t PickleWriter::Put() {
  const uint32_t memo = memo_++;
  if (memo <= 0xff) {
    Op(kBinPut);
    Op(static_cast<uint8_t>(memo));
  } else {
    Op(kLongBinPut);
    Bytes(&memo, sizeof(memo));
  }
  return memo;
}

void PickleWriter::Global(std::string_view module_and_name, uint32_t& memo) {
  if (memo != 0) return Get(memo - 1);
  Op(kGlobal);
  Bytes(module_and_name.data(), module_and_name.size());
  memo = Put() + 1;
}

// torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, OrderedDict()), the storage
// being the persistent id ('storage', torch.<Type>Storage, '<record>', '<device>', <elements>), memoised.
void PickleWriter::Tensor(const at::Tensor& tensor) {
  TORCH_CHECK(tensor.defined(), "an undefined tensor cannot be saved");
  TORCH_CHECK(tensor.layout() == at::kStrided && !tensor.is_quantized() && !tensor.is_nested() &&
                  tensor.has_storage(),
              "a ", tensor.layout(), " tensor of type ", tensor.toString(),
              " cannot be saved in a checkpoint; checkpoints hold dense tensors only");
  Global("torch._utils\n_rebuild_tensor_v2\n", rebuild_tensor_);
  Op(kMark);
  const c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  if (const auto found = storages_.find(storage); found != storages_.end()) {
    Get(found->second);
  } else {
    Op(kMark);
    String("storage");
    const size_t type = static_cast<size_t>(tensor.scalar_type());
    if (type >= storage_types_.size()) storage_types_.resize(type + 1, 0);
    if (uint32_t& memo = storage_types_[type]; memo != 0) {
      Get(memo - 1);
    } else {
      Global(absl::StrCat("torch\n", c10::toString(tensor.scalar_type()), "Storage\n"), memo);
    }
    const absl::AlphaNum record(tensors_.size());  // Its digits, without an allocation.
    String(std::string_view(record.data(), record.size()));
    if (tensor.device().is_cpu()) {
      String("cpu");
    } else {
      String(tensor.device().str());
    }
    Int(static_cast<int64_t>(tensor.storage().nbytes() / tensor.element_size()));
    Op(kTuple);
    Op(kBinPersId);
    storages_.emplace(storage, Put());
    tensors_.push_back(tensor);
  }
  Int(tensor.storage_offset());
  BeginTuple();
  for (const int64_t size : tensor.sizes()) Int(size);
  EndTuple();
  BeginTuple();
  for (const int64_t stride : tensor.strides()) Int(stride);
  EndTuple();
  Bool(tensor.requires_grad());
  Global("collections\nOrderedDict\n", ordered_dict_);
  Op(kEmptyTuple);
  Op(kReduce);
  Op(kTuple);
  Op(kReduce);
}

void PickleWriter::BeginDict(size_t /*size_hint*/) {
  Op(kEmptyDict);
  Op(kMark);
  Begin();
}
void PickleWriter::EndDict() {
  if (!EndEmpty()) Op(kSetItems);
}
void PickleWriter::BeginList(size_t /*size_hint*/) {
  Op(kEmptyList);
  Op(kMark);
  Begin();
}
void PickleWriter::EndList() {
  if (!EndEmpty()) Op(kAppends);
}
void PickleWriter::BeginTuple() {
  Op(kMark);
  Begin();
}
void PickleWriter::EndTuple() { Op(EndEmpty() ? kEmptyTuple : kTuple); }

void PickleWriter::Value(const c10::IValue& value) { ValueAt(value, 0); }

void PickleWriter::ValueAt(const c10::IValue& value, int depth) {
  // The common kinds first, each one test of the tag.
  if (value.isTensor()) return Tensor(value.toTensor());
  if (value.isString()) return String(value.toStringRef());
  if (value.isInt()) return Int(value.toInt());
  if (value.isDouble()) return Double(value.toDouble());
  if (value.isBool()) return Bool(value.toBool());
  if (value.isNone()) return None();
  if (value.isComplexDouble()) {
    const c10::complex<double> z = value.toComplexDouble();
    Global("builtins\ncomplex\n", complex_);
    Double(z.real());
    Double(z.imag());
    Op(kTuple2);
    Op(kReduce);
    return;
  }
  if (value.isDevice()) {
    Global("torch\ndevice\n", device_);
    String(value.toDevice().str());
    Op(kTuple1);
    Op(kReduce);
    return;
  }
  TORCH_CHECK(depth < kMaxDepth, "a checkpoint's value nests containers more than ", kMaxDepth,
              " deep (or holds itself)");
  if (value.isGenericDict()) {
    const c10::impl::GenericDict dict = value.toGenericDict();
    BeginDict();
    for (const auto& entry : dict) {
      ValueAt(entry.key(), depth + 1);
      ValueAt(entry.value(), depth + 1);
    }
    return EndDict();
  }
  if (value.isList()) {
    const c10::ArrayRef<c10::IValue> items = value.toListRef();
    BeginList();
    for (const c10::IValue& item : items) ValueAt(item, depth + 1);
    return EndList();
  }
  if (value.isTuple()) {
    const auto& items = value.toTupleRef().elements();
    BeginTuple();
    for (const c10::IValue& item : items) ValueAt(item, depth + 1);
    return EndTuple();
  }
  TORCH_CHECK(false, "a value of type ", value.tagKind(),
              " cannot be saved in a checkpoint; checkpoints hold tensors, numbers, text, None and lists, "
              "dictionaries and tuples of them");
}

std::string PickleWriter::Finish() {
  TORCH_CHECK(open_.empty(), "PickleWriter: ", open_.size(), " container(s) begun and not ended");
  Op(kStop);
  return std::string(buffer_.get(), size_);
}

}  // namespace kiln
