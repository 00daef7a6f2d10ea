// The pickle of a torch.save file (its data.pkl), written by Kiln: protocol 2, the opcodes Python's pickle and
// LibTorch's unpickler both read, tensors as torch.save writes them (torch._utils._rebuild_tensor_v2 over a
// persistent-id storage, one data/<n> record per storage).
//
// Why Kiln writes its own (measured, issue #41): a checkpoint of the tiny MLP every 10 steps cost +7.8% of the
// training's instructions, counting the writer's thread, and LibTorch's pickler (torch::jit::Pickler) was about a
// third of the writer's share: it memoises every string by value (a hash and a map insertion per key), every
// container held more than once by pointer, and writes a typed list (c10::List<int64_t>) as a TorchScript-only call
// that a checkpoint must first rebuild as a plain list (a walk of the whole value). This writer appends opcodes to one
// buffer: no string memo (a key written twice is written twice; the file is a little larger, never different in
// what it reads as), any list as a plain Python list, storages memoised by identity (two tensors of one storage stay
// one storage), and the few globals once each. It also takes a value piece by piece (Begin/End and the scalar
// calls), so that a fixed layout can be written straight from its fields, without a dictionary made to be pickled
// and destroyed (checkpoint_connector.cc writes Lightning's loops that way).
//
// What readers see: Python's torch.load (weights_only=True as well: only torch._utils._rebuild_tensor_v2,
// torch.<Type>Storage, collections.OrderedDict and torch.device are named) and Lightning read it; Kiln reads it through
// python_pickle.h and LibTorch's unpickler. The same calls always write the same bytes.
//
// Thread-safety: none; one writer per pickle.
#ifndef KILN_TRAINER_CHECKPOINT_FORMAT_PICKLE_WRITER_H_
#define KILN_TRAINER_CHECKPOINT_FORMAT_PICKLE_WRITER_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ATen/core/Tensor.h"
#include "ATen/core/ivalue.h"
#include "absl/container/flat_hash_map.h"

namespace kiln {

class PickleWriter {
  // Python's pickle opcodes (Lib/pickletools.py), those protocol 2 needs.
  enum Opcode : uint8_t {
    kMark = '(',
    kStop = '.',
    kBinFloat = 'G',
    kBinInt = 'J',
    kBinInt1 = 'K',
    kBinInt2 = 'M',
    kNone = 'N',
    kBinPersId = 'Q',
    kReduce = 'R',
    kBinUnicode = 'X',
    kEmptyList = ']',
    kAppends = 'e',
    kGlobal = 'c',
    kBinGet = 'h',
    kLongBinGet = 'j',
    kBinPut = 'q',
    kLongBinPut = 'r',
    kSetItems = 'u',
    kTuple = 't',
    kEmptyTuple = ')',
    kEmptyDict = '}',
    kProto = 0x80,
    kTuple1 = 0x85,
    kTuple2 = 0x86,
    kNewTrue = 0x88,
    kNewFalse = 0x89,
    kLong1 = 0x8a,
  };

 public:
  // Values nest at most this deep (Value throws past it: a value that holds itself would never end).
  static constexpr int kMaxDepth = 64;

  PickleWriter();  // Starts the pickle (protocol 2).

  void None() { Op(kNone); }
  void Bool(bool value) { Op(value ? kNewTrue : kNewFalse); }
  void Int(int64_t value);
  void Double(double value);
  // BINUNICODE: its length, then its UTF-8 bytes (inline: a checkpoint writes some hundreds of keys).
  void String(std::string_view text) {
    if (text.size() > 0xffffffffu) TooLong(text.size());
    const uint32_t n = static_cast<uint32_t>(text.size());
    if (capacity_ - size_ < 5 + text.size()) Grow(5 + text.size());
    char* at = buffer_.get() + size_;
    at[0] = static_cast<char>(kBinUnicode);
    std::memcpy(at + 1, &n, sizeof(n));  // Little-endian, as the machines Kiln builds for.
    std::memcpy(at + 5, text.data(), text.size());
    size_ += 5 + text.size();
  }
  // torch.save's form of a dense tensor: its storage (the whole of it) is recorded once, in tensors(), however many
  // tensors share it. Throws c10::Error for a tensor that is not dense (sparse, quantized, nested, no storage).
  void Tensor(const at::Tensor& tensor);
  // Any value a checkpoint holds: None, booleans, integers, floats, complex numbers, strings, devices, tensors, and
  // lists, dictionaries (keys of those types too) and tuples of them; typed containers are written as plain Python
  // ones. Throws c10::Error for anything else (an object of a TorchScript class, a future) or for containers
  // nested more than kMaxDepth deep, naming what it found.
  void Value(const c10::IValue& value);

  // A dictionary's items go between BeginDict and EndDict as key, value, key, value; a list's or tuple's items
  // between their Begin and End. Every Begin needs its End before Finish. An empty container is written as Python
  // writes it (one opcode), so that Value of a dictionary and the same dictionary written piece by piece are the same
  // bytes. The sizes are hints that a pickle does not need (ValueBuilder, snapshot_dict.h, reserves them).
  void BeginDict(size_t size_hint = 0);
  void EndDict();
  void BeginList(size_t size_hint = 0);
  void EndList();
  void BeginTuple();
  void EndTuple();
  // Shorthand for a dictionary item whose key is text.
  void Key(std::string_view key) { String(key); }

  // Ends the pickle and hands its bytes over. Nothing may be written after; tensors() stays.
  std::string Finish();
  // One tensor per storage written, in the order of their records (data/0, data/1, ...): each record holds the whole
  // of that tensor's storage.
  const std::vector<at::Tensor>& tensors() const { return tensors_; }

 private:
  void Op(uint8_t opcode) {
    if (size_ == capacity_) Grow(1);
    buffer_[size_++] = static_cast<char>(opcode);
  }
  void Bytes(const void* data, size_t size) {
    if (capacity_ - size_ < size) Grow(size);
    std::memcpy(buffer_.get() + size_, data, size);
    size_ += size;
  }
  void Grow(size_t more);
  [[noreturn]] static void TooLong(size_t size);
  void Begin();                      // Records where an opened container's items start.
  bool EndEmpty();                   // Whether the container just closed holds nothing (its mark is then dropped).
  // The global "module\nname\n", memoised: its memo index is kept in `memo` (0: not written yet; else the index +
  // 1), one member per global, so that none is looked up by its text.
  void Global(std::string_view module_and_name, uint32_t& memo);
  void Get(uint32_t memo);
  uint32_t Put();  // Memoises the value on top of the stack; returns its memo index.
  void ValueAt(const c10::IValue& value, int depth);

  // The pickle so far: a buffer of its own rather than a std::string, whose every append is a call into libstdc++.
  std::unique_ptr<char[]> buffer_;
  size_t size_ = 0;
  size_t capacity_ = 0;
  std::vector<size_t> open_;  // Where each open container's items start.
  std::vector<at::Tensor> tensors_;
  absl::flat_hash_map<const void*, uint32_t> storages_;  // Storage -> memo index of its persistent id.
  uint32_t rebuild_tensor_ = 0;          // torch._utils._rebuild_tensor_v2, as Global keeps it.
  uint32_t ordered_dict_ = 0;            // collections.OrderedDict.
  uint32_t complex_ = 0;                 // builtins.complex.
  uint32_t device_ = 0;                  // torch.device.
  std::vector<uint32_t> storage_types_;  // torch.<Type>Storage, by scalar type.
  uint32_t memo_ = 0;
};

}  // namespace kiln

#endif  // KILN_TRAINER_CHECKPOINT_FORMAT_PICKLE_WRITER_H_
