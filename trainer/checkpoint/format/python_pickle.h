// Python's pickles, as torch.save writes them, rewritten into the subset LibTorch's unpickler reads.
//
// torch.save (and so Lightning) pickles with protocol 2. LibTorch's unpickler (torch::jit::Unpickler, in 1.13 and in
// 2.x) reads most of that, but not all of what Python writes for a checkpoint:
//   - `collections.OrderedDict` (what every state_dict is) becomes None, so the items that follow fail to load;
//   - BUILD, which sets an object's attributes (a state_dict's `_metadata`), is taken for a call;
//   - APPEND and SETITEM (a list or dictionary of one element) are unknown to LibTorch 1.13;
//   - LONG1 is read only with 8 bytes, while Python writes as few as the number needs;
//   - any other class (Lightning's AttributeDict, an argparse.Namespace in the hyper-parameters) is an error.
// RewritePythonPickle turns each of these into what LibTorch reads, without running anything:
//   - an OrderedDict, or one of the dict classes below, becomes a plain dictionary (its items kept, in order);
//   - an object of another class becomes a dictionary {kPythonClassKey: "module.Class", kPythonArgsKey: <its
//     constructor's arguments>}, plus kPythonStateKey: <its attributes> when it has them;
//   - a dictionary's own attributes (a state_dict's `_metadata`) go under kDictStateKey, for the caller to drop
//     (StripDictState in torch_file.h);
//   - APPEND becomes MARK ... APPENDS, SETITEM MARK ... SETITEMS, and LONG1 is widened to 8 bytes.
// Everything else passes through unchanged.
//
// Thread-safety: a pure function. Never throws.
#ifndef KILN_TRAINER_CHECKPOINT_FORMAT_PYTHON_PICKLE_H_
#define KILN_TRAINER_CHECKPOINT_FORMAT_PYTHON_PICKLE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln {

inline constexpr char kPythonClassKey[] = "__python_class__";
inline constexpr char kPythonArgsKey[] = "__python_args__";
inline constexpr char kPythonStateKey[] = "__python_state__";
inline constexpr char kDictStateKey[] = "__kiln_dict_state__";

// The rewritten pickle, or InvalidArgument naming the byte offset and what is wrong: an opcode LibTorch cannot read
// and this cannot rewrite (protocols above 2, text-mode memo opcodes, an integer past 64 bits), or a stream that is
// not a well-formed pickle (truncated, a stack or mark underflow), or containers nested more than 100 deep.
absl::StatusOr<std::string> RewritePythonPickle(absl::string_view pickle);

}  // namespace kiln

#endif  // KILN_TRAINER_CHECKPOINT_FORMAT_PYTHON_PICKLE_H_
