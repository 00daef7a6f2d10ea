// PluginCollectives: an accelerator plugin's own collective library (the plugin C API's optional collectives, 1.1)
// as a c10d backend, which PluginAccelerator::MakeCollectiveBackend gives data-parallel training when the plugin has
// them. It does what hal/collectives.h asks of a backend by calling the plugin: one communicator per backend, made
// when it is created and destroyed with it.
//
// What it carries: dense tensors of the plugin's device type, one per call (allreduce, broadcast), with the types
// the C API names (float32, float64, float16, bfloat16, int8, uint8, int32, int64, bool; the plugin may refuse some)
// and the reductions SUM, PRODUCT, MIN and MAX. allgather and reduce_scatter take one list of world-size tensors of
// equal size and go through one flat buffer; _allgather_base and _reduce_scatter_base use the flat tensors as they
// are. A non-contiguous tensor travels through a contiguous copy. Every call completes before it returns.
//
// Errors: what cannot travel (another device type, a type or reduction the C API lacks, such as AVG, several tensors
// in one call) is refused before the plugin is called; a plugin's error, with its code, is thrown as a c10::Error
// whose message names the backend, the plugin's path, the collective and the plugin's message. Each is thrown from
// the call, as c10d's own blocking backends do, never from wait().
//
// Thread-safety: calls may come from any thread; they reach the plugin one at a time (the C API allows one call at
// a time per communicator), and every rank must make them in the same order, as with any c10d backend.
#ifndef KILN_HAL_PLUGIN_PLUGIN_COLLECTIVES_H_
#define KILN_HAL_PLUGIN_PLUGIN_COLLECTIVES_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "c10/core/DeviceType.h"
#include "hal/collectives.h"
#include "hal/plugin/plugin_library.h"
#include "torch/csrc/distributed/c10d/Backend.hpp"

namespace kiln {

// The store key under which rank 0 publishes the plugin's unique id (in CollectiveOptions::store, which is already
// this backend's own).
inline constexpr char kPluginUniqueIdKey[] = "plugin_collectives/unique_id";

class PluginCollectives final : public c10d::Backend {
 public:
  // Makes rank `options.rank`'s communicator: rank 0 calls Collectives_GetUniqueId and sets the bytes in
  // `options.store`; the other ranks wait for them there, for at most `options.timeout`; then every rank calls
  // Collectives_CommInit with `options.timeout`. `library` must have collectives (has_collectives()); `name` is
  // the plugin's process_group_backend. Errors: DeadlineExceeded when rank 0's id does not arrive in time; the
  // plugin's own error, with its code, naming the path and the function, otherwise. Never throws.
  static absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> Create(std::shared_ptr<const PluginLibrary> library,
                                                                  std::string name, c10::DeviceType device_type,
                                                                  const CollectiveOptions& options);

  // Destroys the communicator (an error from the plugin is logged, not thrown).
  ~PluginCollectives() override;

  const std::string getBackendName() const override { return name_; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;

  PluginCollectives(std::shared_ptr<const PluginLibrary> library, std::string name, c10::DeviceType device_type,
                    int rank, int size, KILN_Communicator* communicator);

 private:
  // Calls the plugin's `function` with `args` (whose communicator this sets) under the lock; throws its error.
  template <typename Args>
  void Call(const char* collective, const char* function, KILN_Error* (*plugin_function)(Args*), Args& args);
  // Throws unless `tensor` is a dense tensor of the plugin's device type.
  void CheckTensor(const at::Tensor& tensor, const char* collective) const;

  const std::shared_ptr<const PluginLibrary> library_;
  const std::string name_;
  const c10::DeviceType device_type_;
  std::mutex mutex_;                 // One call at a time on the communicator.
  KILN_Communicator* communicator_;  // Owned; destroyed with this backend.
};

}  // namespace kiln

#endif  // KILN_HAL_PLUGIN_PLUGIN_COLLECTIVES_H_
