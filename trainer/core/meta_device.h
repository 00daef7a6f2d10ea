// Building a model on the meta device, and giving it its values later: the C++ counterpart of Python's `with
// torch.device("meta"):` (Lightning's `Trainer.init_module(empty_init=True)`, and what a LightningModule's
// configure_model does to build a model larger than one device).
//
//   void configure_model() override {
//     kiln::MetaDeviceScope meta;  // Until the end of the block: no memory, no values.
//     net = register_module("net", BuildHugeNet());
//   }
//
// Under a MetaDeviceScope, an operator that makes a new tensor from nothing (empty, zeros, ones, full, rand, randn,
// arange, scalar_tensor...) and is given no device makes it on the meta device: shapes and types, no memory, no values.
// A device given explicitly is kept (as in Python). LibTorch has no device context, so the scope is in the dispatcher:
// while it is open, its thread dispatches every operator first through a boxed fallback on DispatchKey::Fake (the
// out-of-core key PyTorch keeps for torchdistx's fake tensors, which Kiln's processes never load; nothing in LibTorch
// registers it). The fallback rewrites a factory's missing device to meta, and records every operator that makes or
// writes a meta tensor (the factory itself, then `uniform_`, `normal_`, `narrow`, `clone`... that the module's
// constructor runs on it). Operators that read no meta tensor only pass through.
//
// MaterializeMetaTensors gives a module's meta parameters and buffers their values by running what the scope recorded
// again on the host, in the order recorded, each tensor reaching its final value as soon as the last recorded operator
// that touches it has run (the caller can take it then: FSDP shards each unit as soon as it is whole, so the whole
// model never exists in one process). The same operators in the same order draw the same numbers from the CPU generator
// as a construction without the scope, which draws nothing: with one seed, a model built on meta and materialised gets
// exactly the values it would have got built normally, provided nothing else draws from the CPU generator between the
// construction and the materialisation (the Trainer materialises in its setup, right after configure_model). Modules
// need no reset(): any code works whose values do not depend on the data of a meta tensor (reading one, `.item()`,
// throws at construction, as in Python).
//
// Thread-safety: a scope affects only the thread that opened it (other threads, and nested work the recorded operators'
// own kernels do, are untouched); destroy it on that thread. Scopes nest (the inner one records into the outer one's
// recording). Materialisation may run on any thread, once per recording.
#ifndef KILN_TRAINER_CORE_META_DEVICE_H_
#define KILN_TRAINER_CORE_META_DEVICE_H_

#include <functional>
#include <memory>

#include "ATen/core/Tensor.h"
#include "absl/status/status.h"
#include "torch/nn/module.h"

namespace kiln {

class MetaDeviceScope {
 public:
  // Opens the scope on this thread. Throws c10::Error when something else in this process registered a fallback on
  // DispatchKey::Fake (torchdistx's fake tensors): both cannot work in one process.
  MetaDeviceScope();
  ~MetaDeviceScope();
  MetaDeviceScope(const MetaDeviceScope&) = delete;
  MetaDeviceScope& operator=(const MetaDeviceScope&) = delete;

  // Whether a scope is open on this thread.
  static bool active();

 private:
  bool outermost_;
  bool was_included_;
};

// Whether any of `module`'s parameters or buffers (recursively) is on the meta device.
bool HasMetaTensors(const torch::nn::Module& module);

// Gives every meta parameter and buffer of `module` its value in host memory (the module's own tensors keep their
// identity: their data is set, as Python's `param.data = ...`), by running again, on the host and in their order, the
// operators the MetaDeviceScope that made them recorded. `ready`, when given, is called with each of those tensors as
// soon as its value is final, while the rest are still being made (each once; a tensor may be given its value before
// the ones made earlier, when later operators still write those). Nothing when the module has no meta tensor. Errors: a
// meta tensor that no scope recorded (made with an explicit meta device, or changed after its scope closed), named by
// its path in the module; an operator that fails on the host; what `ready` throws.
absl::Status MaterializeMetaTensors(torch::nn::Module& module,
                                    const std::function<void(const at::Tensor&)>& ready = nullptr);

}  // namespace kiln

#endif  // KILN_TRAINER_CORE_META_DEVICE_H_
