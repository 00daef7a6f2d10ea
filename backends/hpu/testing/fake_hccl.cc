// A FAKE of Habana's library as far as Kiln reads it: it exports ProcessGroupHCCL's creator with c10d's signature. The
// backend it makes does no collective; it answers its name, rank and size, so that a test can see that Kiln found the
// creator and called it with its own rank and world size. Test support only.
#include <chrono>
#include <string>

#include "torch/csrc/distributed/c10d/Backend.hpp"
#include "torch/csrc/distributed/c10d/Store.hpp"

namespace habana {

class ProcessGroupHCCL final : public c10d::Backend {
 public:
  ProcessGroupHCCL(int rank, int size) : Backend(rank, size) {}
  const std::string getBackendName() const override { return "hccl"; }
  static c10::intrusive_ptr<c10d::Backend> createProcessGroupHCCL(const c10::intrusive_ptr<c10d::Store>& store,
                                                                  int rank, int size,
                                                                  const std::chrono::duration<float>& timeout);
};

c10::intrusive_ptr<c10d::Backend> ProcessGroupHCCL::createProcessGroupHCCL(const c10::intrusive_ptr<c10d::Store>&,
                                                                           int rank, int size,
                                                                           const std::chrono::duration<float>&) {
  return c10::make_intrusive<ProcessGroupHCCL>(rank, size);
}

}  // namespace habana
