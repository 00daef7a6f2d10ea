#include "hal/compat/c10d.h"

#include "torch/version.h"

namespace kiln::compat {

c10::intrusive_ptr<c10d::ProcessGroup> MakeGlooProcessGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    const c10::intrusive_ptr<c10d::ProcessGroupGloo::Options>& options) {
  auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
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
