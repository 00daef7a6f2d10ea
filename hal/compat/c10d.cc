#include "hal/compat/c10d.h"

#include <algorithm>
#include <chrono>

#include "torch/version.h"

namespace kiln::compat {
namespace {

// Gloo waits five times its timeout for a pair's first connection (tcp::Pair::waitUntilConnected, in the Gloo of
// both LibTorch versions), and takes that timeout from the context the group creates. The group is therefore
// built with a fifth of the join timeout, so that joining ends within it, and given the collectives' timeout once
// it stands.
constexpr int kGlooConnectFactor = 5;

// ProcessGroupGloo, with a way to set the timeout of its collectives after it has connected. LibTorch 2.x has
// setTimeout for that; 1.13 keeps the contexts protected.
class GlooGroup : public c10d::ProcessGroupGloo {
 public:
  using c10d::ProcessGroupGloo::ProcessGroupGloo;

  void SetCollectiveTimeout(std::chrono::milliseconds timeout) {
#if TORCH_VERSION_MAJOR >= 2
    setTimeout(timeout);
#else
    options_->timeout = timeout;
    for (const auto& context : contexts_) context->setTimeout(timeout);
#endif
  }
};

}  // namespace

c10::intrusive_ptr<c10d::ProcessGroup> MakeGlooProcessGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    const c10::intrusive_ptr<c10d::ProcessGroupGloo::Options>& options, std::chrono::milliseconds join_timeout) {
  auto connecting = c10d::ProcessGroupGloo::Options::create(
      std::max(std::chrono::milliseconds(1), join_timeout / kGlooConnectFactor));
  connecting->devices = options->devices;
  connecting->threads = options->threads;
  auto gloo = c10::make_intrusive<GlooGroup>(store, rank, size, connecting);
  gloo->SetCollectiveTimeout(options->timeout);
#if TORCH_VERSION_MAJOR >= 2
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size);
  // CPU tensors are all Gloo carries here, and it is the group's default for anything else.
  group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
  group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  return group;
#else
  return gloo;
#endif
}

}  // namespace kiln::compat
