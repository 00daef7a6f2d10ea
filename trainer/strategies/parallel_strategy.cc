#include "trainer/strategies/parallel_strategy.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <vector>

#include "ATen/ATen.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "c10/util/Exception.h"
#include "glog/logging.h"
#include "hal/collectives.h"
#include "hal/compat/error_message.h"
#include "torch/csrc/distributed/c10d/PrefixStore.hpp"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"
#include "torch/csrc/distributed/c10d/comm.hpp"
#include "trainer/strategies/distributed_program.h"
#include "trainer/strategies/gloo_devices.h"

namespace kiln {
namespace {

constexpr size_t kBroadcastBucketBytes = 250 * 1024 * 1024;  // PyTorch DDP's _sync_module_states bucket.

constexpr char kGlooBackend[] = "gloo";

// The first line of a c10 error (the rest is LibTorch's backtrace).
std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

// Whether a collective failed because a peer failed or did not come within the timeout: c10d's DistError (what its
// backends, Kiln's included, throw then), or a message that says so (a backend that throws a plain error on time).
bool IsPeerFailure(const std::exception& error) {
  if (dynamic_cast<const c10::DistError*>(&error) != nullptr) return true;
  const std::string message = compat::ExceptionMessage(error);
  for (const char* sign : {"imed out", "imeout", "Connection closed", "onnection reset", "DEADLINE_EXCEEDED",
                           "UNAVAILABLE", "ABORTED"}) {
    if (absl::StrContains(message, sign)) return true;
  }
  return false;
}

// c10d's name for a backend, as a ProcessGroup files it: its own two, and every other (a vendor's) as CUSTOM.
c10d::ProcessGroup::BackendType BackendTypeOf(const std::string& name) {
  if (name == "gloo") return c10d::ProcessGroup::BackendType::GLOO;
  if (name == "nccl") return c10d::ProcessGroup::BackendType::NCCL;
  return c10d::ProcessGroup::BackendType::CUSTOM;
}

std::chrono::milliseconds Millis(absl::Duration duration) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(duration));
}

}  // namespace

ParallelStrategy::ParallelStrategy(absl::Duration timeout, std::optional<std::string> process_group_backend)
    : timeout_(timeout), process_group_backend_(std::move(process_group_backend)) {}

ParallelStrategy::~ParallelStrategy() = default;

std::string ParallelStrategy::FailureHint(const std::string& message) const {
  return absl::StrCat(" (another rank has probably died or stopped answering; the timeout is ",
                      absl::FormatDuration(timeout_), ")");
}

void ParallelStrategy::Rethrow(const char* what, const std::exception& error) const {
  const std::string message = compat::ExceptionMessage(error);
  throw std::runtime_error(absl::StrCat("rank ", global_rank_, " of ", world_size_, ": ", what, " failed: ", message,
                                        FailureHint(message)));
}

absl::Status ParallelStrategy::NotMet(absl::string_view cause) const {
  return absl::DeadlineExceededError(absl::StrCat(
      "rank ", global_rank_, " of ", world_size_, " could not meet the other ranks at ", address_, ":", port_,
      " within ", absl::FormatDuration(timeout_), " (", cause,
      "). Check that every rank was started, with the same MASTER_ADDR, MASTER_PORT and world size"));
}

absl::Status ParallelStrategy::JoinProcessGroup(const Plan& plan, torch::nn::Module& model, bool move_model) {
  accelerator_ = plan.accelerator;
  logical_device_ = plan.root_logical_device();
  device_ = logical_device_.compute;
  global_rank_ = plan.global_rank;
  world_size_ = plan.world_size;
  // The accelerator brings its own backend (hal/collectives.h); Gloo is there for every host.
  const std::string native = accelerator_->ProcessGroupBackend();
  const std::string backend = plan.process_group_backend.value_or(native);
  const std::vector<std::string> offered = accelerator_->ProcessGroupBackends();
  if (backend != kGlooBackend && std::find(offered.begin(), offered.end(), backend) == offered.end() &&
      backend != native) {
    return absl::FailedPreconditionError(absl::StrCat(
        "process group backend '", backend, "' is not available for accelerator '", accelerator_->name(),
        "': it brings '", absl::StrJoin(offered, "', '"), "', and 'gloo' carries CPU tensors; set "
        "process_group_backend to ",
        offered.size() > 1 ? absl::StrCat("one of them or leave it unset (its own, '", native, "')")
                           : absl::StrCat("'", native, "' or leave it unset")));
  }
  // Whether the backend can carry the device's tensors (Gloo: CPU and CUDA) is the backend's to say: set-up checks
  // it with one all-reduce on the device (CheckCollectives), before any training.
  if (!plan.main_port.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        name(), " needs a main port for the processes to meet: set MASTER_PORT (and MASTER_ADDR) on every node"));
  }
  address_ = plan.main_address.empty() ? "127.0.0.1" : plan.main_address;
  local_world_size_ = plan.num_devices();
  node_rank_ = plan.node_rank;
  port_ = *plan.main_port;

  if (move_model) {
    absl::Status status = SetupDeviceAndModel(*accelerator_, logical_device_, model, &device_set_up_);
    if (!status.ok()) return status;
  } else if (absl::Status status = accelerator_->SetupDevice(logical_device_); !status.ok()) {
    return absl::Status(status.code(), absl::StrCat("setting up ", accelerator_->name(), " device ",
                                                    logical_device_.ToString(), " failed: ", status.message()));
  } else {
    device_set_up_ = true;
  }

  // The program's store, met once per program (the processes live through every entry point), under this entry
  // point's own prefix: every rank has agreed that it is the same entry point.
  absl::StatusOr<c10::intrusive_ptr<c10d::Store>> store = DistributedProgram::Get().Meet(plan, timeout_);
  if (!store.ok()) {
    // Ranks that did not come are a join failure, said as every other one is; the rest name their cause.
    if (store.status().code() == absl::StatusCode::kDeadlineExceeded) return NotMet(store.status().message());
    return store.status();
  }
  store_ = *std::move(store);

  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  absl::StatusOr<std::vector<GlooDevice>> devices =
      ChooseGlooDevices(address_, ifname != nullptr ? ifname : "", HostFacts::Probe(address_));
  if (!devices.ok()) return devices.status();
  collective_ = CollectiveOptions{};
  collective_.device_index = device_.has_index() ? device_.index() : 0;
  collective_.timeout = Millis(timeout_);
  for (const GlooDevice& device : *devices) collective_.host_endpoints.push_back({device.is_interface, device.name});
  backend_ = backend;
  absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> group = MakeGroup(global_rank_, world_size_, "kiln");
  if (!group.ok()) return group.status();
  process_group_ = *group;
  if (absl::Status status = CheckCollectives(backend); !status.ok()) return status;

  try {
    // Every rank starts from rank 0's parameters and buffers (on the device, or where the subclass keeps them). Those
    // still on the meta device have no values yet: the strategy that gives them theirs (fsdp) broadcasts them then.
    std::vector<at::Tensor> states;
    for (const at::Tensor& parameter : model.parameters()) {
      if (!parameter.is_meta()) states.push_back(parameter.detach());
    }
    for (const at::Tensor& buffer : model.buffers()) {
      if (!buffer.is_meta()) states.push_back(buffer.detach());
    }
    if (!states.empty()) c10d::broadcast_coalesced(process_group_, states, kBroadcastBucketBytes, 0);
  } catch (const std::exception& e) {
    return NotMet(absl::StrCat("broadcasting rank 0's parameters over ", backend, " failed: ",
                               compat::ExceptionMessage(e)));
  }
  LOG(INFO) << name() << ": rank " << global_rank_ << " of " << world_size_ << " joined at " << address_ << ":" << port_;
  return absl::OkStatus();
}

absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> ParallelStrategy::MakeGroup(int rank, int size,
                                                                                 const std::string& prefix) {
  const std::string native = accelerator_->ProcessGroupBackend();
  CollectiveOptions collective = collective_;
  collective.rank = rank;
  collective.world_size = size;
  // Each backend meets under its own prefix, so that their keys never collide.
  const auto prefixed = [&](const std::string& name) {
    CollectiveOptions options = collective;
    options.store = c10::make_intrusive<c10d::PrefixStore>(absl::StrCat(prefix, "/", name), store_);
    return options;
  };
  // Gloo is Kiln's own unless the accelerator makes a backend of that name itself.
  const std::vector<std::string> offered = accelerator_->ProcessGroupBackends();
  const bool accelerators = backend_ == native || std::find(offered.begin(), offered.end(), backend_) != offered.end();
  CollectiveOptions device_options = prefixed("device/" + backend_);
  device_options.backend = backend_ == native ? "" : backend_;
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> device_backend =
      accelerators ? accelerator_->MakeCollectiveBackend(logical_device_, device_options)
                   : MakeGlooCollectiveBackend(prefixed("device/gloo"));
  if (!device_backend.ok()) {
    // Ranks that never connected are a join failure, said as every other one is; anything else is the backend's.
    const absl::StatusCode code = device_backend.status().code();
    if (code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded) {
      return NotMet(absl::StrCat("accelerator '", accelerator_->name(), "''s collective backend '", backend_,
                                 "' did not connect: ", device_backend.status().message()));
    }
    return absl::Status(code,
                        absl::StrCat("rank ", global_rank_, " of ", world_size_, ": accelerator '",
                                     accelerator_->name(), "' could not make its collective backend '", backend_,
                                     "': ", device_backend.status().message()));
  }
  c10::intrusive_ptr<c10d::Store> store = store_;
  if (prefix != "kiln") store = c10::make_intrusive<c10d::PrefixStore>(prefix, store_);
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size);
  group->setBackend(device_.type(), BackendTypeOf(backend_), *device_backend);
  group->setDefaultBackend(BackendTypeOf(backend_));
  if (!device_.is_cpu()) {
    // Host values (a metric packed on the CPU, the bucket order the reducer agrees on) travel on Gloo.
    absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> host = MakeGlooCollectiveBackend(prefixed("host/gloo"));
    if (!host.ok()) return NotMet(host.status().message());
    group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, *host);
  }
  return group;
}

absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> ParallelStrategy::MakeSubgroup(const std::vector<int>& ranks,
                                                                                    const std::string& name) {
  const auto me = std::find(ranks.begin(), ranks.end(), global_rank_);
  if (me == ranks.end()) {
    return absl::InternalError(absl::StrCat("rank ", global_rank_, " is not in the group '", name, "' it makes"));
  }
  return MakeGroup(static_cast<int>(me - ranks.begin()), static_cast<int>(ranks.size()), "kiln/" + name);
}

std::vector<std::string> ParallelStrategy::ExchangeThroughStore(const std::string& what, const std::string& mine) {
  const c10::intrusive_ptr<c10d::Store> store = store_;  // Set and reset on the loop's thread, outside any write.
  if (store == nullptr) {
    throw std::runtime_error(
        absl::StrCat("rank ", global_rank_, ": ", what, ": the processes have not met (or have parted)"));
  }
  // Each exchange its own keys, numbered alike on every rank (all make the same exchanges in the same order). A
  // rank's key of two exchanges back is read by everyone already (each has entered the last one), so it goes.
  const int64_t round = exchange_rounds_++;
  const auto key = [](int64_t number, int rank) { return absl::StrCat("kiln/exchange/", number, "/", rank); };
  try {
    if (round >= 2) (void)store->deleteKey(key(round - 2, global_rank_));
    store->set(key(round, global_rank_), std::vector<uint8_t>(mine.begin(), mine.end()));
    std::vector<std::string> keys;
    for (int rank = 0; rank < world_size_; ++rank) keys.push_back(key(round, rank));
    store->wait(keys, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_)));
    std::vector<std::string> all;
    for (const std::string& name : keys) {
      const std::vector<uint8_t> bytes = store->get(name);
      all.emplace_back(bytes.begin(), bytes.end());
    }
    return all;
  } catch (const std::exception& e) {
    throw std::runtime_error(absl::StrCat("rank ", global_rank_, " of ", world_size_, ": ", what,
                                          " (through the run's store) failed: ", compat::ExceptionMessage(e),
                                          "; a rank that died or never took part leaves the others waiting up to "
                                          "the timeout (", absl::FormatDuration(timeout_), ")"));
  }
}

absl::Status ParallelStrategy::Teardown() {
  ReleaseState();
  process_group_.reset();
  store_.reset();
  exchange_rounds_ = 0;
  if (!device_set_up_) return absl::OkStatus();
  device_set_up_ = false;
  return accelerator_->TeardownDevice(logical_device_);
}

Batch ParallelStrategy::BatchToDevice(const Batch& batch) const { return MoveBatch(batch, device_); }

at::Tensor ParallelStrategy::ReduceMean(const at::Tensor& value) {
  return Collective("reducing a logged value", [&] {
    // On the value's own device: the group's backend for its type carries it (Gloo for host values).
    std::vector<at::Tensor> tensors = {value.detach().to(at::kDouble).clone()};
    process_group_->allreduce(tensors)->wait();
    return (tensors[0] / world_size_).to(value.scalar_type());
  });
}

std::vector<at::Tensor> ParallelStrategy::AllGather(const at::Tensor& value) {
  TORCH_CHECK(value.dim() >= 1, "AllGather needs a tensor with a first dimension, got a scalar");
  return Collective("gathering values from every rank", [&] {
    // On this process's device, over the accelerator's backend; the values come back to the CPU.
    const at::Tensor local = value.detach().to(device_).contiguous();
    // The first dimensions first, then every value padded to the longest, then trimmed back.
    std::vector<at::Tensor> size = {at::scalar_tensor(local.size(0), at::TensorOptions(at::kLong).device(device_))};
    std::vector<std::vector<at::Tensor>> sizes(1);
    for (int r = 0; r < world_size_; ++r) sizes[0].push_back(at::empty_like(size[0]));
    process_group_->allgather(sizes, size)->wait();
    int64_t longest = 0;
    for (const at::Tensor& s : sizes[0]) longest = std::max(longest, s.item<int64_t>());
    std::vector<int64_t> shape = local.sizes().vec();
    shape[0] = longest;
    std::vector<at::Tensor> input = {at::zeros(shape, local.options())};
    input[0].slice(0, 0, local.size(0)).copy_(local);
    std::vector<std::vector<at::Tensor>> output(1);
    for (int r = 0; r < world_size_; ++r) output[0].push_back(at::empty_like(input[0]));
    process_group_->allgather(output, input)->wait();
    std::vector<at::Tensor> values;
    for (int r = 0; r < world_size_; ++r) {
      values.push_back(output[0][r].slice(0, 0, sizes[0][r].item<int64_t>()).to(at::kCPU));
    }
    return values;
  });
}

bool ParallelStrategy::ReduceAny(bool decision) {
  return Collective("agreeing on a decision of every rank", [&] {
    std::vector<at::Tensor> tensors = {at::scalar_tensor(decision ? 1 : 0, at::TensorOptions(at::kInt).device(device_))};
    c10d::AllreduceOptions max;
    max.reduceOp = c10d::ReduceOp::MAX;
    process_group_->allreduce(tensors, max)->wait();
    return tensors[0].item<int>() != 0;
  });
}

c10::intrusive_ptr<c10d::ProcessGroup> ParallelStrategy::LayerSyncProcessGroup() const { return process_group_; }

void ParallelStrategy::Barrier() {
  Collective("waiting at a barrier", [&] { process_group_->barrier()->wait(); });
}

absl::Status ParallelStrategy::CheckCollectives(const std::string& backend) {
  // One all-reduce of each rank's number + 1 on this process's device, before any training: a backend that cannot
  // carry the device's tensors, or sums wrongly, is refused here with what to do, not inside the first backward.
  const int64_t expected = static_cast<int64_t>(world_size_) * (world_size_ + 1) / 2;
  int64_t got = -1;
  try {
    std::vector<at::Tensor> probe = {at::full({1}, global_rank_ + 1, at::TensorOptions(at::kFloat).device(device_))};
    process_group_->allreduce(probe)->wait();
    got = static_cast<int64_t>(probe[0].to(at::kCPU).item<float>());
  } catch (const std::exception& e) {
    // A peer that failed or did not come (c10d's DistError, as hal/collectives.h asks backends to throw then) is a
    // join failure to look for among the ranks, not a backend to bring.
    if (IsPeerFailure(e)) {
      return NotMet(absl::StrCat("the first all-reduce on ", device_.str(), " over '", backend, "' failed: ",
                                 FirstLine(compat::ExceptionMessage(e))));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", global_rank_, " of ", world_size_, ": the collective backend '", backend, "' cannot all-reduce ",
        device_.str(), " tensors (", FirstLine(compat::ExceptionMessage(e)), "); ",
        backend == accelerator_->ProcessGroupBackend()
            ? absl::StrCat("the accelerator '", accelerator_->name(),
                           "' must bring a backend for its device type (Accelerator::MakeCollectiveBackend)")
            : absl::StrCat("use the accelerator's own backend '", accelerator_->ProcessGroupBackend(),
                           "': set process_group_backend to it, or leave it unset")));
  }
  if (got != expected) {
    return absl::InternalError(absl::StrCat("rank ", global_rank_, " of ", world_size_, ": the collective backend '",
                                            backend, "' summed 1..", world_size_, " to ", got, " on ", device_.str(),
                                            ", not ", expected, "; its all-reduce is wrong"));
  }
  return absl::OkStatus();
}

}  // namespace kiln
