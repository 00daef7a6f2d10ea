// Files in the format torch.save writes, read and written with LibTorch's own pickler and zip container: a zip
// archive holding `<name>/data.pkl` (a protocol-2 pickle of one value) and one record per tensor storage under
// `<name>/data/`. Python's torch.load reads what SerializeTorchFile writes, with the default weights_only=True of
// PyTorch 2.6 and later too: the pickle names only the globals that setting allows (tensor rebuilding, storage
// types, OrderedDict). ReadTorchFile reads what Python's torch.save wrote (python_pickle.h says how).
//
// Thread-safety: pure functions of their arguments and the file.
#ifndef KILN_TRAINER_CHECKPOINT_FORMAT_TORCH_FILE_H_
#define KILN_TRAINER_CHECKPOINT_FORMAT_TORCH_FILE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ATen/core/ivalue.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/checkpoint/format/pickle_writer.h"
#include "trainer/checkpoint/format/zip_checksums.h"
#include "trainer/checkpoint/format/zip_writer.h"

namespace caffe2::serialize {
class PyTorchStreamReader;
class ReadAdapterInterface;
}  // namespace caffe2::serialize

namespace kiln {

// The bytes of a torch.save file holding `value`: dictionaries, lists, tuples, None, booleans, integers, floats,
// strings and tensors (on any device; their data is copied to the CPU). Typed LibTorch containers (c10::List<int64_t>,
// c10::Dict<std::string, double>, ...) are written as plain Python lists and dicts, so that no TorchScript type tag
// reaches the file. The pickle is Kiln's (pickle_writer.h). InternalError, naming it, for a value a checkpoint cannot
// hold (an object of a TorchScript class, a sparse tensor).
absl::StatusOr<std::string> SerializeTorchFile(const c10::IValue& value);

// The same file as pieces to write in order (WriteFileDurably's pieces form), without a copy of any tensor's bytes:
// the pieces point into the tensors' storages (copies of their own for tensors not on the CPU) and into the headers
// this holds, which must outlive the write. The same bytes as SerializeTorchFile's.
class TorchFilePieces {
 public:
  const std::vector<absl::string_view>& pieces() const { return *pieces_; }
  uint64_t size() const { return zip_->size(); }

 private:
  friend absl::StatusOr<TorchFilePieces> SerializeTorchFilePieces(PickleWriter pickle);
  std::unique_ptr<const std::string> pickle_;  // Not the string itself: a short one moves with this object.
  std::vector<at::Tensor> tensors_;  // What the pieces of tensor data point into.
  std::vector<std::string> small_;   // The small records' bytes.
  std::unique_ptr<ZipWriter> zip_;
  const std::vector<absl::string_view>* pieces_ = nullptr;
};
absl::StatusOr<TorchFilePieces> SerializeTorchFilePieces(const c10::IValue& value);
// The file of what `pickle` holds (finished here): a value written piece by piece (pickle_writer.h).
absl::StatusOr<TorchFilePieces> SerializeTorchFilePieces(PickleWriter pickle);

// `value` with every list, dictionary and tuple rebuilt as a plain (Any-typed) one, as SerializeTorchFile writes them,
// and every defined tensor replaced by `tensor_fn` of it (nullptr: kept). A checkpoint snapshot passes a copy, so that
// nothing it holds is a tensor the training loop goes on updating (checkpoint_connector.h).
c10::IValue PlainValue(const c10::IValue& value, const std::function<at::Tensor(const at::Tensor&)>& tensor_fn);

// A torch.save file read whole into memory and checked (zip_checksums.h's ReadVerifiedZip).
using TorchFileBytes = ArchiveBytes;

// The value of the torch.save file `reader` has open, with every tensor on the CPU. What Python wrote is read as
// python_pickle.h describes; a dictionary's own attributes (kDictStateKey) are dropped, and a pickled
// torch.nn.Parameter becomes its tensor. InvalidArgument, naming what is wrong, for a file that does not hold a
// readable pickle, whose containers nest more than 64 deep (or hold themselves), or any of whose tensors is not
// dense or does not lie inside its storage, or whose storage does not lie inside its record: nothing is read from a
// tensor before these checks. The zip's CRCs are the caller's to check (zip_checksums.h).
//
// With `in_memory` (the bytes `reader` reads, whose CRCs were checked), a tensor whose record is stored at a 64-byte
// boundary (every one torch.save writes) takes its storage in place, sharing `in_memory`'s bytes, instead of a copy
// of the record: a checkpoint is then read from the disk once and copied nowhere.
absl::StatusOr<c10::IValue> ReadTorchFile(caffe2::serialize::PyTorchStreamReader& reader,
                                          const TorchFileBytes* in_memory = nullptr);

// What PyTorchStreamReader reads `bytes` through, without copying them.
std::shared_ptr<caffe2::serialize::ReadAdapterInterface> MemoryReadAdapter(const TorchFileBytes& bytes);

}  // namespace kiln

#endif  // KILN_TRAINER_CHECKPOINT_FORMAT_TORCH_FILE_H_
