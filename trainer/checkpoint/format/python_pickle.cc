// RewritePythonPickle (python_pickle.h): a single pass over the opcodes that tracks, for each value on the pickle
// machine's stack, where its opcodes begin in the output, so that an opcode can be put in front of a value that is
// already written (a MARK before APPEND's element, a key before BUILD's state).
#include "trainer/checkpoint/format/python_pickle.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

// Deeper nesting is refused before LibTorch sees the pickle: LibTorch frees its values recursively, and a pickle
// nested some 200,000 deep overflowed the stack when the unpickled value (or, after an error, the unpickler's stack)
// was freed. A checkpoint nests a handful of levels; the bound leaves room for any user's hyper-parameters. Depths
// are tracked per value on the stack and per memo entry (a container stored and then filled, as Python writes
// them); torch_file.cc measures the unpickled value again, since memo references can hide depth from this count.
constexpr int kMaxPickleDepth = 100;

// What the output holds for each value on the stack.
enum class Kind {
  kValue,       // Anything LibTorch reads as it is.
  kDictClass,   // OrderedDict or another dict class: an empty dictionary in the output, not yet called.
  kOtherClass,  // Any other class: an empty dictionary in the output, not yet called.
  kDict,        // What calling a dict class made: a dictionary.
  kObject,      // What calling another class made: a dictionary {kPythonClassKey, kPythonArgsKey}.
};

struct Entry {
  size_t start = 0;  // Where the value's opcodes begin in the output.
  Kind kind = Kind::kValue;
  std::string name;  // "module.Class" for classes and objects.
  // How deeply the value nests containers: 0 for a scalar or a string, 1 for an empty list, and so on.
  int depth = 0;
  // The memo slot the value was last stored in (-1: none), so that filling it later updates what the memo knows.
  int64_t memo = -1;
  // An integer's value; a short tuple's items (immutable once built): what a tensor's rebuild is checked against.
  std::optional<int64_t> integer;
  std::shared_ptr<const std::vector<Entry>> items;
};

// Tuples up to this long keep their items: a tensor's rebuild arguments (6 or 7) and its sizes and strides (one per
// dimension; LibTorch allows 64).
constexpr size_t kMaxTrackedTupleItems = 64;

struct Mark {
  size_t stack_size = 0;
  size_t start = 0;  // Where the MARK is in the output.
};

// Classes whose objects are dictionaries with nothing else to keep: their items are read into a plain dictionary.
bool IsDictClass(const std::string& module, const std::string& name) {
  if (module == "collections" && name == "OrderedDict") return true;
  // Lightning's hyper-parameters (a dict whose keys are also attributes), under each name Lightning has shipped it.
  return name == "AttributeDict" &&
         (module == "lightning_fabric.utilities.data" || module == "lightning.fabric.utilities.data" ||
          module == "pytorch_lightning.utilities.parsing" || module == "lightning.pytorch.utilities.parsing");
}

// The globals LibTorch's unpickler resolves itself (torch/csrc/jit/serialization/unpickler.cpp, readGlobal).
bool LibTorchReads(const std::string& module, const std::string& name) {
  if (module == "torch") {
    return name == "device" || (name.size() > 7 && name.compare(name.size() - 7, 7, "Storage") == 0) ||
           name.rfind("per_", 0) == 0;  // Quantization schemes.
  }
  if (module == "torch._utils") {
    return name == "_rebuild_tensor_v2" || name == "_rebuild_qtensor" || name == "_rebuild_sparse_tensor";
  }
  if (module == "torch._tensor") return name == "_rebuild_from_type_v2";
  if (module == "builtins") return name == "complex";
  return module == "torch.jit._pickle";
}

void AppendUnicode(std::string& out, const std::string& text) {
  out.push_back('X');
  const uint32_t size = static_cast<uint32_t>(text.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((size >> (8 * i)) & 0xff));
  out.append(text);
}

std::string Unicode(const std::string& text) {
  std::string out;
  AppendUnicode(out, text);
  return out;
}

class Rewriter {
 public:
  explicit Rewriter(absl::string_view in) : in_(in) {}

  absl::StatusOr<std::string> Run() {
    while (true) {
      if (pos_ >= in_.size()) return Error("the pickle ends before its STOP opcode");
      op_pos_ = pos_;
      const char op = in_[pos_++];
      absl::Status status = Step(op);
      if (!status.ok()) return status;
      if (op == '.') break;
    }
    if (stack_.size() != 1) return Error(absl::StrCat("the pickle leaves ", stack_.size(), " values, not one"));
    return std::move(out_);
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("pickle byte ", op_pos_, ": ", what));
  }

  bool Read(size_t n, absl::string_view* bytes) {
    if (in_.size() - pos_ < n) return false;
    *bytes = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }

  bool ReadLine(std::string* line) {
    const size_t end = in_.find('\n', pos_);
    if (end == absl::string_view::npos) return false;
    *line = std::string(in_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return true;
  }

  static uint64_t LittleEndian(absl::string_view bytes) {
    uint64_t value = 0;
    for (size_t i = bytes.size(); i-- > 0;) value = (value << 8) | static_cast<uint8_t>(bytes[i]);
    return value;
  }

  // Copies the opcode and `arg_size` argument bytes through, pushing one value.
  absl::Status PassValue(size_t arg_size) {
    absl::string_view arg;
    if (!Read(arg_size, &arg)) return Error("truncated argument");
    Push(Kind::kValue);
    Emit(in_.substr(op_pos_, 1 + arg_size));
    return absl::OkStatus();
  }

  void Emit(absl::string_view bytes) { out_.append(bytes.data(), bytes.size()); }

  void Push(Kind kind, std::string name = "", int depth = 0) {
    stack_.push_back(Entry{out_.size(), kind, std::move(name), depth, -1});
  }

  // Records that the container on top of the stack (or a new value) nests `depth` deep; an error past the bound.
  absl::Status Nest(Entry& entry, int depth) {
    entry.depth = std::max(entry.depth, depth);
    if (entry.memo >= 0) memo_[static_cast<uint32_t>(entry.memo)].depth = entry.depth;
    if (entry.depth > kMaxPickleDepth) {
      return Error(absl::StrCat("containers nest more than ", kMaxPickleDepth,
                                " deep (a checkpoint nests a handful of levels)"));
    }
    return absl::OkStatus();
  }

  static int Deepest(const std::vector<Entry>& entries, size_t from = 0) {
    int depth = 0;
    for (size_t i = from; i < entries.size(); ++i) depth = std::max(depth, entries[i].depth);
    return depth;
  }

  absl::Status Pop(size_t n, std::vector<Entry>* popped = nullptr) {
    if (stack_.size() < n + (marks_.empty() ? 0 : marks_.back().stack_size)) {
      return Error("the opcode takes more values than the stack holds");
    }
    if (popped != nullptr) popped->assign(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
    stack_.resize(stack_.size() - n);
    return absl::OkStatus();
  }

  absl::Status PopToMark(size_t* mark_start) {
    if (marks_.empty()) return Error("the opcode needs a MARK and there is none");
    const Mark mark = marks_.back();
    marks_.pop_back();
    stack_.resize(mark.stack_size);
    if (mark_start != nullptr) *mark_start = mark.start;
    return absl::OkStatus();
  }

  // A value that is a class (not yet called) may be used only as the callee of REDUCE or NEWOBJ.
  absl::Status CheckNotClass(const Entry& entry) const {
    if (entry.kind == Kind::kDictClass || entry.kind == Kind::kOtherClass) {
      return Error(absl::StrCat("the class ", entry.name, " is used as a value; only calling it is read"));
    }
    return absl::OkStatus();
  }

  absl::Status MemoPut(uint32_t id) {
    if (stack_.empty()) return Error("memo put with nothing on the stack");
    const Entry& top = stack_.back();
    if (top.kind == Kind::kDictClass || top.kind == Kind::kOtherClass) {
      // Kept out of LibTorch's memo: each use gets a fresh dictionary of its own (below), never a shared one.
      classes_[id] = top;
      return absl::OkStatus();
    }
    classes_.erase(id);
    stack_.back().memo = id;
    // LibTorch's unpickler ignores the slot a PUT names: it appends to its memo, reserving room for twice the slot
    // first (a slot of 2^32 - 1 asked for 137 GB), and a GET indexes what it appended. So the output numbers its
    // slots 0, 1, 2, ... in the order they are stored, and each GET names the slot its PUT became.
    const uint32_t slot = static_cast<uint32_t>(stored_);
    ++stored_;
    memo_[id] = MemoEntry{slot, top.depth, top.integer, top.items, top.name};
    EmitSlot('r', slot);
    return absl::OkStatus();
  }

  absl::Status MemoGet(uint32_t id) {
    auto found = classes_.find(id);
    if (found != classes_.end()) {
      Push(found->second.kind, found->second.name);
      out_.push_back('}');
      return absl::OkStatus();
    }
    auto stored = memo_.find(id);
    if (stored == memo_.end()) return Error(absl::StrCat("memo slot ", id, " is read before anything is stored in it"));
    const MemoEntry& entry = stored->second;
    Push(Kind::kValue, entry.name, entry.depth);
    stack_.back().memo = id;
    stack_.back().integer = entry.integer;
    stack_.back().items = entry.items;
    EmitSlot('j', entry.slot);
    return absl::OkStatus();
  }

  // LONG_BINPUT ('r') or LONG_BINGET ('j') of `slot`.
  void EmitSlot(char op, uint32_t slot) {
    out_.push_back(op);
    for (int byte = 0; byte < 4; ++byte) out_.push_back(static_cast<char>((slot >> (8 * byte)) & 0xff));
  }

  // REDUCE or NEWOBJ: the callee and its argument tuple are the top two values.
  // _rebuild_tensor_v2(storage, offset, sizes, strides, ...): LibTorch takes a negative stride for a contiguous one
  // without a word (TensorImpl::set_sizes_and_strides), which would restore values from another layout than the file
  // declares, so the sizes and strides the pickle spells out must not be negative. (Their bounds against the storage
  // are checked on the built tensor, torch_file.cc.)
  absl::Status CheckTensorLayout(const Entry& args) {
    if (args.items == nullptr || args.items->size() < 4) return absl::OkStatus();  // LibTorch checks the arity.
    for (const auto& [index, what] : {std::pair<size_t, const char*>{2, "size"}, {3, "stride"}}) {
      const Entry& tuple = (*args.items)[index];
      bool integers = tuple.items != nullptr;
      for (size_t dim = 0; integers && dim < tuple.items->size(); ++dim) {
        integers = (*tuple.items)[dim].integer.has_value();
      }
      if (!integers) {
        return Error(absl::StrCat("a tensor's ", what, "s are not a tuple of at most ", kMaxTrackedTupleItems,
                                  " integers, as torch.save writes them"));
      }
      for (size_t dim = 0; dim < tuple.items->size(); ++dim) {
        const std::optional<int64_t>& value = (*tuple.items)[dim].integer;
        if (*value < 0) {
          return Error(absl::StrCat("a tensor's ", what, " ", dim, " is ", *value, "; a tensor's sizes and strides ",
                                    "are never negative (torch.save does not write such a tensor)"));
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status Call(char op) {
    std::vector<Entry> popped;
    if (absl::Status status = Pop(2, &popped); !status.ok()) return status;
    const Entry& callee = popped[0];
    const Entry& args = popped[1];
    if (absl::Status status = CheckNotClass(args); !status.ok()) return status;
    if (callee.kind == Kind::kDictClass) {
      // Python calls a dict class with no arguments and then sets the items.
      if (out_.size() != args.start + 1 || out_[args.start] != ')') {
        return Error(absl::StrCat(callee.name, " is called with arguments; only an empty call is read"));
      }
      out_.resize(args.start);
      stack_.push_back(Entry{callee.start, Kind::kDict, callee.name});
      return Nest(stack_.back(), 1);
    }
    if (callee.kind == Kind::kOtherClass) {
      out_.insert(args.start, "(" + Unicode(kPythonArgsKey));
      out_.append("u(");
      AppendUnicode(out_, kPythonClassKey);
      AppendUnicode(out_, callee.name);
      out_.push_back('u');
      stack_.push_back(Entry{callee.start, Kind::kObject, callee.name});
      return Nest(stack_.back(), args.depth + 1);
    }
    if (callee.kind != Kind::kValue) return Error("a dictionary is called");
    if (callee.name == "torch._utils._rebuild_tensor_v2") {
      if (absl::Status status = CheckTensorLayout(args); !status.ok()) return status;
    }
    out_.push_back(op);
    stack_.push_back(Entry{callee.start, Kind::kValue, ""});
    return Nest(stack_.back(), args.depth);  // What LibTorch builds from the arguments (a tensor: 0 would do).
  }

  absl::Status Step(char op) {
    absl::string_view arg;
    switch (op) {
      case '\x80':  // PROTO
        if (!Read(1, &arg)) return Error("truncated PROTO");
        if (arg[0] != 2) {
          return Error(absl::StrCat("pickle protocol ", static_cast<int>(static_cast<uint8_t>(arg[0])),
                                    "; torch.save writes protocol 2, the only one LibTorch reads"));
        }
        Emit(in_.substr(op_pos_, 2));
        return absl::OkStatus();
      case '.':  // STOP
        out_.push_back(op);
        return absl::OkStatus();
      case '(':  // MARK
        marks_.push_back(Mark{stack_.size(), out_.size()});
        out_.push_back(op);
        return absl::OkStatus();
      case 'N':     // NONE
      case '\x88':  // NEWTRUE
      case '\x89':  // NEWFALSE
        return PassValue(0);
      case ')':    // EMPTY_TUPLE
      case ']':    // EMPTY_LIST
      case '}': {  // EMPTY_DICT
        if (absl::Status status = PassValue(0); !status.ok()) return status;
        if (op == ')') stack_.back().items = std::make_shared<const std::vector<Entry>>();
        return Nest(stack_.back(), 1);
      }
      case 'K':  // BININT1
      case 'M':  // BININT2
      case 'J': {  // BININT (signed; the other two are unsigned)
        const size_t size = op == 'K' ? 1 : op == 'M' ? 2 : 4;
        if (absl::Status status = PassValue(size); !status.ok()) return status;
        const uint64_t bits = LittleEndian(in_.substr(op_pos_ + 1, size));
        stack_.back().integer =
            op == 'J' ? static_cast<int64_t>(static_cast<int32_t>(bits)) : static_cast<int64_t>(bits);
        return absl::OkStatus();
      }
      case 'G':  // BINFLOAT
        return PassValue(8);
      case 'X': {  // BINUNICODE
        if (!Read(4, &arg)) return Error("truncated BINUNICODE");
        const uint64_t size = LittleEndian(arg);
        pos_ -= 4;
        return PassValue(4 + size);
      }
      case '\x8a':    // LONG1
      case '\x8b': {  // LONG4
        const size_t size_bytes = op == '\x8a' ? 1 : 4;
        if (!Read(size_bytes, &arg)) return Error("truncated LONG");
        const uint64_t size = LittleEndian(arg);
        absl::string_view digits;
        if (!Read(size, &digits)) return Error("truncated LONG");
        // Two's complement, little-endian; what is past 8 bytes must only extend the sign.
        const bool negative = size > 0 && (static_cast<uint8_t>(digits[size - 1]) & 0x80) != 0;
        const char fill = negative ? '\xff' : '\0';
        for (size_t i = 8; i < size; ++i) {
          if (digits[i] != fill) return Error("an integer wider than 64 bits");
        }
        if (size > 8 && ((static_cast<uint8_t>(digits[7]) & 0x80) != 0) != negative) {
          return Error("an integer wider than 64 bits");
        }
        Push(Kind::kValue);
        out_.append("\x8a\x08", 2);
        for (size_t i = 0; i < 8; ++i) out_.push_back(i < size ? digits[i] : fill);
        stack_.back().integer = static_cast<int64_t>(LittleEndian(absl::string_view(out_).substr(out_.size() - 8)));
        return absl::OkStatus();
      }
      case 't':    // TUPLE
      case 'l':    // LIST
      case 'd': {  // DICT
        const size_t from = marks_.empty() ? 0 : marks_.back().stack_size;
        for (size_t i = from; i < stack_.size(); ++i) {
          if (absl::Status status = CheckNotClass(stack_[i]); !status.ok()) return status;
        }
        const int inner = Deepest(stack_, from);
        std::shared_ptr<const std::vector<Entry>> items;
        if (op == 't' && stack_.size() - from <= kMaxTrackedTupleItems) {
          items = std::make_shared<const std::vector<Entry>>(stack_.begin() + static_cast<std::ptrdiff_t>(from),
                                                             stack_.end());
        }
        size_t start = 0;
        if (absl::Status status = PopToMark(&start); !status.ok()) return status;
        stack_.push_back(Entry{start, Kind::kValue, ""});
        stack_.back().items = std::move(items);
        out_.push_back(op);
        return Nest(stack_.back(), inner + 1);
      }
      case '\x85':    // TUPLE1
      case '\x86':    // TUPLE2
      case '\x87': {  // TUPLE3
        const size_t n = static_cast<size_t>(static_cast<uint8_t>(op) - 0x84);
        std::vector<Entry> popped;
        if (absl::Status status = Pop(n, &popped); !status.ok()) return status;
        for (const Entry& entry : popped) {
          if (absl::Status status = CheckNotClass(entry); !status.ok()) return status;
        }
        stack_.push_back(Entry{popped[0].start, Kind::kValue, ""});
        stack_.back().items = std::make_shared<const std::vector<Entry>>(std::move(popped));
        out_.push_back(op);
        return Nest(stack_.back(), Deepest(*stack_.back().items) + 1);
      }
      case 'a': {  // APPEND: LibTorch reads only APPENDS, so the element gets a MARK in front of it.
        std::vector<Entry> popped;
        if (absl::Status status = Pop(1, &popped); !status.ok()) return status;
        if (absl::Status status = CheckNotClass(popped[0]); !status.ok()) return status;
        if (stack_.empty()) return Error("APPEND with no list");
        out_.insert(popped[0].start, 1, '(');
        out_.push_back('e');
        return Nest(stack_.back(), popped[0].depth + 1);
      }
      case 'e':  // APPENDS
      case 'u':  // SETITEMS
      {
        const size_t from = marks_.empty() ? 0 : marks_.back().stack_size;
        for (size_t i = from; i < stack_.size(); ++i) {
          if (absl::Status status = CheckNotClass(stack_[i]); !status.ok()) return status;
        }
        const int inner = Deepest(stack_, from);
        if (absl::Status status = PopToMark(nullptr); !status.ok()) return status;
        if (stack_.empty()) return Error("APPENDS or SETITEMS with no container");
        out_.push_back(op);
        return Nest(stack_.back(), inner + 1);
      }
      case 's': {  // SETITEM: LibTorch 1.13 reads only SETITEMS, so the key gets a MARK in front of it.
        std::vector<Entry> popped;
        if (absl::Status status = Pop(2, &popped); !status.ok()) return status;
        for (const Entry& entry : popped) {
          if (absl::Status status = CheckNotClass(entry); !status.ok()) return status;
        }
        if (stack_.empty()) return Error("SETITEM with no dictionary");
        out_.insert(popped[0].start, 1, '(');
        out_.push_back('u');
        return Nest(stack_.back(), Deepest(popped) + 1);
      }
      case 'q':  // BINPUT
        if (!Read(1, &arg)) return Error("truncated BINPUT");
        return MemoPut(static_cast<uint32_t>(LittleEndian(arg)));
      case 'r':  // LONG_BINPUT
        if (!Read(4, &arg)) return Error("truncated LONG_BINPUT");
        return MemoPut(static_cast<uint32_t>(LittleEndian(arg)));
      case 'h':  // BINGET
        if (!Read(1, &arg)) return Error("truncated BINGET");
        return MemoGet(static_cast<uint32_t>(LittleEndian(arg)));
      case 'j':  // LONG_BINGET
        if (!Read(4, &arg)) return Error("truncated LONG_BINGET");
        return MemoGet(static_cast<uint32_t>(LittleEndian(arg)));
      case 'c': {  // GLOBAL
        std::string module;
        std::string name;
        if (!ReadLine(&module) || !ReadLine(&name)) return Error("truncated GLOBAL");
        // _rebuild_from_type_v2 has LibTorch read the next two globals (the rebuild function and the tensor's
        // class) in its own way: they pass through untouched.
        if (raw_globals_ > 0 || LibTorchReads(module, name)) {
          if (raw_globals_ > 0) --raw_globals_;
          if (module == "torch._tensor" && name == "_rebuild_from_type_v2") raw_globals_ = 2;
          Push(Kind::kValue, absl::StrCat(module, ".", name));
          Emit(in_.substr(op_pos_, pos_ - op_pos_));
          return absl::OkStatus();
        }
        Push(IsDictClass(module, name) ? Kind::kDictClass : Kind::kOtherClass, absl::StrCat(module, ".", name));
        out_.push_back('}');
        return absl::OkStatus();
      }
      case 'R':     // REDUCE
      case '\x81':  // NEWOBJ
        return Call(op);
      case 'b': {  // BUILD: the object's attributes.
        std::vector<Entry> popped;
        if (absl::Status status = Pop(1, &popped); !status.ok()) return status;
        if (absl::Status status = CheckNotClass(popped[0]); !status.ok()) return status;
        if (stack_.empty()) return Error("BUILD with no object");
        const Kind kind = stack_.back().kind;
        if (kind == Kind::kDict || kind == Kind::kObject) {
          out_.insert(popped[0].start, "(" + Unicode(kind == Kind::kDict ? kDictStateKey : kPythonStateKey));
          out_.push_back('u');
          return Nest(stack_.back(), popped[0].depth + 1);
        }
        out_.push_back(op);
        return Nest(stack_.back(), popped[0].depth + 1);
      }
      case 'Q': {  // BINPERSID: a tensor's storage.
        std::vector<Entry> popped;
        if (absl::Status status = Pop(1, &popped); !status.ok()) return status;
        // ('storage', class, key, location, element count): LibTorch takes a negative count for a symbolic size and
        // fails with its own internals' words, so it is refused here, saying what it is.
        if (popped[0].items != nullptr && popped[0].items->size() == 5) {
          const std::optional<int64_t>& count = (*popped[0].items)[4].integer;
          if (count.has_value() && *count < 0) {
            return Error(absl::StrCat("a storage's element count is ", *count, "; it is never negative"));
          }
        }
        stack_.push_back(Entry{popped[0].start, Kind::kValue, ""});
        out_.push_back(op);
        return absl::OkStatus();  // A storage: no container.
      }
      default:
        return Error(absl::StrCat("opcode 0x", absl::Hex(static_cast<uint8_t>(op)), " ('", std::string(1, op),
                                  "'), which LibTorch does not read and torch.save "
                                  "does not write"));
    }
  }

  absl::string_view in_;
  size_t pos_ = 0;
  size_t op_pos_ = 0;
  std::string out_;
  std::vector<Entry> stack_;
  std::vector<Mark> marks_;
  std::map<uint32_t, Entry> classes_;  // Memo entries that hold a class.
  // What each memo slot of the input holds, as far as the rewrite tracks it.
  struct MemoEntry {
    uint32_t slot = 0;  // Its slot in the output (LibTorch's numbering).
    int depth = 0;      // Its nesting depth, as last known (a container stored and then filled).
    std::optional<int64_t> integer;
    std::shared_ptr<const std::vector<Entry>> items;
    std::string name;
  };
  std::map<uint32_t, MemoEntry> memo_;
  size_t stored_ = 0;  // PUTs written to the output so far.
  int raw_globals_ = 0;
};

}  // namespace

absl::StatusOr<std::string> RewritePythonPickle(absl::string_view pickle) { return Rewriter(pickle).Run(); }

}  // namespace kiln
