// An optimizer whose update the device itself can skip (PyTorch's fused optimizers take a `found_inf` tensor for this):
// the trainer hands it a flag computed on the device from the loss, and never waits for the device to learn whether
// the loss was finite. Kiln's fused Adam, AdamW and SGD (trainer/optim) implement it next to torch::optim's classes;
// an optimizer that does not is checked on the host, as before.
//
// Thread-compatible, like the optimizer it extends.
#ifndef KILN_TRAINER_CORE_DEVICE_SKIP_OPTIMIZER_H_
#define KILN_TRAINER_CORE_DEVICE_SKIP_OPTIMIZER_H_

#include "ATen/core/Tensor.h"

namespace kiln {

class DeviceSkipOptimizer {
 public:
  virtual ~DeviceSkipOptimizer() = default;

  // Whether set_found_inf is honoured for this optimizer's parameters and settings (the fused kernels run on their
  // device). Never reads the device.
  virtual bool can_skip_on_device() const = 0;

  // What every later step() reads on the device: a one-element float32 tensor, 1 to skip the whole update (the
  // parameters and all state stay as they were, Adam's step counts included), 0 to apply it. An undefined tensor
  // applies every update. The host never reads it.
  virtual void set_found_inf(at::Tensor found_inf) = 0;

  // Puts what only the device knows back where torch::optim's state holds it (Adam's step counts, which the host
  // counts ahead when the device skipped a step), so that state_dict() and checkpoints are exact. Reads the device
  // when a flag was ever set; otherwise does nothing.
  virtual void SyncStateToHost() = 0;
};

}  // namespace kiln

#endif  // KILN_TRAINER_CORE_DEVICE_SKIP_OPTIMIZER_H_
