#include "trainer/core/meta_device.h"

#include <algorithm>
#include <exception>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ATen/core/dispatch/Dispatcher.h"
#include "ATen/core/stack.h"
#include "ATen/ops/empty.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "c10/core/StorageImpl.h"
#include "c10/core/impl/LocalDispatchKeySet.h"
#include "c10/util/Exception.h"
#include "hal/compat/error_message.h"
#include "torch/csrc/autograd/grad_mode.h"

namespace kiln {
namespace {

constexpr c10::DispatchKey kKey = c10::DispatchKey::Fake;

// One operator a scope saw make or write a meta tensor: its arguments as given (a factory's device still missing) and
// its results.
struct Entry {
  c10::OperatorHandle op;
  std::vector<c10::IValue> arguments;
  std::vector<c10::IValue> results;
};

// What one outermost scope recorded, in order. Its meta tensors (held by the entries) stay alive with it, so that no
// storage it names can be reused by another tensor.
struct Recording {
  std::vector<Entry> entries;
  std::unordered_set<const c10::StorageImpl*> storages;  // Every meta storage an entry names.
};

// The recordings of scopes that have closed and whose tensors were not materialised yet.
struct Registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<Recording>> recordings;
};

Registry& GetRegistry() {
  static Registry* const registry = new Registry();
  return *registry;
}

thread_local std::shared_ptr<Recording> current;  // The open scope's recording on this thread.

bool IsMeta(const c10::IValue& value) { return value.isTensor() && value.toTensor().is_meta(); }

// Calls `visit` on each tensor in `value` (a tensor, or a list of them).
template <typename Visit>
void ForEachTensor(const c10::IValue& value, Visit&& visit) {
  if (value.isTensor()) {
    visit(value.toTensor());
  } else if (value.isList()) {  // Tensor[], Tensor?[]
    for (const c10::IValue& element : value.toListRef()) {
      if (element.isTensor()) visit(element.toTensor());
    }
  }
}

// `value` with each meta tensor in it replaced by a tensor of its own that sees the same storage the same way: the
// recording must not follow what is done to the module's tensors afterwards (set_data, a cast, materialisation
// itself), which changes the storage of the very tensor an operator was given.
c10::IValue Snapshot(const c10::IValue& value) {
  const auto snapshot = [](const at::Tensor& tensor) {
    if (!tensor.defined() || !tensor.is_meta()) return tensor;
    return at::Tensor(tensor.unsafeGetTensorImpl()->shallow_copy_and_detach(
        /*version_counter=*/c10::VariableVersion(), /*allow_tensor_metadata_change=*/false));
  };
  if (value.isTensor()) return snapshot(value.toTensor());
  if (value.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& tensor : value.toTensorList()) list.push_back(snapshot(tensor));
    return list;
  }
  if (value.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> list;
    for (const c10::IValue& element : value.toListRef()) {
      list.push_back(element.isTensor() ? std::optional<at::Tensor>(snapshot(element.toTensor())) : std::nullopt);
    }
    return list;
  }
  return value;
}

bool AnyMeta(c10::ArrayRef<c10::IValue> values, bool& any_tensor) {
  bool meta = false;
  for (const c10::IValue& value : values) {
    ForEachTensor(value, [&](const at::Tensor& tensor) {
      if (!tensor.defined()) return;
      any_tensor = true;
      meta = meta || tensor.is_meta();
    });
  }
  return meta;
}

void Fallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  // What the operator's own kernel dispatches is its business, not the model's code: it runs as without the scope.
  c10::impl::ExcludeDispatchKeyGuard inner(kKey);
  const std::shared_ptr<Recording>& recording = current;
  const c10::FunctionSchema& schema = op.schema();
  const size_t count = schema.arguments().size();
  const size_t first = stack->size() - count;
  bool any_tensor = false;
  const bool reads_meta = AnyMeta(torch::jit::last(*stack, count), any_tensor);
  // A factory: no tensor given, and a device argument left unset. It makes its tensor on the meta device.
  std::optional<size_t> device;
  if (!any_tensor) {
    for (size_t i = 0; i < count; ++i) {
      if (schema.arguments()[i].name() == "device" && (*stack)[first + i].isNone()) device = i;
    }
  }
  const bool record = recording != nullptr && (reads_meta || device.has_value());
  Entry entry{op, {}, {}};
  if (record) {
    for (size_t i = first; i < stack->size(); ++i) entry.arguments.push_back(Snapshot((*stack)[i]));
  }
  if (device.has_value()) (*stack)[first + *device] = c10::IValue(c10::Device(c10::DeviceType::Meta));
  op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kKey), stack);
  if (!record) return;
  const size_t results = schema.returns().size();
  for (size_t i = stack->size() - results; i < stack->size(); ++i) entry.results.push_back(Snapshot((*stack)[i]));
  bool makes_meta = reads_meta;
  for (const c10::IValue& value : entry.results) {
    ForEachTensor(value, [&](const at::Tensor& tensor) { makes_meta = makes_meta || tensor.is_meta(); });
  }
  if (!makes_meta)
    return;  // A factory that kept its tensor elsewhere (none does): nothing to
             // make again.
  for (const std::vector<c10::IValue>* values : {&entry.arguments, &entry.results}) {
    for (const c10::IValue& value : *values) {
      ForEachTensor(value, [&](const at::Tensor& tensor) {
        if (tensor.defined() && tensor.is_meta() && tensor.has_storage()) {
          recording->storages.insert(tensor.storage().unsafeGetStorageImpl());
        }
      });
    }
  }
  recording->entries.push_back(std::move(entry));
}

// Registers the fallback once per process; throws what the dispatcher said, every time after, when it could not.
void RegisterFallback() {
  // Kept for the process's life (and reachable from here, so that a leak checker does not count it): a fallback cannot
  // go while another thread may be dispatching through it.
  [[maybe_unused]] static c10::RegistrationHandleRAII* handle = nullptr;
  static const std::string* const failure = [] {
    try {
      handle = new c10::RegistrationHandleRAII(c10::Dispatcher::singleton().registerFallback(
          kKey, c10::KernelFunction::makeFromBoxedFunction<&Fallback>(),
          "kiln: MetaDeviceScope makes factories' tensors on the meta device (trainer/core/meta_device.h)"));
      return new std::string();
    } catch (const std::exception& e) {
      return new std::string(e.what());
    }
  }();
  TORCH_CHECK(failure->empty(),
              "kiln::MetaDeviceScope works through a dispatcher fallback on the Fake key, but something in this "
              "process registered one there already (torchdistx's fake tensors do): ",
              *failure, "; do not load that library into a program that builds models on the meta device");
}

// The module's parameters and buffers, each once, with their paths.
std::vector<std::pair<std::string, at::Tensor>> TensorsOf(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& item : module.named_parameters()) {
    if (seen.insert(item.value().unsafeGetTensorImpl()).second) tensors.emplace_back(item.key(), item.value());
  }
  for (const auto& item : module.named_buffers()) {
    if (item.value().defined() && seen.insert(item.value().unsafeGetTensorImpl()).second) {
      tensors.emplace_back(item.key(), item.value());
    }
  }
  return tensors;
}

// The host tensor `meta` stands for, once its storage has one: the same view of it.
at::Tensor HostTensor(const at::Tensor& meta, const std::unordered_map<const c10::StorageImpl*, c10::Storage>& host) {
  const auto found = host.find(meta.storage().unsafeGetStorageImpl());
  TORCH_CHECK(found != host.end(), "an operator recorded under kiln::MetaDeviceScope reads a meta tensor of shape ",
              meta.sizes(), " that no recorded operator made (made with an explicit meta device?)");
  return at::empty({0}, meta.options().device(found->second.device()))
      .set_(found->second, meta.storage_offset(), meta.sizes(), meta.strides());
}

c10::IValue ToHost(const c10::IValue& value, const std::unordered_map<const c10::StorageImpl*, c10::Storage>& host) {
  if (IsMeta(value)) return HostTensor(value.toTensor(), host);
  if (value.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& tensor : value.toTensorList()) {
      list.push_back(tensor.defined() && tensor.is_meta() ? HostTensor(tensor, host) : tensor);
    }
    return list;
  }
  if (value.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> list;
    for (const c10::IValue& element : value.toListRef()) {
      list.push_back(IsMeta(element) ? std::optional<at::Tensor>(HostTensor(element.toTensor(), host))
                                     : element.toOptional<at::Tensor>());
    }
    return list;
  }
  return value;
}

// The module that holds the tensor at `path`, as its type and path ("torch::nn::LinearImpl 'net.0'").
std::string OwnerOf(const torch::nn::Module& module, const std::string& path) {
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos) return absl::StrCat(module.name(), " (the model itself)");
  const std::string owner = path.substr(0, dot);
  for (const auto& item : module.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    if (item.key() == owner) return absl::StrCat(item.value()->name(), " '", owner, "'");
  }
  return absl::StrCat("'", owner, "'");
}

}  // namespace

MetaDeviceScope::MetaDeviceScope() : outermost_(current == nullptr) {
  RegisterFallback();
  if (outermost_) current = std::make_shared<Recording>();
  was_included_ = c10::impl::tls_is_dispatch_key_included(kKey);
  c10::impl::tls_set_dispatch_key_included(kKey, true);
}

MetaDeviceScope::~MetaDeviceScope() {
  c10::impl::tls_set_dispatch_key_included(kKey, was_included_);
  if (!outermost_) return;
  std::shared_ptr<Recording> recording = std::move(current);
  current = nullptr;
  if (recording->entries.empty()) return;
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.recordings.push_back(std::move(recording));
}

bool MetaDeviceScope::active() { return current != nullptr; }

bool HasMetaTensors(const torch::nn::Module& module) {
  for (const auto& [name, tensor] : TensorsOf(module)) {
    if (tensor.is_meta()) return true;
  }
  return false;
}

absl::Status MaterializeMetaTensors(torch::nn::Module& module, const std::function<void(const at::Tensor&)>& ready) {
  // The module's meta tensors, by storage (tied parameters share one).
  std::unordered_map<const c10::StorageImpl*, std::vector<at::Tensor>> waiting;
  std::vector<std::pair<std::string, at::Tensor>> tensors = TensorsOf(module);
  for (const auto& [name, tensor] : tensors) {
    if (tensor.is_meta()) waiting[tensor.storage().unsafeGetStorageImpl()].push_back(tensor);
  }
  if (waiting.empty()) return absl::OkStatus();
  // The recordings that made them, and those that made what these read (a conversion recorded by a later scope reads
  // what configure_model's made), replayed as one, in the order recorded.
  std::vector<std::shared_ptr<Recording>> replay;
  {
    Registry& registry = GetRegistry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    for (const auto& [name, tensor] : tensors) {
      if (!tensor.is_meta()) continue;
      const c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
      if (std::none_of(registry.recordings.begin(), registry.recordings.end(),
                       [&](const auto& recording) { return recording->storages.count(storage) > 0; })) {
        return absl::FailedPreconditionError(absl::StrCat(
            "'", name, "' (of ", OwnerOf(module, name),
            ") is on the meta device, but no kiln::MetaDeviceScope recorded how it was made, so it cannot be given "
            "values: it was made with an explicit meta device, or changed (cast, moved, replaced) outside a scope, or "
            "its scope is still open. Build and change the module inside a MetaDeviceScope that closes before the "
            "Trainer sets the model up (configure_model's), or give it values yourself"));
      }
    }
    std::vector<bool> taken(registry.recordings.size(), false);
    std::unordered_set<const c10::StorageImpl*> needed;
    for (const auto& [storage, same] : waiting) needed.insert(storage);
    for (bool grew = true; grew;) {
      grew = false;
      for (size_t r = 0; r < registry.recordings.size(); ++r) {
        const Recording& recording = *registry.recordings[r];
        if (taken[r] || std::none_of(needed.begin(), needed.end(), [&](const c10::StorageImpl* storage) {
              return recording.storages.count(storage) > 0;
            })) {
          continue;
        }
        taken[r] = grew = true;
        needed.insert(recording.storages.begin(), recording.storages.end());
      }
    }
    for (size_t r = 0; r < registry.recordings.size(); ++r) {
      if (taken[r]) replay.push_back(registry.recordings[r]);
    }
    for (size_t r = registry.recordings.size(); r-- > 0;) {
      if (taken[r]) registry.recordings.erase(registry.recordings.begin() + r);
    }
  }
  std::vector<Entry*> entries;
  for (const std::shared_ptr<Recording>& recording : replay) {
    for (Entry& entry : recording->entries) entries.push_back(&entry);
  }
  try {
    // Below autograd, as the operators ran when recorded; not intercepted again should a scope be open here.
    c10::impl::ExcludeDispatchKeyGuard below(c10::autograd_dispatch_keyset_with_ADInplaceOrView |
                                             c10::DispatchKeySet(kKey));
    at::NoGradGuard no_grad;
    // The last entry that names each storage: after it, its tensors have their final values.
    std::unordered_map<const c10::StorageImpl*, size_t> last;
    for (size_t i = 0; i < entries.size(); ++i) {
      for (const std::vector<c10::IValue>* values : {&entries[i]->arguments, &entries[i]->results}) {
        for (const c10::IValue& value : *values) {
          ForEachTensor(value, [&](const at::Tensor& tensor) {
            if (tensor.defined() && tensor.is_meta()) last[tensor.storage().unsafeGetStorageImpl()] = i;
          });
        }
      }
    }
    std::vector<std::vector<const c10::StorageImpl*>> done_after(entries.size());
    for (const auto& [storage, index] : last) done_after[index].push_back(storage);
    std::unordered_map<const c10::StorageImpl*, c10::Storage> host;
    for (size_t i = 0; i < entries.size(); ++i) {
      const Entry& entry = *entries[i];
      torch::jit::Stack stack;
      stack.reserve(entry.arguments.size());
      for (const c10::IValue& value : entry.arguments) stack.push_back(ToHost(value, host));
      entry.op.callBoxed(stack);
      for (size_t r = 0; r < entry.results.size() && r < stack.size(); ++r) {
        std::vector<at::Tensor> made;
        ForEachTensor(stack[r], [&](const at::Tensor& tensor) { made.push_back(tensor); });
        size_t k = 0;
        ForEachTensor(entry.results[r], [&](const at::Tensor& meta) {
          if (k < made.size() && meta.defined() && meta.is_meta() && made[k].defined()) {
            host.try_emplace(meta.storage().unsafeGetStorageImpl(), made[k].storage());
          }
          ++k;
        });
      }
      // What is final now goes to its tensors (and to the caller); the rest of the recording no longer needs it.
      for (const c10::StorageImpl* storage : done_after[i]) {
        if (const auto found = waiting.find(storage); found != waiting.end()) {
          for (at::Tensor& tensor : found->second) {
            // set_data refuses host data for a meta tensor (another backend); the module's tensor becomes the host
            // tensor in place, its autograd identity (requires_grad, hooks) and version counter kept.
            tensor.unsafeGetTensorImpl()->shallow_copy_from(HostTensor(tensor, host).getIntrusivePtr());
          }
          if (ready) {
            for (const at::Tensor& tensor : found->second) ready(tensor);
          }
          waiting.erase(found);
        }
        host.erase(storage);
      }
    }
    if (!waiting.empty()) {
      return absl::InternalError(absl::StrCat("materialising the model's meta tensors on the host left ",
                                              waiting.size(), " of them without values"));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("materialising the model's meta tensors on the host failed: ", compat::ExceptionMessage(e)));
  }
  return absl::OkStatus();
}

}  // namespace kiln
