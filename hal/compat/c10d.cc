#include "hal/compat/c10d.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <tuple>
#include <unordered_map>

#include "torch/csrc/distributed/c10d/logger.hpp"
#include "torch/csrc/distributed/c10d/reducer.hpp"
#include "torch/version.h"

namespace kiln::compat {
namespace {

// Gloo waits five times its timeout for a pair's first connection (tcp::Pair::waitUntilConnected), and takes that timeout from the context the group creates. The group is therefore
// built with a fifth of the join timeout, so that joining ends within it, and given the collectives' timeout once
// it stands.
constexpr int kGlooConnectFactor = 5;

// ProcessGroupGloo, with a way to set the timeout of its collectives after it has connected. LibTorch 2.11 has
// setTimeout for that; 2.8 has not, but both keep the options and contexts that it sets as protected members.
class GlooGroup : public c10d::ProcessGroupGloo {
 public:
  using c10d::ProcessGroupGloo::ProcessGroupGloo;

  // UndefinedBehaviorSanitizer's vptr check cannot follow Gloo's contexts: they come from the wheel's
  // libtorch_cpu.so, whose Gloo types it does not see, so it calls every one of them an invalid object.
  __attribute__((no_sanitize("vptr"))) void SetCollectiveTimeout(std::chrono::milliseconds timeout) {
    options_->timeout = timeout;
    for (const auto& context : contexts_) context->setTimeout(timeout);
  }

  // The same as ProcessGroupGloo's own, which is inline in its header and so compiled with the vptr check too.
  __attribute__((no_sanitize("vptr"))) void setTimeout(std::chrono::milliseconds timeout) override {
    SetCollectiveTimeout(timeout);
  }
};

}  // namespace

c10::intrusive_ptr<c10d::Backend> MakeGlooBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                  const c10::intrusive_ptr<c10d::ProcessGroupGloo::Options>& options,
                                                  std::chrono::milliseconds join_timeout) {
  auto connecting = c10d::ProcessGroupGloo::Options::create(
      std::max(std::chrono::milliseconds(1), join_timeout / kGlooConnectFactor));
  connecting->devices = options->devices;
  connecting->threads = options->threads;
  auto gloo = c10::make_intrusive<GlooGroup>(store, rank, size, connecting);
  gloo->SetCollectiveTimeout(options->timeout);
  return gloo;
}

c10::intrusive_ptr<c10d::ProcessGroup> MakeGlooProcessGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    const c10::intrusive_ptr<c10d::ProcessGroupGloo::Options>& options, std::chrono::milliseconds join_timeout) {
  c10::intrusive_ptr<c10d::Backend> gloo = MakeGlooBackend(store, rank, size, options, join_timeout);
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size);
  // CPU tensors are all Gloo carries here, and it is the group's default for anything else.
  group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
  group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  return group;
}

namespace {

std::shared_ptr<c10d::Reducer> NewReducer(const std::vector<at::Tensor>& parameters,
                                          const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                          const ReducerOptions& options) {
  // DDP's assignment: a small first bucket (the last layers' gradients, ready first), then buckets up to the cap.
  const std::vector<bool> expect_sparse(parameters.size(), false);
  auto [bucket_indices, per_bucket_limits] = c10d::compute_bucket_assignment_by_size(
      parameters, {options.first_bucket_bytes, options.bucket_bytes}, expect_sparse);
  std::unordered_map<size_t, std::string> names;
  const auto cap = static_cast<int64_t>(options.bucket_bytes);
  const auto first_cap = static_cast<int64_t>(options.first_bucket_bytes);
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 11
  // 2.8 to 2.10: no per-bucket cap list.
  (void)per_bucket_limits;
  return std::make_shared<c10d::Reducer>(parameters, std::move(bucket_indices), group, expect_sparse, cap,
                                         options.find_unused_parameters, options.gradient_as_bucket_view,
                                         std::move(names), first_cap, /*skip_all_reduce_unused_params=*/false,
                                         /*use_python_reducer=*/false);
#else
  std::vector<int64_t> limits(per_bucket_limits.begin(), per_bucket_limits.end());
  return std::make_shared<c10d::Reducer>(parameters, std::move(bucket_indices), group, expect_sparse, cap,
                                         options.find_unused_parameters, options.gradient_as_bucket_view,
                                         std::move(names), first_cap, /*skip_all_reduce_unused_params=*/false,
                                         /*use_python_reducer=*/false, std::move(limits));
#endif
}

// A reducer with the logger that DistributedDataParallel gives it: the Reducer calls its logger without checking that
// it has one (when the set of unused parameters changes between iterations, it dereferences logger_.lock()), so a
// reducer without one crashes the process there.
struct LoggedReducer {
  std::shared_ptr<c10d::Reducer> reducer;
  std::shared_ptr<c10d::Logger> logger;  // Holds the reducer too; the reducer holds it weakly.
};

}  // namespace

std::shared_ptr<c10d::Reducer> MakeReducer(const std::vector<at::Tensor>& parameters,
                                           const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                           const ReducerOptions& options) {
  auto logged = std::make_shared<LoggedReducer>();
  logged->reducer = NewReducer(parameters, group, options);
  logged->logger = std::make_shared<c10d::Logger>(logged->reducer);
  logged->reducer->set_logger(logged->logger);
  // The pointer keeps both alive, the logger first released.
  return std::shared_ptr<c10d::Reducer>(logged, logged->reducer.get());
}

}  // namespace kiln::compat
