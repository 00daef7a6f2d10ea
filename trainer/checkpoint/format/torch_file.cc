#include "trainer/checkpoint/format/torch_file.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "caffe2/serialize/inline_container.h"
#include "caffe2/serialize/read_adapter_interface.h"
#include "hal/compat/error_message.h"
#include "torch/csrc/jit/serialization/storage_context.h"
#include "torch/csrc/jit/serialization/unpickler.h"
#include "trainer/checkpoint/format/python_pickle.h"

namespace kiln {
namespace {

// Containers deeper than this are taken for damage (a checkpoint nests a handful of levels).
constexpr int kMaxDepth = 64;

bool IsContainer(const c10::IValue& value) { return value.isList() || value.isGenericDict() || value.isTuple(); }

// The values `value` holds directly (a dictionary's values; its keys are strings or numbers).
std::vector<c10::IValue> Children(const c10::IValue& value) {
  std::vector<c10::IValue> children;
  if (value.isList()) {
    for (const c10::IValue& item : value.toListRef()) children.push_back(item);
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) children.push_back(entry.value());
  } else if (value.isTuple()) {
    for (const c10::IValue& item : value.toTupleRef().elements()) children.push_back(item);
  }
  return children;
}

// How many containers deep `root` nests (0 for a scalar or a tensor), measured without recursion; nullopt when it
// nests deeper than `limit` or a container holds itself. Shared parts are measured once.
std::optional<int> NestingDepth(const c10::IValue& root, int limit) {
  if (!IsContainer(root)) return 0;
  struct Frame {
    c10::IValue value;
    std::vector<c10::IValue> children;
    size_t next = 0;
    int deepest_child = 0;
  };
  std::unordered_map<const void*, int> measured;
  std::unordered_set<const void*> open;
  std::vector<Frame> path;
  path.push_back(Frame{root, Children(root)});
  open.insert(root.internalToPointer());
  while (true) {
    Frame& frame = path.back();
    if (frame.next < frame.children.size()) {
      const c10::IValue& child = frame.children[frame.next++];
      if (!IsContainer(child)) continue;
      const void* key = child.internalToPointer();
      if (open.count(key) != 0) return std::nullopt;  // A container that holds itself.
      if (auto found = measured.find(key); found != measured.end()) {
        frame.deepest_child = std::max(frame.deepest_child, found->second);
        continue;
      }
      if (static_cast<int>(path.size()) >= limit) return std::nullopt;
      open.insert(key);
      path.push_back(Frame{child, Children(child)});
      continue;
    }
    const int depth = frame.deepest_child + 1;
    const void* key = frame.value.internalToPointer();
    measured[key] = depth;
    open.erase(key);
    path.pop_back();
    if (path.empty()) return depth;
    path.back().deepest_child = std::max(path.back().deepest_child, depth);
  }
}

// Frees `root` without recursion: LibTorch frees nested values recursively, which a deep enough value (or one that
// holds itself, which would never be freed) turns into a stack overflow. Every container is emptied before it goes.
void FreeIteratively(c10::IValue root) {
  std::vector<c10::IValue> pending;
  pending.push_back(std::move(root));
  while (!pending.empty()) {
    c10::IValue value = std::move(pending.back());
    pending.pop_back();
    for (c10::IValue& child : Children(value)) pending.push_back(std::move(child));
    if (value.isList()) {
      value.toList().clear();
    } else if (value.isGenericDict()) {
      value.toGenericDict().clear();
    } else if (value.isTuple()) {
      c10::intrusive_ptr<c10::ivalue::Tuple> tuple = value.toTuple();
      for (size_t i = 0; i < tuple->size(); ++i) tuple->unsafeSetElement(i, c10::IValue());
    }
  }
}

// Where each tensor storage the unpickler was given came from: its record and the bytes the record holds.
using StorageRecords = std::unordered_map<const void*, std::pair<std::string, size_t>>;

// Checks, before anything reads it, that `tensor` lies inside its storage and its storage inside its record: the
// pickle states the storage's size, and each tensor's offset, sizes and strides, and LibTorch's unpickler believes
// them (a 4-byte record read as 32 floats, or an offset of 2^40, read memory Kiln does not own). c10::Error if not.
void CheckTensorBounds(const at::Tensor& tensor, const StorageRecords& records) {
  if (!tensor.defined()) return;
  TORCH_CHECK(tensor.layout() == at::kStrided, "a tensor has layout ", tensor.layout(),
              "; checkpoints hold dense tensors only");
  const c10::Storage& storage = tensor.storage();
  const size_t storage_bytes = storage.nbytes();
  std::string record = "its storage";
  if (auto found = records.find(storage.data()); found != records.end()) {
    record = absl::StrCat("record ", found->second.first);
    TORCH_CHECK(storage_bytes <= found->second.second, "the pickle gives ", record, " a storage of ", storage_bytes,
                " bytes, but the record holds ", found->second.second);
  }
  const int64_t offset = tensor.storage_offset();
  TORCH_CHECK(offset >= 0, "a tensor in ", record, " has the negative storage offset ", offset);
  bool empty = false;
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    // (The rewrite refuses a negative size or stride as the pickle spells it, python_pickle.cc, since LibTorch would
    // build a negative stride as the contiguous one; this check holds for whatever LibTorch built.)
    TORCH_CHECK(tensor.size(d) >= 0 && tensor.stride(d) >= 0, "a tensor in ", record, " has sizes ", tensor.sizes(),
                " and strides ", tensor.strides(), "; negative ones are not a tensor's");
    empty = empty || tensor.size(d) == 0;
  }
  if (empty) return;
  // The last element's index, offset + sum((size - 1) * stride), and the bytes up to its end, without overflow.
  int64_t last = offset;
  bool overflow = false;
  for (int64_t d = 0; d < tensor.dim() && !overflow; ++d) {
    int64_t step = 0;
    overflow = __builtin_mul_overflow(tensor.size(d) - 1, tensor.stride(d), &step) ||
               __builtin_add_overflow(last, step, &last);
  }
  int64_t end_bytes = 0;
  overflow = overflow || __builtin_add_overflow(last, int64_t{1}, &last) ||
             __builtin_mul_overflow(last, static_cast<int64_t>(tensor.element_size()), &end_bytes);
  TORCH_CHECK(!overflow && static_cast<uint64_t>(end_bytes) <= storage_bytes, "a tensor of sizes ", tensor.sizes(),
              ", strides ", tensor.strides(), " and storage offset ", offset, " reaches past the ", storage_bytes,
              " bytes of ", record);
}

// What python_pickle.h left for this reader to finish: drops dictionaries' own attributes and unwraps parameters,
// and checks every tensor's bounds (CheckTensorBounds). A container the pickle shares (memo references: a list of
// 1000 references to a list of 1000 references ...) is finished once, and its result shared: walked as a tree, a
// pickle of a few hundred bytes is 2^64 containers. `finished` holds each container's result, by identity.
class Finisher {
 public:
  explicit Finisher(const StorageRecords& records) : records_(records) {}

  c10::IValue Finish(const c10::IValue& value, int depth) {
    TORCH_CHECK(depth < kMaxDepth, "the file nests containers more than ", kMaxDepth, " deep");
    if (value.isTensor()) {
      CheckTensorBounds(value.toTensor(), records_);
      return value;
    }
    if (!IsContainer(value)) return value;
    const void* key = value.internalToPointer();
    if (auto found = finished_.find(key); found != finished_.end()) return found->second;
    c10::IValue result = FinishContainer(value, depth);
    finished_.emplace(key, result);
    return result;
  }

 private:
  c10::IValue FinishContainer(const c10::IValue& value, int depth) {
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
          return Finish(dict.at(args_key).toTupleRef().elements()[0], depth + 1);
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
    std::vector<c10::IValue> items;
    bool changed = false;
    for (const c10::IValue& item : value.toTupleRef().elements()) {
      items.push_back(Finish(item, depth + 1));
      changed = changed || !items.back().isSameIdentity(item);
    }
    return changed ? c10::IValue(c10::ivalue::Tuple::create(std::move(items))) : value;
  }

  const StorageRecords& records_;
  std::unordered_map<const void*, c10::IValue> finished_;
};

// `record`'s bytes in place in `in_memory` (sharing it), when it is stored there at a 64-byte boundary; else a null
// DataPtr, and the record is copied as LibTorch reads it.
at::DataPtr InPlace(caffe2::serialize::PyTorchStreamReader& reader, const std::string& record,
                    const TorchFileBytes* in_memory) {
  if (in_memory == nullptr) return at::DataPtr();
  const size_t offset = reader.getRecordOffset(record);
  const auto stored = in_memory->stored.find(offset);
  if (stored == in_memory->stored.end() || stored->second != reader.getRecordSize(record) || offset % 64 != 0 ||
      offset > in_memory->size || stored->second > in_memory->size - offset) {
    return at::DataPtr();
  }
  auto* owner = new std::shared_ptr<uint8_t>(in_memory->data);
  return at::DataPtr(in_memory->data.get() + offset, owner,
                     [](void* context) { delete static_cast<std::shared_ptr<uint8_t>*>(context); },
                     at::Device(at::kCPU));
}

// Reads what PyTorchStreamReader asks of a TorchFileBytes.
class MemoryAdapter final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit MemoryAdapter(TorchFileBytes bytes) : bytes_(std::move(bytes)) {}
  size_t size() const override { return bytes_.size; }
  size_t read(uint64_t pos, void* buf, size_t n, const char* what) const override {
    if (pos >= bytes_.size) return 0;
    n = std::min<size_t>(n, bytes_.size - pos);
    std::memcpy(buf, bytes_.data.get() + pos, n);
    return n;
  }

 private:
  TorchFileBytes bytes_;  // Shares the bytes; the stored ranges are not needed here (a copy of an empty map).
};

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

absl::StatusOr<TorchFilePieces> SerializeTorchFilePieces(PickleWriter pickle) {
  TorchFilePieces file;
  try {
    file.pickle_ = std::make_unique<const std::string>(pickle.Finish());
    // The records and their order as LibTorch's writeArchiveAndTensors and PyTorchStreamWriter write them: each
    // storage as data/<index>, the pickle, then the format version, the byte order and a serialization id.
    file.zip_ = std::make_unique<ZipWriter>();
    file.tensors_.reserve(pickle.tensors().size());
    for (const at::Tensor& tensor : pickle.tensors()) {
      file.tensors_.push_back(tensor.device().is_cpu() ? tensor : tensor.cpu());
      const at::Tensor& data = file.tensors_.back();
      file.zip_->Add(absl::StrCat("archive/data/", file.tensors_.size() - 1),
                     absl::string_view(static_cast<const char*>(data.storage().data()), data.storage().nbytes()));
    }
    file.zip_->Add("archive/data.pkl", *file.pickle_);
    // The id is derived from the content, so that the same value writes the same bytes.
    file.small_ = {"3\n", "little", absl::StrFormat("%020u%020u", file.zip_->fingerprint(), file.zip_->size())};
    file.zip_->Add("archive/version", file.small_[0]);
    file.zip_->Add("archive/byteorder", file.small_[1]);
    file.zip_->Add("archive/.data/serialization_id", file.small_[2]);
    file.pieces_ = &file.zip_->Finish();
  } catch (const c10::Error& e) {
    return absl::InternalError(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return absl::InternalError(e.what());
  }
  return file;
}

absl::StatusOr<TorchFilePieces> SerializeTorchFilePieces(const c10::IValue& value) {
  PickleWriter pickle;
  try {
    pickle.Value(value);
  } catch (const c10::Error& e) {
    return absl::InternalError(e.what_without_backtrace());
  }
  return SerializeTorchFilePieces(std::move(pickle));
}

absl::StatusOr<std::string> SerializeTorchFile(const c10::IValue& value) {
  absl::StatusOr<TorchFilePieces> file = SerializeTorchFilePieces(value);
  if (!file.ok()) return file.status();
  std::string bytes;
  bytes.reserve(file->size());
  for (absl::string_view piece : file->pieces()) bytes.append(piece.data(), piece.size());
  return bytes;
}

absl::StatusOr<c10::IValue> ReadTorchFile(caffe2::serialize::PyTorchStreamReader& reader,
                                          const TorchFileBytes* in_memory) {
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
    StorageRecords records;
    // Each storage is read once, whatever number of tensors the pickle builds on it (views, tied weights: torch.save
    // writes one storage key per storage, and names it again for every tensor on it), and those tensors share it, as
    // torch.load's loaded_storages does. Without the context LibTorch's unpickler reads the record again for each
    // tensor, each into a storage of its own: a deflated 1 GiB record named by 3 tensors took 3 GiB.
    auto storages = std::make_shared<torch::jit::DeserializationStorageContext>();
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
          if (at::DataPtr in_place = InPlace(reader, record, in_memory)) {
            records[in_place.get()] = {record, reader.getRecordSize(record)};
            return in_place;
          }
          auto [bytes, size] = reader.getRecord(record);
          records[bytes.get()] = {record, size};
          return std::move(bytes);
        },
        at::Device(at::kCPU), /*use_storage_device=*/false, torch::jit::Unpickler::defaultTypeParser, storages);
    c10::IValue value;
    try {
      value = unpickler.parse_ivalue();
    } catch (const c10::Error& e) {
      // What LibTorch's unpickler refused: a tensor whose sizes, strides or storage overflow when LibTorch builds
      // it, a missing record, a wrong type. Its text says what; the prefix says where, and the plea for a better
      // message that LibTorch appends to some checks is dropped.
      std::string what = e.what_without_backtrace();
      if (const size_t plea = what.find("  (Could this error message be improved?"); plea != std::string::npos) {
        what.resize(plea);
      }
      return absl::InvalidArgumentError(absl::StrCat("data.pkl describes what LibTorch cannot build: ", what));
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("data.pkl describes what LibTorch cannot build: ", compat::ExceptionMessage(e)));
    }
    // RewritePythonPickle bounds the nesting it can see; memo references can build deeper values that it cannot.
    if (!NestingDepth(value, kMaxDepth).has_value()) {
      FreeIteratively(std::move(value));
      return absl::InvalidArgumentError(
          absl::StrCat("the file nests containers more than ", kMaxDepth, " deep, or a container holds itself"));
    }
    return Finisher(records).Finish(value, 0);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
}

std::shared_ptr<caffe2::serialize::ReadAdapterInterface> MemoryReadAdapter(const TorchFileBytes& bytes) {
  return std::make_shared<MemoryAdapter>(TorchFileBytes{bytes.data, bytes.size, {}});
}

}  // namespace kiln
