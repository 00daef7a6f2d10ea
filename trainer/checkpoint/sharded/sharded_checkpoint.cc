#include "trainer/checkpoint/sharded/sharded_checkpoint.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ATen/core/Tensor.h"
#include "ATen/ops/empty.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "caffe2/serialize/inline_container.h"
#include "hal/compat/error_message.h"
#include "trainer/checkpoint/format/checkpoint_file.h"
#include "trainer/checkpoint/format/snapshot_dict.h"
#include "trainer/checkpoint/format/torch_file.h"
#include "trainer/checkpoint/format/zip_checksums.h"
#include "trainer/io/durable_file.h"
#include "trainer/io/memory_budget.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using c10::IValue;
using c10::impl::GenericDict;
using c10::impl::GenericList;

// One key of the flattened checkpoint: a tensor or another value, and where it sits in the nested dictionary (DCP's
// planner_data: strings and group indices).
struct FlatItem {
  std::string key;
  std::vector<IValue> path;
  IValue value;
  std::string parameter;  // The parameter whose tensor (or whose optimizer state) this is; empty: none.
  std::vector<int64_t> whole_sizes;  // A tensor's whole size (WriteShardedCheckpoint sets it).
};

// One record of a rank's file: an item's piece (offsets and sizes within the tensor) or its value.
struct Record {
  size_t item = 0;
  int rank = 0;
  int64_t offset = 0;  // In the rank's file.
  int64_t length = 0;
  std::vector<int64_t> offsets;  // A tensor's piece; empty for a scalar or a value.
  std::vector<int64_t> sizes;
};

std::string RankFile(int rank) { return absl::StrCat("__", rank, "_0.distcp"); }

std::string OptimizerKey(size_t index) { return absl::StrCat("optimizer_", index); }

// The checkpoint's state_dict and optimizer_states as DCP items (Lightning's keys), the rest left in `contents`.
absl::StatusOr<std::vector<FlatItem>> Flatten(GenericDict& contents,
                                          const std::vector<std::vector<std::string>>& parameter_names) {
  std::vector<FlatItem> items;
  const IValue state_key{std::string("state_dict")};
  if (!contents.contains(state_key) || !contents.at(state_key).isGenericDict()) {
    return absl::InternalError("the checkpoint has no state_dict dictionary");
  }
  for (const auto& entry : contents.at(state_key).toGenericDict()) {
    const std::string name = entry.key().toStringRef();
    items.push_back(
        {absl::StrCat("model.", name), {IValue(std::string("model")), IValue(name)}, entry.value(), name, {}});
  }
  (void)contents.erase(state_key);
  const IValue optimizers_key{std::string("optimizer_states")};
  if (!contents.contains(optimizers_key)) return items;
  const IValue optimizers = contents.at(optimizers_key);
  (void)contents.erase(optimizers_key);
  if (!optimizers.isList()) return absl::InternalError("the checkpoint's optimizer_states is not a list");
  const c10::ArrayRef<IValue> states = optimizers.toListRef();
  for (size_t i = 0; i < states.size(); ++i) {
    const std::string top = OptimizerKey(i);
    const std::vector<std::string> none;
    const std::vector<std::string>& names = i < parameter_names.size() ? parameter_names[i] : none;
    const auto name_of = [&](int64_t index) {
      return index >= 0 && static_cast<size_t>(index) < names.size() ? names[index] : absl::StrCat(index);
    };
    if (!states[i].isGenericDict()) return absl::InternalError(absl::StrCat(top, " is not a dictionary"));
    for (const auto& part : states[i].toGenericDict()) {
      const std::string part_name = part.key().toStringRef();
      if (part_name == "state" && part.value().isGenericDict()) {
        for (const auto& parameter : part.value().toGenericDict()) {
          if (!parameter.key().isInt() || !parameter.value().isGenericDict()) {
            return absl::InternalError(absl::StrCat(top, "'s state is not keyed by parameter index"));
          }
          const std::string name = name_of(parameter.key().toInt());
          for (const auto& value : parameter.value().toGenericDict()) {
            const std::string key = value.key().toStringRef();
            items.push_back({absl::StrCat(top, ".state.", name, ".", key),
                             {IValue(top), IValue(std::string("state")), IValue(name), IValue(key)},
                             value.value(),
                             name,
                             {}});
          }
        }
      } else if (part_name == "param_groups" && part.value().isList()) {
        const c10::ArrayRef<IValue> groups = part.value().toListRef();
        for (size_t g = 0; g < groups.size(); ++g) {
          if (!groups[g].isGenericDict()) return absl::InternalError(absl::StrCat(top, "'s group is not a dictionary"));
          for (const auto& setting : groups[g].toGenericDict()) {
            const std::string key = setting.key().toStringRef();
            IValue value = setting.value();
            if (key == "params" && value.isList()) {
              GenericList named = NewList();
              for (const IValue& index : value.toListRef()) {
                named.push_back(index.isInt() ? IValue(name_of(index.toInt())) : index);
              }
              value = IValue(named);
            }
            items.push_back({absl::StrCat(top, ".param_groups.", g, ".", key),
                             {IValue(top), IValue(std::string("param_groups")), IValue(static_cast<int64_t>(g)),
                              IValue(key)},
                             value});
          }
        }
      } else {
        items.push_back({absl::StrCat(top, ".", part_name), {IValue(top), IValue(part_name)}, part.value()});
      }
    }
  }
  return items;
}

bool Splits(const at::Tensor& tensor) { return tensor.dim() > 0 && tensor.numel() > 0; }

// Where `tensor` (item `item`'s, on this rank) lies in its whole tensor: the part `ranks` names for its parameter when
// the tensor has the part's sizes, else the whole tensor, which every rank holds. InvalidArgument for a part that
// does not lie within its whole tensor.
absl::StatusOr<ShardedPart> PartOf(const FlatItem& item, const at::Tensor& tensor, const ShardedCheckpointRanks& ranks) {
  const auto found = item.parameter.empty() ? ranks.parts.end() : ranks.parts.find(item.parameter);
  if (found == ranks.parts.end() || tensor.sizes().vec() != found->second.sizes) {
    return ShardedPart{.whole_sizes = tensor.sizes().vec(),
                       .sizes = tensor.sizes().vec(),
                       .offsets = std::vector<int64_t>(tensor.dim(), 0),
                       .replica = ranks.rank,
                       .replicas = ranks.world_size};
  }
  const ShardedPart& part = found->second;
  bool fits = part.whole_sizes.size() == part.sizes.size() && part.offsets.size() == part.sizes.size() &&
              part.replicas >= 1 && part.replica >= 0 && part.replica < part.replicas;
  for (size_t d = 0; fits && d < part.sizes.size(); ++d) {
    fits = part.offsets[d] >= 0 && part.sizes[d] >= 0 && part.offsets[d] + part.sizes[d] <= part.whole_sizes[d];
  }
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat(
        item.key, ": the part [", absl::StrJoin(part.sizes, ", "), "] at [", absl::StrJoin(part.offsets, ", "),
        "] (replica ", part.replica, " of ", part.replicas, ") does not lie within the whole tensor [",
        absl::StrJoin(part.whole_sizes, ", "), "]"));
  }
  return part;
}

// This rank's piece of `tensor`, which lies in its whole tensor as `part` says (undefined: none): rows
// [i c, (i + 1) c) of it, c = ceil(rows / replicas), i = its replica; `offsets` where the piece lies in the whole.
at::Tensor PieceOf(const at::Tensor& tensor, const ShardedPart& part, std::vector<int64_t>& offsets) {
  offsets = part.offsets;
  if (!Splits(tensor)) return part.replica == 0 ? tensor : at::Tensor();
  const int64_t rows = tensor.size(0);
  const int64_t chunk = (rows + part.replicas - 1) / part.replicas;
  const int64_t begin = chunk * part.replica;
  if (begin >= rows) return at::Tensor();
  offsets[0] += begin;
  return tensor.narrow(0, begin, std::min(chunk, rows - begin));
}

std::string Join(const std::vector<int64_t>& values) { return absl::StrJoin(values, ","); }

bool ParseInts(absl::string_view text, std::vector<int64_t>& out) {
  out.clear();
  if (text.empty()) return true;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(part, &value)) return false;
    out.push_back(value);
  }
  return true;
}

// Python's pickle, protocol 2, of DCP's Metadata: the classes torch/distributed/checkpoint/metadata.py and
// filesystem.py define, called and filled as Python's pickle does it (NEWOBJ, then BUILD with the fields).
class MetadataPickle {
 public:
  MetadataPickle() { out_ += "\x80\x02"; }

  void Global(const char* module, const char* name) { out_ += absl::StrCat("c", module, "\n", name, "\n"); }
  void Object(const char* module, const char* name) {
    Global(module, name);
    out_ += ")\x81";  // EMPTY_TUPLE, NEWOBJ
  }
  void DcpObject(const char* name) { Object("torch.distributed.checkpoint.metadata", name); }
  void String(const std::string& text) {
    out_ += 'X';
    AppendLittleEndian(text.size(), 4);
    out_ += text;
  }
  void Int(int64_t value) {
    if (value >= 0 && value < 256) {
      out_ += 'K';
      AppendLittleEndian(static_cast<uint64_t>(value), 1);
    } else if (value >= INT32_MIN && value <= INT32_MAX) {
      out_ += 'J';
      AppendLittleEndian(static_cast<uint32_t>(static_cast<int32_t>(value)), 4);
    } else {
      out_ += "\x8a\x08";  // LONG1, 8 bytes
      AppendLittleEndian(static_cast<uint64_t>(value), 8);
    }
  }
  void None() { out_ += 'N'; }
  void False() { out_ += '\x89'; }
  void Mark() { out_ += '('; }
  void Tuple() { out_ += 't'; }           // Of everything since the MARK.
  void Tuple1() { out_ += '\x85'; }
  void Tuple2() { out_ += '\x86'; }
  void SetItems() { out_ += 'u'; }
  void Appends() { out_ += 'e'; }
  void EmptyDict() { out_ += '}'; }
  void EmptyList() { out_ += ']'; }
  void Build() { out_ += 'b'; }
  void Reduce() { out_ += 'R'; }
  // torch.Size(values)
  void Size(const std::vector<int64_t>& values) {
    Global("torch", "Size");
    Mark();
    for (int64_t value : values) Int(value);
    Tuple();
    Tuple1();
    Reduce();
  }
  std::string Finish() { return out_ + "."; }

 private:
  void AppendLittleEndian(uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
  std::string out_;
};

// PyTorch's name for a dtype (torch.float32, ...), as its pickle names it.
absl::StatusOr<std::string> DtypeName(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return std::string("float32");
    case at::kDouble: return std::string("float64");
    case at::kHalf: return std::string("float16");
    case at::kBFloat16: return std::string("bfloat16");
    case at::kLong: return std::string("int64");
    case at::kInt: return std::string("int32");
    case at::kShort: return std::string("int16");
    case at::kChar: return std::string("int8");
    case at::kByte: return std::string("uint8");
    case at::kBool: return std::string("bool");
    default: return absl::InvalidArgumentError(absl::StrCat("a tensor of type ", c10::toString(type)));
  }
}

absl::StatusOr<std::string> MetadataBytes(const std::vector<FlatItem>& items, const std::vector<Record>& records) {
  MetadataPickle out;
  out.DcpObject("Metadata");
  out.EmptyDict();
  out.Mark();
  out.String("state_dict_metadata");
  out.EmptyDict();
  out.Mark();
  std::vector<std::vector<const Record*>> by_item(items.size());
  for (const Record& record : records) by_item[record.item].push_back(&record);
  for (size_t i = 0; i < items.size(); ++i) {
    out.String(items[i].key);
    if (!items[i].value.isTensor()) {
      out.DcpObject("BytesStorageMetadata");
      continue;
    }
    const at::Tensor& tensor = items[i].value.toTensor();  // This rank's part: its type is the whole tensor's.
    absl::StatusOr<std::string> dtype = DtypeName(tensor.scalar_type());
    if (!dtype.ok()) return dtype.status();
    out.DcpObject("TensorStorageMetadata");
    out.EmptyDict();
    out.Mark();
    out.String("properties");
    out.DcpObject("TensorProperties");  // Its state is a tuple (TensorProperties.__setstate__).
    out.Mark();
    out.Global("torch", dtype->c_str());
    out.Global("torch.serialization", "_get_layout");
    out.String("torch.strided");
    out.Tuple1();
    out.Reduce();
    out.False();  // requires_grad
    out.Global("builtins", "getattr");
    out.Global("torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING");
    out.String("TORCH_CONTIGUOUS_FORMAT");
    out.Tuple2();
    out.Reduce();
    out.False();  // pin_memory
    out.Tuple();
    out.Build();
    out.String("size");
    out.Size(items[i].whole_sizes);
    out.String("chunks");
    out.EmptyList();
    out.Mark();
    for (const Record* record : by_item[i]) {
      out.DcpObject("ChunkStorageMetadata");
      out.EmptyDict();
      out.Mark();
      out.String("offsets");
      out.Size(record->offsets);
      out.String("sizes");
      out.Size(record->sizes);
      out.SetItems();
      out.Build();
    }
    out.Appends();
    out.SetItems();
    out.Build();
  }
  out.SetItems();
  out.String("planner_data");
  out.EmptyDict();
  out.Mark();
  for (const FlatItem& item : items) {
    out.String(item.key);
    out.Mark();
    for (const IValue& step : item.path) {
      if (step.isInt()) {
        out.Int(step.toInt());
      } else {
        out.String(step.toStringRef());
      }
    }
    out.Tuple();
  }
  out.SetItems();
  out.String("storage_data");
  out.EmptyDict();
  out.Mark();
  for (size_t i = 0; i < items.size(); ++i) {
    for (size_t c = 0; c < by_item[i].size(); ++c) {
      const Record& record = *by_item[i][c];
      out.DcpObject("MetadataIndex");
      out.EmptyDict();
      out.Mark();
      out.String("fqn");
      out.String(items[i].key);
      out.String("offset");
      if (items[i].value.isTensor()) {
        out.Size(record.offsets);
      } else {
        out.None();
      }
      out.String("index");
      if (items[i].value.isTensor()) {
        out.Int(static_cast<int64_t>(c));
      } else {
        out.None();
      }
      out.SetItems();
      out.Build();
      out.Object("torch.distributed.checkpoint.filesystem", "_StorageInfo");
      out.EmptyDict();
      out.Mark();
      out.String("relative_path");
      out.String(RankFile(record.rank));
      out.String("offset");
      out.Int(record.offset);
      out.String("length");
      out.Int(record.length);
      out.SetItems();
      out.Build();
    }
  }
  out.SetItems();
  out.String("storage_meta");
  out.None();
  out.String("version");
  out.String("1.0.0");
  out.SetItems();
  out.Build();
  return out.Finish();
}

// Whether `records` (every rank's) cover each tensor of `items` exactly once (see WriteShardedCheckpoint's caller).
absl::Status CheckCoverage(const std::vector<FlatItem>& items, const std::vector<Record>& records) {
  std::vector<std::vector<const Record*>> by_item(items.size());
  for (const Record& record : records) by_item[record.item].push_back(&record);
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].value.isTensor()) continue;
    const std::vector<int64_t>& whole = items[i].whole_sizes;
    int64_t whole_elements = 1;
    for (int64_t size : whole) whole_elements *= size;
    int64_t elements = 0;
    const auto where = [](const Record& record) {
      return absl::StrCat("[", Join(record.sizes), "] at [", Join(record.offsets), "] (rank ", record.rank, ")");
    };
    for (size_t a = 0; a < by_item[i].size(); ++a) {
      const Record& piece = *by_item[i][a];
      bool within = piece.offsets.size() == whole.size() && piece.sizes.size() == whole.size();
      int64_t count = 1;
      for (size_t d = 0; within && d < whole.size(); ++d) {
        within = piece.offsets[d] >= 0 && piece.sizes[d] >= 0 && piece.offsets[d] + piece.sizes[d] <= whole[d];
        count *= piece.sizes[d];
      }
      if (!within) {
        return absl::InvalidArgumentError(absl::StrCat("the piece ", where(piece), " of ", items[i].key,
                                                       " lies outside it [", Join(whole), "]"));
      }
      elements += count;
      for (size_t b = 0; b < a && count > 0; ++b) {
        const Record& other = *by_item[i][b];
        bool overlaps = true;
        for (size_t d = 0; overlaps && d < whole.size(); ++d) {
          overlaps = piece.offsets[d] < other.offsets[d] + other.sizes[d] &&
                     other.offsets[d] < piece.offsets[d] + piece.sizes[d];
        }
        if (overlaps) {
          return absl::InvalidArgumentError(absl::StrCat("the ranks disagree on the parts of ", items[i].key,
                                                         ": the pieces ", where(piece), " and ", where(other),
                                                         " overlap"));
        }
      }
    }
    if (elements != whole_elements) {
      return absl::InvalidArgumentError(absl::StrCat("the ranks' pieces of ", items[i].key, " hold ", elements,
                                                     " of its ", whole_elements, " elements"));
    }
  }
  return absl::OkStatus();
}

// Kiln's index of the records (meta.pt's kiln.sharded).
IValue IndexValue(const std::vector<FlatItem>& items, const std::vector<Record>& records, int world_size) {
  GenericList list = NewList();
  for (const Record& record : records) {
    const FlatItem& item = items[record.item];
    GenericDict entry = NewDict();
    entry.insert(IValue(std::string("key")), IValue(item.key));
    GenericList path = NewList();
    for (const IValue& step : item.path) path.push_back(step);
    entry.insert(IValue(std::string("path")), IValue(path));
    entry.insert(IValue(std::string("file")), IValue(RankFile(record.rank)));
    entry.insert(IValue(std::string("offset")), IValue(record.offset));
    entry.insert(IValue(std::string("length")), IValue(record.length));
    if (item.value.isTensor()) {
      entry.insert(IValue(std::string("size")), IValue(item.whole_sizes));
      entry.insert(IValue(std::string("offsets")), IValue(record.offsets));
    }
    list.push_back(IValue(entry));
  }
  GenericDict index = NewDict();
  index.insert(IValue(std::string("world_size")), IValue(static_cast<int64_t>(world_size)));
  index.insert(IValue(std::string("records")), IValue(list));
  return IValue(index);
}

// Puts the complete folder `from` at `to`: an atomic exchange with what is there (then removed), or a rename.
absl::Status Publish(const fs::path& from, const fs::path& to) {
  std::error_code error;
  if (fs::exists(fs::symlink_status(to, error))) {
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) != 0) {
      return absl::InternalError(absl::StrCat("cannot put ", from.string(), " in place of ", to.string(), ": ",
                                              std::strerror(errno)));
    }
    fs::remove_all(from, error);  // Now the previous checkpoint.
  } else if (::rename(from.c_str(), to.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot rename ", from.string(), " to ", to.string(), ": ", std::strerror(errno)));
  }
  return SyncFolder(to.parent_path().string());
}

// ReadShardedState, which catches what LibTorch throws here.
absl::Status ReadSharded(const std::string& path, GenericDict& contents) {
  const auto damaged = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("sharded checkpoint ", path, " is damaged or incomplete: ", what));
  };
  const IValue kiln_key{std::string(kKilnSectionKey)};
  if (!contents.contains(kiln_key) || !contents.at(kiln_key).isGenericDict() ||
      !contents.at(kiln_key).toGenericDict().contains(IValue(std::string("sharded")))) {
    return damaged(absl::StrCat("its ", kShardedMetaFile, " has no kiln.sharded index (not written by Kiln?)"));
  }
  const IValue index = contents.at(kiln_key).toGenericDict().at(IValue(std::string("sharded")));
  (void)contents.at(kiln_key).toGenericDict().erase(IValue(std::string("sharded")));
  if (!index.isGenericDict() || !index.toGenericDict().contains(IValue(std::string("records"))) ||
      !index.toGenericDict().at(IValue(std::string("records"))).isList()) {
    return damaged("its index is not a dictionary with a list of records");
  }
  // What the folder's data can hold: its .distcp files, and (below) what their records' deflated parts inflate to.
  // Every whole tensor is filled from records there, so tensors whose sizes add up to more are damage, refused before
  // any is allocated.
  uint64_t stored_bytes = 0;
  std::error_code error;
  for (auto it = fs::directory_iterator(path, error); !error && it != fs::directory_iterator(); it.increment(error)) {
    if (it->path().extension() == ".distcp") stored_bytes += it->file_size(error);
  }
  // The index's entries, and the distinct ranges of the files they name: each range is read once, and entries that
  // name one range share what it holds (a crafted index could name one large range many times).
  struct Entry {
    std::string key;
    std::vector<IValue> path;
    size_t range = 0;
    IValue size;  // None: a value, whole; otherwise the whole tensor's size, and `offsets` where this piece starts.
    IValue offsets;
  };
  struct Range {
    std::string file;
    uint64_t offset = 0;
    uint64_t length = 0;
    std::string first_key;  // The first entry that names it, for errors.
    IValue value;
  };
  std::vector<Entry> entries;
  std::vector<Range> ranges;
  std::map<std::tuple<std::string, uint64_t, uint64_t>, size_t> range_of;
  for (const IValue& entry_value : index.toGenericDict().at(IValue(std::string("records"))).toListRef()) {
    if (!entry_value.isGenericDict()) return damaged("a record's entry is not a dictionary");
    const GenericDict entry = entry_value.toGenericDict();
    const auto get = [&](const char* name) {
      const IValue key{std::string(name)};
      return entry.contains(key) ? entry.at(key) : IValue();
    };
    const IValue key = get("key");
    const IValue path_value = get("path");
    const IValue file = get("file");
    const IValue offset = get("offset");
    const IValue length = get("length");
    if (!key.isString() || !path_value.isList() || path_value.toListRef().empty() || !file.isString() ||
        !offset.isInt() || !length.isInt() || offset.toInt() < 0 || length.toInt() <= 0 ||
        file.toStringRef().find('/') != std::string::npos || file.toStringRef().rfind("__", 0) != 0) {
      return damaged("a record's entry lacks its key, path, file, offset or length");
    }
    const auto [it, added] = range_of.try_emplace(
        {file.toStringRef(), static_cast<uint64_t>(offset.toInt()), static_cast<uint64_t>(length.toInt())},
        ranges.size());
    if (added) {
      ranges.push_back({file.toStringRef(), static_cast<uint64_t>(offset.toInt()),
                        static_cast<uint64_t>(length.toInt()), key.toStringRef(), IValue()});
    }
    entries.push_back({key.toStringRef(), path_value.toListRef().vec(), it->second, get("size"), get("offsets")});
  }
  // Distinct ranges of a file never overlap (the writer puts its records one after another), so that reading each
  // once reads no more than the files hold.
  const std::tuple<std::string, uint64_t, uint64_t>* previous = nullptr;
  for (const auto& [range, unused] : range_of) {
    if (previous != nullptr && std::get<0>(*previous) == std::get<0>(range) &&
        std::get<1>(range) - std::get<1>(*previous) < std::get<2>(*previous)) {
      return damaged(absl::StrCat("the records at bytes ", std::get<1>(*previous), " (", std::get<2>(*previous),
                                  " bytes) and ", std::get<1>(range), " (", std::get<2>(range), " bytes) of ",
                                  std::get<0>(range), " overlap"));
    }
    previous = &range;
  }
  uint64_t inflated_bytes = 0;  // What the ranges' deflated records inflate to, together: at most MaxInflatedBytes.
  for (Range& range : ranges) {
    const std::string record_path = (fs::path(path) / range.file).string();
    absl::StatusOr<TorchFileBytes> bytes = ReadVerifiedZip(record_path, range.offset, range.length);
    if (!bytes.ok()) return damaged(absl::StrCat("the record of ", range.first_key, ": ", bytes.status().message()));
    inflated_bytes += bytes->inflated;
    if (inflated_bytes > MaxInflatedBytes()) {  // Before this range's records are inflated.
      return absl::InvalidArgumentError(absl::StrCat(
          "sharded checkpoint ", path, ": ",
          InflatesTooFar(absl::StrCat("its records, up to that of ", range.first_key, ", together")).message()));
    }
    absl::StatusOr<IValue> value;
    try {
      caffe2::serialize::PyTorchStreamReader reader(MemoryReadAdapter(*bytes));
      value = ReadTorchFile(reader, &*bytes);
    } catch (const std::exception& e) {
      value = absl::InvalidArgumentError(e.what());
    }
    if (!value.ok()) return damaged(absl::StrCat("the record of ", range.first_key, ": ", value.status().message()));
    range.value = *std::move(value);
  }
  // The whole tensors' sizes, each key's once (its first piece gives the type), together within the folder's data.
  const uint64_t data_bytes = stored_bytes + inflated_bytes;
  uint64_t wholes_bytes = 0;
  std::unordered_set<std::string> sized;
  for (const Entry& entry : entries) {
    if (entry.size.isNone() || !sized.insert(entry.key).second) continue;
    if (!entry.size.isIntList() && !entry.size.isList()) {
      return damaged(absl::StrCat(entry.key, "'s size is not a list"));
    }
    const IValue& piece = ranges[entry.range].value;
    if (!piece.isTensor()) return damaged(absl::StrCat("the record of ", entry.key, " is not a tensor"));
    uint64_t bytes = piece.toTensor().element_size();
    std::vector<int64_t> sizes;
    for (const IValue& dim : entry.size.toListRef()) {
      if (!dim.isInt() || dim.toInt() < 0) return damaged(absl::StrCat(entry.key, " has a negative size"));
      sizes.push_back(dim.toInt());
      bytes = SaturatingMultiply(bytes, static_cast<uint64_t>(dim.toInt()));
    }
    wholes_bytes = bytes > UINT64_MAX - wholes_bytes ? UINT64_MAX : wholes_bytes + bytes;
    if (wholes_bytes > data_bytes) {
      return damaged(absl::StrCat(entry.key, "'s size [", absl::StrJoin(sizes, ", "), "] (", bytes,
                                  " bytes) brings its tensors to ", wholes_bytes, " bytes, more than the ", data_bytes,
                                  " bytes its files store (", stored_bytes, " in its .distcp files, ", inflated_bytes,
                                  " inflated from their deflated records)"));
    }
  }
  struct Whole {
    std::vector<IValue> path;
    IValue value;
    bool pieces = false;  // `value` is a tensor of this key's own, which its pieces fill.
    int64_t filled = 0;
    // The pieces copied in so far, as (starts, sizes) boxes: a piece that overlaps one would leave as many elements
    // unfilled as it counts twice, and the tensor would load with memory no record wrote.
    std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> boxes;
  };
  std::vector<std::string> order;
  std::unordered_map<std::string, Whole> wholes;
  for (const Entry& entry : entries) {
    const IValue& value = ranges[entry.range].value;
    auto [it, added] = wholes.try_emplace(entry.key);
    Whole& whole = it->second;
    if (added) {
      order.push_back(entry.key);
      whole.path = entry.path;
    }
    if (entry.size.isNone()) {  // A value, whole.
      if (!added) return damaged(absl::StrCat(entry.key, " has two records"));
      whole.value = value;
      continue;
    }
    if (!entry.size.isIntList() && !entry.size.isList()) {
      return damaged(absl::StrCat(entry.key, "'s size is not a list"));
    }
    if (!value.isTensor()) return damaged(absl::StrCat("the record of ", entry.key, " is not a tensor"));
    const at::Tensor piece = value.toTensor();
    std::vector<int64_t> sizes;
    std::vector<int64_t> starts;
    for (const IValue& dim : entry.size.toListRef()) sizes.push_back(dim.isInt() ? dim.toInt() : -1);
    if (entry.offsets.isList() || entry.offsets.isIntList()) {
      for (const IValue& dim : entry.offsets.toListRef()) starts.push_back(dim.isInt() ? dim.toInt() : -1);
    }
    if (starts.size() != sizes.size() || piece.dim() != static_cast<int64_t>(sizes.size())) {
      return damaged(absl::StrCat("a piece of ", entry.key, " has ", piece.dim(), " dimensions, not ", sizes.size()));
    }
    if (added) {
      whole.value = IValue(at::empty(sizes, piece.options()));  // Its size was counted above.
      whole.pieces = true;
    }
    // Never a copy into a value, which other keys may share.
    if (!whole.pieces) return damaged(absl::StrCat(entry.key, " is both a value and a tensor's pieces"));
    at::Tensor target = whole.value.toTensor();
    if (target.scalar_type() != piece.scalar_type() || target.sizes().vec() != sizes) {
      return damaged(absl::StrCat("the pieces of ", entry.key, " disagree on its type or size"));
    }
    at::Tensor target_view = target;
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (starts[d] < 0 || starts[d] > sizes[d] || piece.size(d) > sizes[d] - starts[d]) {
        return damaged(absl::StrCat("a piece of ", entry.key, " lies outside it"));
      }
      target_view = target_view.narrow(d, starts[d], piece.size(d));
    }
    std::vector<int64_t> extent = piece.sizes().vec();
    for (const auto& [other_starts, other_extent] : whole.boxes) {
      bool overlaps = piece.numel() > 0;
      for (size_t d = 0; d < sizes.size() && overlaps; ++d) {
        overlaps = starts[d] < other_starts[d] + other_extent[d] && other_starts[d] < starts[d] + extent[d];
      }
      if (overlaps) {
        return damaged(absl::StrCat("two pieces of ", entry.key, " overlap (at [", absl::StrJoin(starts, ", "),
                                    "] and [", absl::StrJoin(other_starts, ", "), "])"));
      }
    }
    target_view.copy_(piece);
    whole.filled += piece.numel();
    whole.boxes.emplace_back(starts, std::move(extent));
  }
  // Everything back in place: the state_dict, and each optimizer's state by index again.
  GenericDict state_dict = NewDict();
  std::map<int64_t, GenericDict> optimizers;  // By number.
  for (const std::string& key : order) {
    const Whole& whole = wholes.at(key);
    if (whole.value.isTensor() && whole.filled != whole.value.toTensor().numel()) {
      return damaged(absl::StrCat(key, " has ", whole.filled, " of its ", whole.value.toTensor().numel(),
                                  " elements (a rank's file missing?)"));
    }
    const std::vector<IValue>& steps = whole.path;
    if (!steps[0].isString()) return damaged(absl::StrCat(key, "'s path does not start with a name"));
    const std::string& top = steps[0].toStringRef();
    if (top == "model" && steps.size() == 2 && steps[1].isString()) {
      state_dict.insert(steps[1], whole.value);
      continue;
    }
    int64_t number = 0;
    if (top.rfind("optimizer_", 0) != 0 || !absl::SimpleAtoi(top.substr(10), &number) || number < 0 ||
        steps.size() < 2 || !steps[1].isString()) {
      return damaged(absl::StrCat(key, " is neither the model's nor an optimizer's"));
    }
    auto [it, added] = optimizers.try_emplace(number, NewDict());
    GenericDict& optimizer = it->second;
    const IValue part = steps[1];
    if (steps.size() == 4 && part.toStringRef() == "state" && steps[2].isString() && steps[3].isString()) {
      if (!optimizer.contains(part)) optimizer.insert(part, NewDict());
      GenericDict by_name = optimizer.at(part).toGenericDict();
      if (!by_name.contains(steps[2])) by_name.insert(steps[2], NewDict());
      by_name.at(steps[2]).toGenericDict().insert_or_assign(steps[3], whole.value);
    } else if (steps.size() == 4 && part.toStringRef() == "param_groups" && steps[2].isInt() && steps[3].isString()) {
      if (!optimizer.contains(part)) optimizer.insert(part, NewList());
      GenericList groups = optimizer.at(part).toList();
      const int64_t g = steps[2].toInt();
      if (g < 0 || g > static_cast<int64_t>(groups.size())) return damaged(absl::StrCat(key, ": a group out of order"));
      if (g == static_cast<int64_t>(groups.size())) groups.push_back(IValue(NewDict()));
      groups.get(g).toGenericDict().insert_or_assign(steps[3], whole.value);
    } else if (steps.size() == 2) {
      optimizer.insert_or_assign(part, whole.value);
    } else {
      return damaged(absl::StrCat(key, " is not where an optimizer's state goes"));
    }
  }
  // Parameter names back to PyTorch's numbering: the groups' "params", in order.
  GenericList states = NewList();
  for (auto& [number, optimizer] : optimizers) {
    if (number != static_cast<int64_t>(states.size())) {
      return damaged(absl::StrCat("optimizer_", states.size(), " is missing"));
    }
    const IValue state_key{std::string("state")};
    const IValue groups_key{std::string("param_groups")};
    std::unordered_map<std::string, int64_t> numbers;
    if (optimizer.contains(groups_key)) {
      int64_t next = 0;
      for (const IValue& group : optimizer.at(groups_key).toListRef()) {
        GenericDict settings = group.toGenericDict();
        const IValue params_key{std::string("params")};
        if (!settings.contains(params_key) || !settings.at(params_key).isList()) continue;
        GenericList indices = NewList();
        for (const IValue& name : settings.at(params_key).toListRef()) {
          if (name.isString()) numbers.emplace(name.toStringRef(), next);
          indices.push_back(IValue(next++));
        }
        settings.insert_or_assign(params_key, IValue(indices));
      }
    }
    if (optimizer.contains(state_key)) {
      GenericDict by_index = NewDict();
      for (const auto& entry : optimizer.at(state_key).toGenericDict()) {
        const auto found = numbers.find(entry.key().toStringRef());
        int64_t index = 0;
        if (found != numbers.end()) {
          index = found->second;
        } else if (!absl::SimpleAtoi(entry.key().toStringRef(), &index)) {
          return damaged(absl::StrCat("optimizer_", number, " has state for '", entry.key().toStringRef(),
                                      "', which none of its groups holds"));
        }
        by_index.insert(IValue(index), entry.value());
      }
      optimizer.insert_or_assign(state_key, IValue(by_index));
    }
    states.push_back(IValue(optimizer));
  }
  contents.insert_or_assign(IValue(std::string("state_dict")), IValue(state_dict));
  if (!optimizers.empty()) contents.insert_or_assign(IValue(std::string("optimizer_states")), IValue(states));
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteShardedCheckpoint(const std::string& path, absl::StatusOr<GenericDict> snapshot,
                                    const ShardedCheckpointRanks& ranks) {
  const auto failed = [&](absl::string_view what) {
    return absl::InternalError(absl::StrCat("cannot write the sharded checkpoint ", path, ": ", what));
  };
  // Every rank takes part in both gathers, whatever fails, so that none waits for another for good.
  const std::vector<std::string> pids = ranks.all_gather(absl::StrCat(::getpid()));
  const fs::path folder = absl::StrCat(path, ".tmp-", pids.at(0));
  std::string mine = "ok\n";
  GenericDict contents = snapshot.ok() ? *snapshot : NewDict();
  absl::StatusOr<std::vector<FlatItem>> items =
      snapshot.ok() ? Flatten(contents, ranks.optimizer_parameter_names) : snapshot.status();
  std::vector<TorchFilePieces> files;  // What the file's pieces point into, until it is written.
  std::vector<Record> records;
  if (!items.ok()) {
    mine = absl::StrCat("error\t", items.status().message());
  } else {
    std::vector<absl::string_view> pieces;
    int64_t offset = 0;
    for (size_t i = 0; i < items->size() && mine == "ok\n"; ++i) {
      const IValue& value = (*items)[i].value;
      Record record{.item = i, .rank = ranks.rank, .offset = offset};
      IValue written;
      if (value.isTensor()) {
        absl::StatusOr<ShardedPart> part = PartOf((*items)[i], value.toTensor(), ranks);
        if (!part.ok()) {
          mine = absl::StrCat("error\t", part.status().message());
          break;
        }
        (*items)[i].whole_sizes = part->whole_sizes;
        at::Tensor piece = PieceOf(value.toTensor(), *part, record.offsets);
        if (!piece.defined()) continue;
        record.sizes = piece.sizes().vec();
        written = IValue(piece.contiguous().clone());  // A storage of its own: torch.save writes a whole storage.
      } else if (ranks.rank == 0) {
        written = value;
      } else {
        continue;
      }
      absl::StatusOr<TorchFilePieces> file = SerializeTorchFilePieces(written);
      if (!file.ok()) {
        mine = absl::StrCat("error\t", (*items)[i].key, ": ", file.status().message());
        break;
      }
      record.length = static_cast<int64_t>(file->size());
      offset += record.length;
      pieces.insert(pieces.end(), file->pieces().begin(), file->pieces().end());
      files.push_back(*std::move(file));
      records.push_back(std::move(record));
    }
    std::error_code error;
    fs::create_directories(folder, error);
    if (mine == "ok\n") {
      absl::Status written =
          WriteFileDurably((folder / RankFile(ranks.rank)).string(), absl::MakeConstSpan(pieces), kCheckpointWrite);
      if (!written.ok()) mine = absl::StrCat("error\t", written.message());
    }
    for (const Record& record : records) {
      absl::StrAppend(&mine, record.item, "\t", record.offset, "\t", record.length, "\t", Join(record.offsets), "\t",
                      Join(record.sizes), "\n");
    }
  }
  files.clear();
  const std::vector<std::string> all = ranks.all_gather(mine);
  std::string errors;
  std::vector<Record> merged;
  for (size_t rank = 0; rank < all.size(); ++rank) {
    std::vector<std::string> lines = absl::StrSplit(all[rank], '\n', absl::SkipEmpty());
    if (lines.empty() || lines[0] != "ok") {
      absl::StrAppend(&errors, errors.empty() ? "" : "; ", "rank ", rank, ": ",
                      lines.empty() ? "nothing" : absl::string_view(lines[0]).substr(6));
      continue;
    }
    for (size_t l = 1; l < lines.size(); ++l) {
      std::vector<std::string> fields = absl::StrSplit(lines[l], '\t');
      Record record{.rank = static_cast<int>(rank)};
      uint64_t item = 0;
      if (fields.size() != 5 || !absl::SimpleAtoi(fields[0], &item) || !absl::SimpleAtoi(fields[1], &record.offset) ||
          !absl::SimpleAtoi(fields[2], &record.length) || !ParseInts(fields[3], record.offsets) ||
          !ParseInts(fields[4], record.sizes) || !items.ok() || item >= items->size()) {
        absl::StrAppend(&errors, errors.empty() ? "" : "; ", "rank ", rank, " sent an unreadable index");
        break;
      }
      record.item = item;
      merged.push_back(std::move(record));
    }
  }
  if (!errors.empty()) {
    if (ranks.rank == 0) {
      std::error_code ignored;
      fs::remove_all(folder, ignored);
    }
    return failed(errors);
  }
  if (ranks.rank != 0) return absl::OkStatus();
  // Rank 0: the ranks' pieces cover each whole tensor exactly once, as rank 0 sizes it: within it, none overlapping
  // another, and as many elements as it has. Parts that disagree between the ranks would leave holes and elements
  // written twice, which the reader refuses: refused here, before anything is published.
  if (absl::Status covered = CheckCoverage(*items, merged); !covered.ok()) {
    std::error_code ignored;
    fs::remove_all(folder, ignored);
    return failed(covered.message());
  }
  // Rank 0: the two indices, then the folder under its name.
  absl::StatusOr<std::string> metadata = MetadataBytes(*items, merged);
  if (!metadata.ok()) return failed(metadata.status().message());
  const IValue kiln_key{std::string(kKilnSectionKey)};
  if (!contents.contains(kiln_key)) contents.insert(kiln_key, NewDict());
  contents.at(kiln_key).toGenericDict().insert_or_assign(IValue(std::string("sharded")),
                                                         IndexValue(*items, merged, ranks.world_size));
  absl::Status status = WriteCheckpoint((folder / kShardedMetaFile).string(), contents);
  if (status.ok()) {
    status = WriteFileDurably((folder / kDcpMetadataFile).string(), *metadata, kCheckpointWrite);
  }
  if (status.ok()) status = SyncFolder(folder.string());
  if (status.ok()) status = Publish(folder, path);
  if (!status.ok()) {
    std::error_code ignored;
    fs::remove_all(folder, ignored);
    return failed(status.message());
  }
  return absl::OkStatus();
}

bool IsShardedCheckpoint(const std::string& path) {
  std::error_code error;
  return fs::is_directory(path, error) && fs::is_regular_file(fs::path(path) / kShardedMetaFile, error);
}

absl::Status ReadShardedState(const std::string& path, GenericDict& contents) {
  try {
    return ReadSharded(path, contents);
  } catch (const std::exception& e) {  // LibTorch's, on a value of an unexpected kind.
    return absl::InvalidArgumentError(
        absl::StrCat("sharded checkpoint ", path, " is damaged or incomplete: ", compat::ExceptionMessage(e)));
  }
}

}  // namespace kiln
