#include "trainer/core/flop_counter.h"

#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "ATen/record_function.h"
#include "ATen/core/ivalue.h"

namespace kiln {
namespace {

// The counter counting now (one per process; FlopCounter::Start says why), and how deep this thread is in counted
// operators (a counted operator inside another, as convolution runs _convolution, is not counted again).
std::atomic<FlopCounter*> g_active{nullptr};
thread_local int t_counted_depth = 0;

enum class Kind { kNone, kMm, kAddmm, kBmm, kBaddbmm, kConvolution, kConvolutionBackward };

Kind KindOf(std::string_view name) {
  if (name == "aten::mm") return Kind::kMm;
  if (name == "aten::addmm") return Kind::kAddmm;
  if (name == "aten::bmm") return Kind::kBmm;
  if (name == "aten::baddbmm") return Kind::kBaddbmm;
  if (name == "aten::convolution" || name == "aten::_convolution") return Kind::kConvolution;
  if (name == "aten::convolution_backward") return Kind::kConvolutionBackward;
  return Kind::kNone;
}

std::vector<int64_t> Shape(const c10::IValue& value) {
  if (!value.isTensor()) return {};
  const at::Tensor& tensor = value.toTensor();
  if (!tensor.defined()) return {};
  return tensor.sizes().vec();
}

int64_t Product(const std::vector<int64_t>& shape, size_t from = 0) {
  int64_t product = 1;
  for (size_t i = from; i < shape.size(); ++i) product *= shape[i];
  return product;
}

// PyTorch's conv_flop_count: 2 x batch x (the output's spatial size, or the input's when transposed) x the weight's
// size.
int64_t ConvFlops(const std::vector<int64_t>& x, const std::vector<int64_t>& w, const std::vector<int64_t>& out,
                  bool transposed) {
  if (x.empty() || w.empty()) return 0;
  const std::vector<int64_t>& spatial = transposed ? x : out;
  return 2 * x[0] * Product(spatial, 2) * Product(w);
}

// [shape[1], shape[0], rest...] (PyTorch's t() in conv_backward_flop).
std::vector<int64_t> Swap01(std::vector<int64_t> shape) {
  if (shape.size() >= 2) std::swap(shape[0], shape[1]);
  return shape;
}

// What the start callback saw: the operator, and the inputs' shapes the end callback needs (inputs() is valid in the
// start callback only).
struct Observed : at::ObserverContext {
  Kind kind = Kind::kNone;
  bool outermost = false;
  std::vector<std::vector<int64_t>> shapes;  // Of the inputs that are tensors, by position.
  bool transposed = false;
  std::vector<bool> output_mask;
};

std::unique_ptr<at::ObserverContext> OnStart(const at::RecordFunction& fn) {
  const Kind kind = KindOf(fn.name());
  if (kind == Kind::kNone) return nullptr;
  auto observed = std::make_unique<Observed>();
  observed->kind = kind;
  observed->outermost = t_counted_depth == 0;
  ++t_counted_depth;
  if (!observed->outermost) return observed;
  const c10::ArrayRef<const c10::IValue> inputs = fn.inputs();
  observed->shapes.reserve(inputs.size());
  for (const c10::IValue& input : inputs) observed->shapes.push_back(Shape(input));
  // convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups);
  // convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
  //                      output_padding, groups, output_mask).
  if (kind == Kind::kConvolution && inputs.size() > 6 && inputs[6].isBool()) observed->transposed = inputs[6].toBool();
  if (kind == Kind::kConvolutionBackward && inputs.size() > 10) {
    if (inputs[7].isBool()) observed->transposed = inputs[7].toBool();
    if (inputs[10].isBoolList()) {
      for (bool b : inputs[10].toBoolList()) observed->output_mask.push_back(b);
    }
  }
  return observed;
}

int64_t Flops(const Observed& observed, const std::vector<c10::IValue>& outputs) {
  const auto& s = observed.shapes;
  auto input = [&](size_t i) -> const std::vector<int64_t>& {
    static const std::vector<int64_t> kNone;
    return i < s.size() ? s[i] : kNone;
  };
  auto output = [&](size_t i) { return i < outputs.size() ? Shape(outputs[i]) : std::vector<int64_t>{}; };
  switch (observed.kind) {
    case Kind::kMm:
    case Kind::kAddmm: {
      const auto& a = input(observed.kind == Kind::kMm ? 0 : 1);
      const auto& b = input(observed.kind == Kind::kMm ? 1 : 2);
      if (a.size() != 2 || b.size() != 2) return 0;
      return 2 * a[0] * a[1] * b[1];
    }
    case Kind::kBmm:
    case Kind::kBaddbmm: {
      const auto& a = input(observed.kind == Kind::kBmm ? 0 : 1);
      const auto& b = input(observed.kind == Kind::kBmm ? 1 : 2);
      if (a.size() != 3 || b.size() != 3) return 0;
      return 2 * a[0] * a[1] * a[2] * b[2];
    }
    case Kind::kConvolution:
      return ConvFlops(input(0), input(1), output(0), observed.transposed);
    case Kind::kConvolutionBackward: {
      // PyTorch's conv_backward_flop: the input's gradient, then the weight's, each when the mask asks for it.
      const auto& grad_out = input(0);
      const auto& x = input(1);
      const auto& w = input(2);
      const std::vector<bool>& mask = observed.output_mask;
      int64_t flops = 0;
      if (!mask.empty() && mask[0]) flops += ConvFlops(grad_out, w, output(0), !observed.transposed);
      if (mask.size() > 1 && mask[1]) {
        const std::vector<int64_t> grad_weight = Swap01(output(1));
        flops += observed.transposed ? ConvFlops(Swap01(grad_out), Swap01(x), grad_weight, false)
                                     : ConvFlops(Swap01(x), Swap01(grad_out), grad_weight, false);
      }
      return flops;
    }
    case Kind::kNone:
      break;
  }
  return 0;
}

void OnEnd(const at::RecordFunction& fn, at::ObserverContext* context) {
  auto* observed = static_cast<Observed*>(context);
  if (observed == nullptr) return;
  --t_counted_depth;
  if (!observed->outermost) return;
  FlopCounter* counter = g_active.load(std::memory_order_acquire);
  if (counter == nullptr) return;
  counter->Add(fn.name(), Flops(*observed, fn.outputs()));
}

}  // namespace

FlopCounter::~FlopCounter() { Stop(); }

absl::Status FlopCounter::Start() {
  FlopCounter* expected = nullptr;
  if (!g_active.compare_exchange_strong(expected, this, std::memory_order_acq_rel)) {
    return absl::FailedPreconditionError(
        expected == this ? "this FlopCounter is already counting"
                         : "another FlopCounter is counting in this process; one counts at a time: Stop it first");
  }
  t_counted_depth = 0;
  handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(&OnStart, &OnEnd)
                                           .needsInputs(true)
                                           .needsOutputs(true)
                                           .scopes({at::RecordScope::FUNCTION}));
  return absl::OkStatus();
}

void FlopCounter::Stop() {
  if (handle_ == 0) return;
  at::removeCallback(handle_);
  handle_ = 0;
  g_active.store(nullptr, std::memory_order_release);
}

void FlopCounter::Add(const char* op, int64_t flops) {
  if (flops == 0) return;
  total_.fetch_add(flops, std::memory_order_relaxed);
  absl::MutexLock lock(&mutex_);
  by_operator_[op] += flops;
}

std::map<std::string, int64_t> FlopCounter::by_operator() const {
  absl::MutexLock lock(&mutex_);
  return by_operator_;
}

void FlopCounter::Reset() {
  total_.store(0, std::memory_order_relaxed);
  absl::MutexLock lock(&mutex_);
  by_operator_.clear();
}

absl::StatusOr<int64_t> MeasureFlops(absl::FunctionRef<void()> fn) {
  FlopCounter counter;
  if (absl::Status started = counter.Start(); !started.ok()) return started;
  fn();  // The destructor stops counting when fn throws.
  counter.Stop();
  return counter.total();
}

}  // namespace kiln
