#include "trainer/checkpoint/optimizer_state_dict.h"

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
#include "trainer/checkpoint/snapshot_dict.h"

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

void PutTensor(GenericDict& dict, const char* key, const at::Tensor& tensor) {
  if (tensor.defined()) Put(dict, key, SnapshotTensor(tensor));
}

// PyTorch keeps `step` as a float32 tensor (so Lightning and torch.optim read it as their own); past 2^24, where
// float32 no longer holds every whole number, as float64, which PyTorch's optimizers read as well.
IValue Step(int64_t step) {
  constexpr int64_t kFloat32Exact = int64_t{1} << 24;
  return at::scalar_tensor(static_cast<double>(step), step <= kFloat32Exact ? at::kFloat : at::kDouble);
}

// PyTorch's names for the options LibTorch has no counterpart of, with the values that mean "as LibTorch does".
void PutPyTorchOnly(GenericDict& group, Kind kind) {
  Put(group, "maximize", false);
  Put(group, "foreach", IValue());
  Put(group, "differentiable", false);
  if (kind != Kind::kSgd && kind != Kind::kAdagrad) Put(group, "capturable", false);
  if (kind != Kind::kRmsprop) Put(group, "fused", IValue());
}

// Adam and AdamW hold the same options and state under the same names; only LibTorch's types differ.
template <typename Options>
void PutAdamOptions(GenericDict& group, const OptimizerOptions& options) {
  const auto& o = static_cast<const Options&>(options);
  Put(group, "lr", o.lr());
  Put(group, "betas", c10::ivalue::Tuple::create(std::get<0>(o.betas()), std::get<1>(o.betas())));
  Put(group, "eps", o.eps());
  Put(group, "weight_decay", o.weight_decay());
  Put(group, "amsgrad", o.amsgrad());
}

template <typename State>
void PutAdamState(GenericDict& out, const OptimizerParamState& state) {
  const auto& s = static_cast<const State&>(state);
  Put(out, "step", Step(s.step()));
  PutTensor(out, "exp_avg", s.exp_avg());
  PutTensor(out, "exp_avg_sq", s.exp_avg_sq());
  PutTensor(out, "max_exp_avg_sq", s.max_exp_avg_sq());
}

GenericDict GroupOptions(Kind kind, const OptimizerOptions& options) {
  GenericDict group = NewDict(/*capacity=*/12);  // The most options (Adam's with PyTorch's), and "params".
  switch (kind) {
    case Kind::kSgd: {
      const auto& o = static_cast<const torch::optim::SGDOptions&>(options);
      Put(group, "lr", o.lr());
      Put(group, "momentum", o.momentum());
      Put(group, "dampening", o.dampening());
      Put(group, "weight_decay", o.weight_decay());
      Put(group, "nesterov", o.nesterov());
      break;
    }
    case Kind::kAdam:
      PutAdamOptions<torch::optim::AdamOptions>(group, options);
      break;
    case Kind::kAdamW:
      PutAdamOptions<torch::optim::AdamWOptions>(group, options);
      break;
    case Kind::kRmsprop: {
      const auto& o = static_cast<const torch::optim::RMSpropOptions&>(options);
      Put(group, "lr", o.lr());
      Put(group, "alpha", o.alpha());
      Put(group, "eps", o.eps());
      Put(group, "weight_decay", o.weight_decay());
      Put(group, "momentum", o.momentum());
      Put(group, "centered", o.centered());
      break;
    }
    case Kind::kAdagrad: {
      const auto& o = static_cast<const torch::optim::AdagradOptions&>(options);
      Put(group, "lr", o.lr());
      Put(group, "lr_decay", o.lr_decay());
      Put(group, "weight_decay", o.weight_decay());
      Put(group, "initial_accumulator_value", o.initial_accumulator_value());
      Put(group, "eps", o.eps());
      break;
    }
    case Kind::kOther:
      Put(group, "lr", options.get_lr());
      return group;
  }
  PutPyTorchOnly(group, kind);
  return group;
}

GenericDict ParamState(Kind kind, const OptimizerParamState& state) {
  GenericDict out = NewDict(/*capacity=*/4);
  switch (kind) {
    case Kind::kSgd:
      PutTensor(out, "momentum_buffer", static_cast<const torch::optim::SGDParamState&>(state).momentum_buffer());
      break;
    case Kind::kAdam:
      PutAdamState<torch::optim::AdamParamState>(out, state);
      break;
    case Kind::kAdamW:
      PutAdamState<torch::optim::AdamWParamState>(out, state);
      break;
    case Kind::kRmsprop: {
      const auto& s = static_cast<const torch::optim::RMSpropParamState&>(state);
      Put(out, "step", Step(s.step()));
      PutTensor(out, "square_avg", s.square_avg());
      PutTensor(out, "momentum_buffer", s.momentum_buffer());
      PutTensor(out, "grad_avg", s.grad_avg());
      break;
    }
    case Kind::kAdagrad: {
      const auto& s = static_cast<const torch::optim::AdagradParamState&>(state);
      Put(out, "step", Step(s.step()));
      PutTensor(out, "sum", s.sum());
      break;
    }
    case Kind::kOther:
      break;
  }
  return out;
}

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

absl::StatusOr<c10::IValue> OptimizerStateDict(const torch::optim::Optimizer& optimizer) {
  try {
    const Kind kind = KindOf(optimizer);
    GenericDict state(c10::IntType::get(), c10::AnyType::get());
    c10::impl::GenericList groups(c10::AnyType::get());
    int64_t index = 0;
    for (const torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) {
      GenericDict out = GroupOptions(kind, group.options());
      c10::impl::GenericList params(c10::AnyType::get());
      for (const at::Tensor& param : group.params()) {
        if (kind != Kind::kOther) {
          if (const OptimizerParamState* saved = compat::StateOf(optimizer, param)) {
            state.insert(index, ParamState(kind, *saved));
          }
        }
        params.push_back(index++);
      }
      Put(out, "params", params);
      groups.push_back(out);
    }
    GenericDict dict = NewDict();
    Put(dict, "state", state);
    Put(dict, "param_groups", groups);
    if (kind == Kind::kOther) {
      torch::serialize::OutputArchive archive;
      optimizer.save(archive);
      std::string bytes;
      archive.save_to([&bytes](const void* data, size_t size) -> size_t {
        bytes.append(static_cast<const char*>(data), size);
        return size;
      });
      at::Tensor tensor = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
      std::memcpy(tensor.data_ptr(), bytes.data(), bytes.size());
      Put(dict, kArchiveKey, tensor);
    }
    return IValue(dict);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("cannot save the optimizer's state: ", e.what_without_backtrace()));
  }
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
