#include "trainer/checkpoint/lightning/optimizer_state_dict.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ATen/EmptyTensor.h"
#include "absl/strings/str_cat.h"
#include "hal/compat/optimizer_state.h"
#include "torch/optim/adagrad.h"
#include "torch/optim/adam.h"
#include "torch/optim/adamw.h"
#include "torch/optim/rmsprop.h"
#include "torch/optim/sgd.h"
#include "torch/serialize/input-archive.h"
#include "torch/serialize/output-archive.h"
#include "trainer/checkpoint/format/snapshot_dict.h"

namespace kiln {
namespace {

using c10::IValue;
using c10::impl::GenericDict;
using torch::optim::OptimizerOptions;
using torch::optim::OptimizerParamState;

constexpr char kArchiveKey[] = "kiln_libtorch_archive";

enum class Kind { kSgd, kAdam, kAdamW, kRmsprop, kAdagrad, kOther };

Kind KindOf(const torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer) != nullptr) return Kind::kSgd;
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer) != nullptr) return Kind::kAdamW;
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer) != nullptr) return Kind::kAdam;
  if (dynamic_cast<const torch::optim::RMSprop*>(&optimizer) != nullptr) return Kind::kRmsprop;
  if (dynamic_cast<const torch::optim::Adagrad*>(&optimizer) != nullptr) return Kind::kAdagrad;
  return Kind::kOther;
}

// The keys of the state dicts Kiln writes, made once (snapshot_dict.h).
struct SavedKeys {
  DictKey state{"state"}, param_groups{"param_groups"}, params{"params"}, archive{kArchiveKey};
  DictKey step{"step"}, exp_avg{"exp_avg"}, exp_avg_sq{"exp_avg_sq"}, max_exp_avg_sq{"max_exp_avg_sq"};
  DictKey momentum_buffer{"momentum_buffer"}, square_avg{"square_avg"}, grad_avg{"grad_avg"}, sum{"sum"};
  DictKey lr{"lr"}, momentum{"momentum"}, dampening{"dampening"}, weight_decay{"weight_decay"}, nesterov{"nesterov"};
  DictKey betas{"betas"}, eps{"eps"}, amsgrad{"amsgrad"}, alpha{"alpha"}, centered{"centered"};
  DictKey lr_decay{"lr_decay"}, initial_accumulator_value{"initial_accumulator_value"};
  DictKey maximize{"maximize"}, foreach{"foreach"}, differentiable{"differentiable"}, capturable{"capturable"};
  DictKey fused{"fused"};
};

const SavedKeys& Keys() {
  static const SavedKeys* const keys = new SavedKeys();  // Never destroyed, as interned keys are not.
  return *keys;
}

// PyTorch keeps `step` as a float32 tensor (so Lightning and torch.optim read it as their own); past 2^24, where
// float32 no longer holds every whole number, as float64, which PyTorch's optimizers read as well.
IValue Step(int64_t step) {
  constexpr int64_t kFloat32Exact = int64_t{1} << 24;
  return at::scalar_tensor(static_cast<double>(step), step <= kFloat32Exact ? at::kFloat : at::kDouble);
}

// PyTorch's names for the options LibTorch has no counterpart of, with the values that mean "as LibTorch does".
template <typename Sink>
void WritePyTorchOnly(Sink& out, const SavedKeys& keys, Kind kind) {
  Item(out, keys.maximize, false);
  Item(out, keys.foreach, IValue());
  Item(out, keys.differentiable, false);
  if (kind != Kind::kSgd && kind != Kind::kAdagrad) Item(out, keys.capturable, false);
  if (kind != Kind::kRmsprop) Item(out, keys.fused, IValue());
}

// Adam and AdamW hold the same options and state under the same names; only LibTorch's types differ.
template <typename Options, typename Sink>
void WriteAdamOptions(Sink& out, const SavedKeys& keys, const OptimizerOptions& options) {
  const auto& o = static_cast<const Options&>(options);
  Item(out, keys.lr, o.lr());
  WriteKey(out, keys.betas);
  out.BeginTuple();
  out.Double(std::get<0>(o.betas()));
  out.Double(std::get<1>(o.betas()));
  out.EndTuple();
  Item(out, keys.eps, o.eps());
  Item(out, keys.weight_decay, o.weight_decay());
  Item(out, keys.amsgrad, o.amsgrad());
}

// A group's options in PyTorch's names, as items of the dictionary the caller has begun (its "params" follow).
template <typename Sink>
void WriteGroupOptions(Sink& out, const SavedKeys& keys, Kind kind, const OptimizerOptions& options) {
  switch (kind) {
    case Kind::kSgd: {
      const auto& o = static_cast<const torch::optim::SGDOptions&>(options);
      Item(out, keys.lr, o.lr());
      Item(out, keys.momentum, o.momentum());
      Item(out, keys.dampening, o.dampening());
      Item(out, keys.weight_decay, o.weight_decay());
      Item(out, keys.nesterov, o.nesterov());
      break;
    }
    case Kind::kAdam:
      WriteAdamOptions<torch::optim::AdamOptions>(out, keys, options);
      break;
    case Kind::kAdamW:
      WriteAdamOptions<torch::optim::AdamWOptions>(out, keys, options);
      break;
    case Kind::kRmsprop: {
      const auto& o = static_cast<const torch::optim::RMSpropOptions&>(options);
      Item(out, keys.lr, o.lr());
      Item(out, keys.alpha, o.alpha());
      Item(out, keys.eps, o.eps());
      Item(out, keys.weight_decay, o.weight_decay());
      Item(out, keys.momentum, o.momentum());
      Item(out, keys.centered, o.centered());
      break;
    }
    case Kind::kAdagrad: {
      const auto& o = static_cast<const torch::optim::AdagradOptions&>(options);
      Item(out, keys.lr, o.lr());
      Item(out, keys.lr_decay, o.lr_decay());
      Item(out, keys.weight_decay, o.weight_decay());
      Item(out, keys.initial_accumulator_value, o.initial_accumulator_value());
      Item(out, keys.eps, o.eps());
      break;
    }
    case Kind::kOther:  // Not called: only "lr" is known (TakeOptimizerState).
      return;
  }
  WritePyTorchOnly(out, keys, kind);
}

// A copy of a group's options of LibTorch's type `Options` (its fields are plain values).
template <typename Options>
std::unique_ptr<OptimizerOptions> CopyOptions(const OptimizerOptions& options) {
  return std::make_unique<Options>(static_cast<const Options&>(options));
}

}  // namespace

struct TakenOptimizerState::Contents {
  Kind kind = Kind::kOther;
  struct Group {
    std::unique_ptr<OptimizerOptions> options;  // A copy; null for an optimizer of another kind.
    double lr = 0;                              // That optimizer's learning rate.
    int64_t params = 0;                         // Numbered on from the previous group's.
  };
  std::vector<Group> groups;
  // A parameter's state, under its number: "step" first, where the optimizer keeps one, then its tensors (copies),
  // in PyTorch's order.
  struct Param {
    int64_t index = 0;
    bool has_step = false;
    int64_t step = 0;
    std::vector<std::pair<const DictKey*, at::Tensor>> tensors;
  };
  std::vector<Param> state;
  at::Tensor archive;  // An optimizer of another kind: LibTorch's serialisation of it.
  size_t tensor_bytes = 0;
};

size_t TakenOptimizerState::tensor_bytes() const { return contents_->tensor_bytes; }

namespace {

using Contents = TakenOptimizerState::Contents;

class StateTaker {
 public:
  explicit StateTaker(Contents& contents) : contents_(contents), keys_(Keys()) {}

  // Copies `state` of the parameter numbered `index` into the contents.
  void Take(int64_t index, const OptimizerParamState& state) {
    Contents::Param& param = contents_.state.emplace_back();
    param.index = index;
    param_ = &param;
    switch (contents_.kind) {
      case Kind::kSgd:
        Tensor(keys_.momentum_buffer, static_cast<const torch::optim::SGDParamState&>(state).momentum_buffer());
        break;
      case Kind::kAdam:
        Adam<torch::optim::AdamParamState>(state);
        break;
      case Kind::kAdamW:
        Adam<torch::optim::AdamWParamState>(state);
        break;
      case Kind::kRmsprop: {
        const auto& s = static_cast<const torch::optim::RMSpropParamState&>(state);
        StepCount(s.step());
        Tensor(keys_.square_avg, s.square_avg());
        Tensor(keys_.momentum_buffer, s.momentum_buffer());
        Tensor(keys_.grad_avg, s.grad_avg());
        break;
      }
      case Kind::kAdagrad: {
        const auto& s = static_cast<const torch::optim::AdagradParamState&>(state);
        StepCount(s.step());
        Tensor(keys_.sum, s.sum());
        break;
      }
      case Kind::kOther:
        break;
    }
  }

 private:
  template <typename State>
  void Adam(const OptimizerParamState& state) {
    const auto& s = static_cast<const State&>(state);
    StepCount(s.step());
    Tensor(keys_.exp_avg, s.exp_avg());
    Tensor(keys_.exp_avg_sq, s.exp_avg_sq());
    Tensor(keys_.max_exp_avg_sq, s.max_exp_avg_sq());
  }
  void StepCount(int64_t step) {
    param_->has_step = true;
    param_->step = step;
  }
  void Tensor(const DictKey& key, const at::Tensor& tensor) {
    if (!tensor.defined()) return;
    at::Tensor copy = SnapshotTensor(tensor);
    contents_.tensor_bytes += copy.nbytes();
    param_->tensors.emplace_back(&key, std::move(copy));
  }

  Contents& contents_;
  const SavedKeys& keys_;
  Contents::Param* param_ = nullptr;
};

// Reading: every accessor throws c10::Error naming `where` and the key.
class Reader {
 public:
  Reader(const IValue& value, std::string where) : where_(std::move(where)) {
    TORCH_CHECK(value.isGenericDict(), where_, " is a ", value.tagKind(), ", not a dictionary");
    dict_ = value.toGenericDict();
  }

  bool Has(const char* key) const {
    auto found = dict_.find(IValue(std::string(key)));
    return found != dict_.end() && !found->value().isNone();
  }
  const IValue& Get(const char* key) const {
    auto found = dict_.find(IValue(std::string(key)));
    TORCH_CHECK(found != dict_.end(), where_, " has no '", key, "'");
    return found->value();
  }
  double Number(const char* key) const {
    const IValue& value = Get(key);
    TORCH_CHECK(value.isDouble() || value.isInt(), where_, ": '", key, "' is a ", value.tagKind(), ", not a number");
    return value.isDouble() ? value.toDouble() : static_cast<double>(value.toInt());
  }
  bool Bool(const char* key) const {
    const IValue& value = Get(key);
    TORCH_CHECK(value.isBool(), where_, ": '", key, "' is a ", value.tagKind(), ", not True or False");
    return value.toBool();
  }
  // Options with no LibTorch counterpart must not ask for what LibTorch does not do.
  void ExpectFalse(const char* key) const {
    auto found = dict_.find(IValue(std::string(key)));
    if (found == dict_.end() || found->value().isNone()) return;
    TORCH_CHECK(found->value().isBool() && !found->value().toBool(), where_, ": '", key, "' is ", found->value(),
                ", which LibTorch's optimizers do not support; only False is read");
  }
  int64_t StepCount() const {
    const IValue& value = Get("step");
    double step = 0;
    if (value.isTensor()) {
      TORCH_CHECK(value.toTensor().numel() == 1, where_, ": 'step' has ", value.toTensor().numel(), " elements");
      step = value.toTensor().to(at::kDouble).item<double>();
    } else {
      step = Number("step");
    }
    TORCH_CHECK(std::isfinite(step) && step >= 0 && step == std::floor(step) && step < 9.007199254740992e15, where_,
                ": 'step' is ", step, ", not a whole number of steps");
    return static_cast<int64_t>(step);
  }
  // A state tensor, shaped like its parameter, on the parameter's device and in its type.
  at::Tensor Tensor(const char* key, const at::Tensor& param) const {
    if (!Has(key)) return at::Tensor();
    const IValue& value = Get(key);
    TORCH_CHECK(value.isTensor(), where_, ": '", key, "' is a ", value.tagKind(), ", not a tensor");
    const at::Tensor& tensor = value.toTensor();
    TORCH_CHECK(tensor.sizes() == param.sizes(), where_, ": '", key, "' has shape ", tensor.sizes(),
                " but its parameter has ", param.sizes());
    return tensor.to(param.device(), param.scalar_type()).clone();
  }
  at::Tensor RequiredTensor(const char* key, const at::Tensor& param) const {
    at::Tensor tensor = Tensor(key, param);
    TORCH_CHECK(tensor.defined(), where_, " has no '", key, "'");
    return tensor;
  }
  const std::string& where() const { return where_; }
  const GenericDict& dict() const { return dict_; }

 private:
  std::string where_;
  GenericDict dict_ = NewDict();
};

template <typename Options>
void ReadAdamOptions(OptimizerOptions& options, const Reader& group, const std::tuple<double, double>& betas) {
  auto& o = static_cast<Options&>(options);
  o.lr(group.Number("lr")).betas(betas).eps(group.Number("eps")).weight_decay(group.Number("weight_decay"));
  o.amsgrad(group.Bool("amsgrad"));
}

template <typename State>
std::unique_ptr<OptimizerParamState> ReadAdamState(const Reader& state, const at::Tensor& param) {
  auto out = std::make_unique<State>();
  out->step(state.StepCount());
  out->exp_avg(state.RequiredTensor("exp_avg", param));
  out->exp_avg_sq(state.RequiredTensor("exp_avg_sq", param));
  out->max_exp_avg_sq(state.Tensor("max_exp_avg_sq", param));
  return out;
}

std::unique_ptr<OptimizerOptions> ReadOptions(Kind kind, const OptimizerOptions& current, const Reader& group) {
  std::unique_ptr<OptimizerOptions> options = current.clone();
  group.ExpectFalse("maximize");
  switch (kind) {
    case Kind::kSgd: {
      auto& o = static_cast<torch::optim::SGDOptions&>(*options);
      o.lr(group.Number("lr")).momentum(group.Number("momentum")).dampening(group.Number("dampening"));
      o.weight_decay(group.Number("weight_decay")).nesterov(group.Bool("nesterov"));
      break;
    }
    case Kind::kAdam:
    case Kind::kAdamW: {
      const IValue& betas = group.Get("betas");
      TORCH_CHECK((betas.isTuple() && betas.toTupleRef().elements().size() == 2) ||
                      (betas.isList() && betas.toListRef().size() == 2),
                  group.where(), ": 'betas' is not a pair");
      const auto& pair = betas.isTuple() ? betas.toTupleRef().elements().vec() : betas.toListRef().vec();
      TORCH_CHECK((pair[0].isDouble() || pair[0].isInt()) && (pair[1].isDouble() || pair[1].isInt()), group.where(),
                  ": 'betas' holds something other than numbers");
      const auto number = [](const IValue& v) { return v.isDouble() ? v.toDouble() : static_cast<double>(v.toInt()); };
      const std::tuple<double, double> values{number(pair[0]), number(pair[1])};
      if (kind == Kind::kAdam) {
        ReadAdamOptions<torch::optim::AdamOptions>(*options, group, values);
      } else {
        ReadAdamOptions<torch::optim::AdamWOptions>(*options, group, values);
      }
      // PyTorch 2.x's Adam can decay weights as AdamW does; LibTorch's Adam cannot.
      group.ExpectFalse("decoupled_weight_decay");
      break;
    }
    case Kind::kRmsprop: {
      auto& o = static_cast<torch::optim::RMSpropOptions&>(*options);
      o.lr(group.Number("lr")).alpha(group.Number("alpha")).eps(group.Number("eps"));
      o.weight_decay(group.Number("weight_decay")).momentum(group.Number("momentum")).centered(group.Bool("centered"));
      break;
    }
    case Kind::kAdagrad: {
      auto& o = static_cast<torch::optim::AdagradOptions&>(*options);
      o.lr(group.Number("lr")).lr_decay(group.Number("lr_decay")).weight_decay(group.Number("weight_decay"));
      o.initial_accumulator_value(group.Number("initial_accumulator_value")).eps(group.Number("eps"));
      break;
    }
    case Kind::kOther:
      break;
  }
  return options;
}

// Null when the saved state says the parameter has none yet.
std::unique_ptr<OptimizerParamState> ReadState(Kind kind, const Reader& state, const at::Tensor& param) {
  switch (kind) {
    case Kind::kSgd: {
      at::Tensor buffer = state.Tensor("momentum_buffer", param);
      if (!buffer.defined()) return nullptr;
      auto out = std::make_unique<torch::optim::SGDParamState>();
      out->momentum_buffer(buffer);
      return out;
    }
    case Kind::kAdam:
      return ReadAdamState<torch::optim::AdamParamState>(state, param);
    case Kind::kAdamW:
      return ReadAdamState<torch::optim::AdamWParamState>(state, param);
    case Kind::kRmsprop: {
      auto out = std::make_unique<torch::optim::RMSpropParamState>();
      out->step(state.StepCount());
      out->square_avg(state.RequiredTensor("square_avg", param));
      out->momentum_buffer(state.Tensor("momentum_buffer", param));
      out->grad_avg(state.Tensor("grad_avg", param));
      return out;
    }
    case Kind::kAdagrad: {
      auto out = std::make_unique<torch::optim::AdagradParamState>();
      out->step(state.StepCount());
      out->sum(state.RequiredTensor("sum", param));
      return out;
    }
    case Kind::kOther:
      return nullptr;
  }
  return nullptr;
}

int64_t IndexOf(const IValue& value, const std::string& where) {
  TORCH_CHECK(value.isInt(), where, " holds a ", value.tagKind(), " where a parameter index was expected");
  return value.toInt();
}

}  // namespace

at::Tensor SnapshotTensor(const at::Tensor& tensor) {
  // A dense CPU tensor: a new one and a memcpy, made without the dispatcher (detach, to and clone are most of a
  // small model's snapshot). The copy is what clone() gives: the same values, sizes, strides (contiguous) and type,
  // no autograd history, storage of its own.
  if (tensor.defined() && tensor.device().is_cpu() && tensor.layout() == at::kStrided && !tensor.is_quantized() &&
      !tensor.is_conj() && !tensor.is_neg() && !tensor.has_names() && tensor.is_contiguous()) {
    at::Tensor copy = at::detail::empty_cpu(tensor.sizes(), tensor.scalar_type());
    if (tensor.numel() > 0) std::memcpy(copy.data_ptr(), tensor.data_ptr(), tensor.nbytes());
    return copy;
  }
  const at::Tensor detached = tensor.detach();
  at::Tensor cpu = detached.to(at::kCPU);
  // to() returns the tensor itself when it is on the CPU already; a copy from another device is the writer's own.
  return cpu.is_same(detached) ? cpu.clone() : cpu;
}

absl::StatusOr<TakenOptimizerState> TakeOptimizerState(const torch::optim::Optimizer& optimizer) {
  try {
    auto contents = std::make_shared<Contents>();
    contents->kind = KindOf(optimizer);
    const Kind kind = contents->kind;
    StateTaker taker(*contents);
    int64_t index = 0;
    contents->groups.reserve(optimizer.param_groups().size());
    for (const torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) {
      Contents::Group& taken = contents->groups.emplace_back();
      const OptimizerOptions& options = group.options();
      switch (kind) {
        case Kind::kSgd:
          taken.options = CopyOptions<torch::optim::SGDOptions>(options);
          break;
        case Kind::kAdam:
          taken.options = CopyOptions<torch::optim::AdamOptions>(options);
          break;
        case Kind::kAdamW:
          taken.options = CopyOptions<torch::optim::AdamWOptions>(options);
          break;
        case Kind::kRmsprop:
          taken.options = CopyOptions<torch::optim::RMSpropOptions>(options);
          break;
        case Kind::kAdagrad:
          taken.options = CopyOptions<torch::optim::AdagradOptions>(options);
          break;
        case Kind::kOther:
          taken.lr = options.get_lr();
          break;
      }
      for (const at::Tensor& param : group.params()) {
        if (kind != Kind::kOther) {
          if (const OptimizerParamState* saved = compat::StateOf(optimizer, param)) taker.Take(index, *saved);
        }
        ++index;
        ++taken.params;
      }
    }
    if (kind == Kind::kOther) {
      torch::serialize::OutputArchive archive;
      optimizer.save(archive);
      std::string bytes;
      archive.save_to([&bytes](const void* data, size_t size) -> size_t {
        bytes.append(static_cast<const char*>(data), size);
        return size;
      });
      contents->archive = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
      std::memcpy(contents->archive.data_ptr(), bytes.data(), bytes.size());
      contents->tensor_bytes += bytes.size();
    }
    return TakenOptimizerState(std::move(contents));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("cannot save the optimizer's state: ", e.what_without_backtrace()));
  }
}

namespace {

// The state dict of what was taken (optimizer_state_dict.h), into either sink. Throws c10::Error.
template <typename Sink>
void WriteOptimizerState(Sink& out, const TakenOptimizerState& taken) {
  const Contents& contents = taken.contents();
  const SavedKeys& keys = Keys();
  out.BeginDict(/*capacity=*/3);
  WriteKey(out, keys.state);
  out.BeginDict(contents.state.size());
  for (const Contents::Param& param : contents.state) {
    out.Int(param.index);
    out.BeginDict(param.tensors.size() + (param.has_step ? 1 : 0));
    if (param.has_step) Item(out, keys.step, Step(param.step));
    for (const auto& [key, tensor] : param.tensors) {
      WriteKey(out, *key);
      out.Tensor(tensor);
    }
    out.EndDict();
  }
  out.EndDict();
  WriteKey(out, keys.param_groups);
  out.BeginList(contents.groups.size());
  int64_t index = 0;
  for (const Contents::Group& group : contents.groups) {
    out.BeginDict(/*capacity=*/12);  // The most options (Adam's with PyTorch's), and "params".
    if (group.options != nullptr) {
      WriteGroupOptions(out, keys, contents.kind, *group.options);
    } else {
      Item(out, keys.lr, group.lr);
    }
    WriteKey(out, keys.params);
    out.BeginList(group.params);
    for (int64_t i = 0; i < group.params; ++i) out.Int(index++);
    out.EndList();
    out.EndDict();
  }
  out.EndList();
  if (contents.archive.defined()) {
    WriteKey(out, keys.archive);
    out.Tensor(contents.archive);
  }
  out.EndDict();
}

template <typename Sink>
absl::Status WriteOptimizerStateOrError(Sink& out, const TakenOptimizerState& taken) {
  try {
    WriteOptimizerState(out, taken);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("cannot save the optimizer's state: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status OptimizerStateDict(PickleWriter& out, const TakenOptimizerState& taken) {
  return WriteOptimizerStateOrError(out, taken);
}

absl::Status OptimizerStateDict(ValueBuilder& out, const TakenOptimizerState& taken) {
  return WriteOptimizerStateOrError(out, taken);
}

absl::StatusOr<c10::IValue> OptimizerStateDict(const TakenOptimizerState& taken) {
  ValueBuilder out;
  if (absl::Status status = WriteOptimizerStateOrError(out, taken); !status.ok()) return status;
  return out.Finish();
}

absl::StatusOr<c10::IValue> OptimizerStateDict(const torch::optim::Optimizer& optimizer) {
  absl::StatusOr<TakenOptimizerState> taken = TakeOptimizerState(optimizer);
  if (!taken.ok()) return taken.status();
  return OptimizerStateDict(*taken);
}

absl::StatusOr<std::function<void()>> PrepareOptimizerLoad(torch::optim::Optimizer& optimizer,
                                                           const c10::IValue& state_dict) {
  try {
    const Kind kind = KindOf(optimizer);
    const Reader top(state_dict, "the optimizer state");
    if (kind == Kind::kOther) {
      TORCH_CHECK(top.Has(kArchiveKey),
                  "the optimizer is not one of LibTorch's SGD, Adam, AdamW, RMSprop or Adagrad, "
                  "and the checkpoint holds no LibTorch archive of its state (",
                  kArchiveKey, ") to load it from");
      const at::Tensor bytes = top.Get(kArchiveKey).toTensor().contiguous();
      auto archive = std::make_shared<torch::serialize::InputArchive>();
      archive->load_from(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel()));
      return std::function<void()>([&optimizer, archive] { compat::LoadOptimizer(optimizer, *archive); });
    }
    const IValue& groups_value = top.Get("param_groups");
    TORCH_CHECK(groups_value.isList(), "the optimizer state's 'param_groups' is not a list");
    const auto groups = groups_value.toListRef();
    TORCH_CHECK(groups.size() == optimizer.param_groups().size(), "the optimizer state has ", groups.size(),
                " parameter group(s) but the optimizer has ", optimizer.param_groups().size());
    const IValue& state_value = top.Get("state");
    TORCH_CHECK(state_value.isGenericDict(), "the optimizer state's 'state' is not a dictionary");
    const GenericDict saved_state = state_value.toGenericDict();

    struct Pending {
      at::Tensor param;
      std::unique_ptr<OptimizerParamState> state;
    };
    auto pending = std::make_shared<std::vector<Pending>>();
    auto options = std::make_shared<std::vector<std::unique_ptr<OptimizerOptions>>>();
    for (size_t g = 0; g < groups.size(); ++g) {
      const Reader group(groups[g], absl::StrCat("parameter group ", g));
      torch::optim::OptimizerParamGroup& live = optimizer.param_groups()[g];
      options->push_back(ReadOptions(kind, live.options(), group));
      const IValue& params_value = group.Get("params");
      TORCH_CHECK(params_value.isList(), group.where(), ": 'params' is not a list");
      const auto params = params_value.toListRef();
      TORCH_CHECK(params.size() == live.params().size(), group.where(), " has ", params.size(),
                  " parameters but the optimizer's has ", live.params().size());
      for (size_t j = 0; j < params.size(); ++j) {
        const int64_t index = IndexOf(params[j], group.where());
        auto found = saved_state.find(IValue(index));
        std::unique_ptr<OptimizerParamState> state;
        if (found != saved_state.end()) {
          state =
              ReadState(kind, Reader(found->value(), absl::StrCat("the state of parameter ", index)), live.params()[j]);
        }
        pending->push_back(Pending{live.params()[j], std::move(state)});
      }
    }
    return std::function<void()>([&optimizer, pending, options] {
      for (size_t g = 0; g < options->size(); ++g) {
        optimizer.param_groups()[g].set_options((*options)[g]->clone());
      }
      for (const Pending& item : *pending) {
        compat::SetStateOf(optimizer, item.param, item.state == nullptr ? nullptr : item.state->clone());
      }
    });
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
}

}  // namespace kiln
