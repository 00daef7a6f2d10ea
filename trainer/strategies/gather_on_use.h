// Gather on use: the trigger that makes an FSDP unit's parameters whole when an operator reads them, whoever calls
// it (a member's forward the parent calls itself, a TorchScript module's code, the backward pass).
//
// LibTorch's C++ modules have no forward hooks, so the trigger is in the dispatcher. While a GatherOnUseScope is
// installed, its thread (and autograd's threads, which take the dispatch-key state of the thread that called
// backward) dispatch every operator first through a boxed fallback on DispatchKey::DeferredInit: the out-of-core key
// PyTorch keeps for deferred materialisation (torchdistx's, which Kiln's processes never load; nothing in LibTorch
// registers it). The fallback looks up the storages of the operator's tensor arguments among the tracked ones (a
// unit's flat buffer: its members are views of it, and so is every view made of them); when one belongs to a unit
// that is not ready (its memory freed, or its gather still travelling), it asks the owner to gather those units,
// then runs the operator as it would have run. An operator that reads no tracked storage only passes through: the
// cost is the boxed call (docs/performance.md measures it).
//
// The owner's Gather runs with the key excluded, so what it dispatches (the all-gather itself) is not intercepted;
// code that works on a tracked buffer directly (FlatParameter) excludes it too (ScopedBypass).
//
// Thread-safety: one scope per process at a time (Install refuses a second); the fallback serialises its calls to
// the owner with a mutex.
#ifndef KILN_TRAINER_STRATEGIES_GATHER_ON_USE_H_
#define KILN_TRAINER_STRATEGIES_GATHER_ON_USE_H_

#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "c10/core/StorageImpl.h"
#include "c10/core/impl/LocalDispatchKeySet.h"

namespace kiln {

class GatherOnUse {
 public:
  virtual ~GatherOnUse() = default;
  // Whether `unit`'s parameters can be read now.
  virtual bool Ready(int unit) const = 0;
  // Makes `units` ready: those an operator reads, each once, at least one of them not ready.
  virtual void Gather(const std::vector<int>& units) = 0;
};

class GatherOnUseScope {
 public:
  // Installs `owner` (not owned; it outlives the scope) and turns the trigger on for this thread. Fails when another
  // scope is installed, or when something else registered a fallback on the key.
  static absl::StatusOr<std::unique_ptr<GatherOnUseScope>> Install(GatherOnUse* owner);
  // Turns the trigger off on the installing thread (destroy it there) and forgets the owner.
  ~GatherOnUseScope();
  GatherOnUseScope(const GatherOnUseScope&) = delete;
  GatherOnUseScope& operator=(const GatherOnUseScope&) = delete;

  // Operators reading `storage` gather `unit` first.
  void Track(const c10::StorageImpl* storage, int unit);

  // Code that works on a tracked buffer itself holds one: its operators pass straight through on this thread.
  class ScopedBypass {
   public:
    ScopedBypass() : guard_(c10::DispatchKey::DeferredInit) {}

   private:
    c10::impl::ExcludeDispatchKeyGuard guard_;
  };

 private:
  explicit GatherOnUseScope(bool was_included) : was_included_(was_included) {}

  bool was_included_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_STRATEGIES_GATHER_ON_USE_H_
