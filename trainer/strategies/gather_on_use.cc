#include "trainer/strategies/gather_on_use.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <utility>

#include "ATen/core/dispatch/Dispatcher.h"
#include "ATen/core/stack.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "hal/compat/error_message.h"

namespace kiln {
namespace {

struct State {
  std::atomic<GatherOnUse*> owner{nullptr};
  // Written while the scope is installed on its thread, before the model runs; read by the fallback.
  absl::flat_hash_map<const c10::StorageImpl*, int> units;
  std::mutex gathering;  // One Gather at a time (the loop's thread and autograd's may both dispatch).
};

State& GetState() {
  static State* const state = new State();
  return *state;
}

using Units = absl::InlinedVector<int, 4>;

void Look(const State& state, const at::Tensor& tensor, Units& used) {
  if (!tensor.defined() || !tensor.has_storage()) return;
  const auto found = state.units.find(tensor.storage().unsafeGetStorageImpl());
  if (found != state.units.end() && std::find(used.begin(), used.end(), found->second) == used.end()) {
    used.push_back(found->second);
  }
}

void Fallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  State& state = GetState();
  if (GatherOnUse* owner = state.owner.load(std::memory_order_acquire); owner != nullptr) {
    const size_t count = op.schema().arguments().size();
    Units used;
    for (const c10::IValue& argument : torch::jit::last(*stack, count)) {
      if (argument.isTensor()) {
        Look(state, argument.toTensor(), used);
      } else if (argument.isList()) {
        for (const c10::IValue& element : argument.toListRef()) {
          if (element.isTensor()) Look(state, element.toTensor(), used);
        }
      }
    }
    if (std::any_of(used.begin(), used.end(), [&](int unit) { return !owner->Ready(unit); })) {
      std::lock_guard<std::mutex> lock(state.gathering);
      GatherOnUseScope::ScopedBypass bypass;
      owner->Gather(std::vector<int>(used.begin(), used.end()));
    }
  }
  op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::DeferredInit),
                     stack);
}

// Registers the fallback once per process; what it said, every time after.
const absl::Status& RegisterFallback() {
  // Kept for the process's life (and reachable from here, so that a leak checker does not count it): a fallback
  // cannot go while another thread may be dispatching through it.
  static c10::RegistrationHandleRAII* handle = nullptr;
  static const absl::Status* const registered = [] {
    try {
      handle = new c10::RegistrationHandleRAII(c10::Dispatcher::singleton().registerFallback(
          c10::DispatchKey::DeferredInit, c10::KernelFunction::makeFromBoxedFunction<&Fallback>(),
          "kiln: FSDP gathers a unit's parameters when an operator reads them (trainer/strategies/gather_on_use.h)"));
      return new absl::Status();
    } catch (const std::exception& e) {
      return new absl::Status(absl::FailedPreconditionError(absl::StrCat(
          "fsdp gathers a unit's parameters through a dispatcher fallback on the DeferredInit key, but something "
          "in this process registered one there already (torchdistx's deferred_init does): ",
          compat::ExceptionMessage(e), "; do not load that library into a program that trains with fsdp")));
    }
  }();
  return *registered;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GatherOnUseScope>> GatherOnUseScope::Install(GatherOnUse* owner) {
  if (const absl::Status& registered = RegisterFallback(); !registered.ok()) return registered;
  State& state = GetState();
  GatherOnUse* none = nullptr;
  if (!state.owner.compare_exchange_strong(none, owner)) {
    return absl::FailedPreconditionError(
        "fsdp: another fsdp run in this process is still set up (one at a time: tear the other down first)");
  }
  state.units.clear();
  const bool was_included = c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::DeferredInit);
  c10::impl::tls_set_dispatch_key_included(c10::DispatchKey::DeferredInit, true);
  return std::unique_ptr<GatherOnUseScope>(new GatherOnUseScope(was_included));
}

GatherOnUseScope::~GatherOnUseScope() {
  c10::impl::tls_set_dispatch_key_included(c10::DispatchKey::DeferredInit, was_included_);
  State& state = GetState();
  std::lock_guard<std::mutex> lock(state.gathering);
  state.owner.store(nullptr, std::memory_order_release);
  state.units.clear();
}

void GatherOnUseScope::Track(const c10::StorageImpl* storage, int unit) { GetState().units[storage] = unit; }

}  // namespace kiln
