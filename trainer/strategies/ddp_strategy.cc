#include "trainer/strategies/ddp_strategy.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

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
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "hal/compat/c10d.h"
#include "torch/csrc/distributed/c10d/PrefixStore.hpp"
#include "torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"
#include "torch/csrc/distributed/c10d/TCPStore.hpp"
#include "torch/csrc/distributed/c10d/comm.hpp"
#include "trainer/strategies/gloo_devices.h"
#include "trainer/strategies/gradient_reducer.h"

namespace kiln {
namespace {

constexpr size_t kBroadcastBucketBytes = 250 * 1024 * 1024;  // PyTorch DDP's _sync_module_states bucket.
constexpr size_t kFirstBucketBytes = 1024 * 1024;            // PyTorch DDP's _DEFAULT_FIRST_BUCKET_BYTES.

constexpr char kJoinedKey[] = "kiln/ranks_joined";

std::chrono::milliseconds Millis(absl::Duration duration) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(duration));
}

// What is left until `deadline`, at least a millisecond (c10d treats 0 as "no timeout").
std::chrono::milliseconds Remaining(absl::Time deadline) {
  return std::max(std::chrono::milliseconds(1), Millis(deadline - absl::Now()));
}

// Waits until something accepts TCP connections at address:port, or the deadline passes. Each attempt is a
// non-blocking connect bounded by the time left, so a host that drops packets cannot hold it past the deadline.
absl::Status WaitForListener(const std::string& address, int port, absl::Time deadline) {
  addrinfo hints = {};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int error = ::getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found); error != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve MASTER_ADDR '", address, "': ", gai_strerror(error)));
  }
  std::string last_error = "nothing answered";
  while (true) {
    for (addrinfo* entry = found; entry != nullptr; entry = entry->ai_next) {
      const int fd = ::socket(entry->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      int error = ::connect(fd, entry->ai_addr, entry->ai_addrlen) == 0 ? 0 : errno;
      if (error == EINPROGRESS) {
        pollfd poll_fd = {fd, POLLOUT, 0};
        const int wait_ms = static_cast<int>(std::min<int64_t>(1000, Remaining(deadline).count()));
        if (::poll(&poll_fd, 1, wait_ms) == 1) {
          socklen_t length = sizeof(error);
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
        } else {
          error = ETIMEDOUT;
        }
      }
      ::close(fd);
      if (error == 0) {
        ::freeaddrinfo(found);
        return absl::OkStatus();
      }
      last_error = absl::StrCat("connect to ", address, ":", port, ": ", std::strerror(error));
    }
    if (absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ::freeaddrinfo(found);
  return absl::DeadlineExceededError(absl::StrCat("rank 0's store never answered: ", last_error));
}

}  // namespace

DDPStrategy::DDPStrategy(DDPOptions options) : options_(std::move(options)) {}

DDPStrategy::~DDPStrategy() = default;

template <typename Fn>
auto DDPStrategy::Collective(const char* what, Fn&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    throw std::runtime_error(absl::StrCat("rank ", global_rank_, " of ", world_size_, ": ", what, " failed: ",
                                          e.what(), " (another rank has probably died or stopped answering; the "
                                          "timeout is ", absl::FormatDuration(options_.timeout), ")"));
  }
}

absl::Status DDPStrategy::NotMet(const std::string& address, int port, absl::string_view cause) const {
  return absl::DeadlineExceededError(absl::StrCat(
      "rank ", global_rank_, " of ", world_size_, " could not meet the other ranks at ", address, ":", port,
      " within ", absl::FormatDuration(options_.timeout), " (", cause,
      "). Check that every rank was started, with the same MASTER_ADDR, MASTER_PORT and world size"));
}

absl::Status DDPStrategy::Setup(const Plan& plan, torch::nn::Module& model) {
  accelerator_ = plan.accelerator;
  logical_device_ = plan.root_logical_device();
  device_ = logical_device_.compute;
  global_rank_ = plan.global_rank;
  world_size_ = plan.world_size;
  const std::string backend = plan.process_group_backend.value_or(accelerator_->ProcessGroupBackend());
  if (backend != "gloo") {
    return absl::FailedPreconditionError(absl::StrCat(
        "process group backend '", backend, "' is not available in this LibTorch build; available: gloo",
        backend == "nccl" ? " (nccl needs a CUDA build of LibTorch: build Kiln with --config=cuda)" : ""));
  }
  if (!plan.main_port.has_value()) {
    return absl::FailedPreconditionError(
        "ddp needs a main port for the processes to meet: set MASTER_PORT (and MASTER_ADDR) on every node");
  }
  const std::string address = plan.main_address.empty() ? "127.0.0.1" : plan.main_address;
  const int port = *plan.main_port;

  if (absl::Status status = SetupDeviceAndModel(*accelerator_, logical_device_, model, &device_set_up_); !status.ok()) {
    return status;
  }

  // Every wait below shares one deadline, so that joining fails within the timeout, not once per phase.
  const absl::Time deadline = absl::Now() + options_.timeout;
  const bool launcher_store = plan.launcher_store_prefix.has_value();
  const bool serves_store = !launcher_store && global_rank_ == 0;
  if (!serves_store) {
    // TCPStore's own connect is bounded by the kernel's SYN retries (minutes) for a host that does not answer.
    if (absl::Status answered = WaitForListener(address, port, deadline); !answered.ok()) {
      return NotMet(address, port, answered.message());
    }
  }

  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(port);
  // torchrun's agent (its default, static rendezvous) already serves the store: every rank joins it as a client,
  // under this attempt's prefix, as torch.distributed's env:// rendezvous does. Otherwise rank 0 serves it.
  store_options.isServer = serves_store;
  store_options.numWorkers = static_cast<size_t>(world_size_);
  store_options.waitWorkers = false;  // The check-in below waits, against the deadline.
  store_options.timeout = Remaining(deadline);
  try {
    c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>(address, store_options);
    store_ = store;
    if (launcher_store) store_ = c10::make_intrusive<c10d::PrefixStore>(*plan.launcher_store_prefix, store);
    // Every rank checks in; Gloo then connects peers that are all there, so its own wait is short.
    store_->add(kJoinedKey, 1);
    for (int64_t joined = 0; (joined = store_->add(kJoinedKey, 0)) < world_size_;) {
      if (absl::Now() >= deadline) {
        return NotMet(address, port, absl::StrCat(joined, " of ", world_size_, " ranks joined"));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  } catch (const std::exception& e) {
    const std::string message = e.what();
    if (absl::StrContains(message, "ddress already in use")) {
      return absl::FailedPreconditionError(absl::StrCat(
          "MASTER_PORT=", port, " is already in use on this machine; pick another port, or unset MASTER_PORT to "
          "let Kiln choose a free one (", message, ")"));
    }
    // A launcher's store speaks its own PyTorch's protocol (torchrun from another PyTorch resets the connection).
    return NotMet(address, port,
                  launcher_store ? absl::StrCat(message, "; the launcher serves this store: it must come from a "
                                                         "PyTorch of the same version as Kiln's LibTorch, or use "
                                                         "torchrun --rdzv_backend=c10d, where rank 0 serves it")
                                 : message);
  }

  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  absl::StatusOr<std::vector<GlooDevice>> devices =
      ChooseGlooDevices(address, ifname != nullptr ? ifname : "", HostFacts::Probe(address));
  if (!devices.ok()) return devices.status();
  try {
    auto group_options = c10d::ProcessGroupGloo::Options::create(Millis(options_.timeout));
    for (const GlooDevice& device : *devices) {
      try {
        group_options->devices.push_back(device.is_interface
                                             ? c10d::ProcessGroupGloo::createDeviceForInterface(device.name)
                                             : c10d::ProcessGroupGloo::createDeviceForHostname(device.name));
      } catch (const std::exception& e) {
        return absl::FailedPreconditionError(absl::StrCat(
            device.is_interface ? "GLOO_SOCKET_IFNAME names the interface '" : "cannot use the address '",
            device.name, "', which Gloo cannot use (", e.what(), "); pass an interface of this host (`ip -brief "
            "address` lists them)"));
      }
    }
    process_group_ =
        compat::MakeGlooProcessGroup(store_, global_rank_, world_size_, group_options, Remaining(deadline));

    // Every rank starts from rank 0's parameters and buffers.
    std::vector<at::Tensor> states;
    for (const at::Tensor& parameter : model.parameters()) states.push_back(parameter.detach());
    for (const at::Tensor& buffer : model.buffers()) states.push_back(buffer.detach());
    if (!states.empty()) c10d::broadcast_coalesced(process_group_, states, kBroadcastBucketBytes, 0);

    // Bucketed gradient all-reduce, overlapped with backward (gradient_reducer.h).
    std::vector<at::Tensor> parameters;
    for (const at::Tensor& parameter : model.parameters()) {
      if (parameter.requires_grad()) parameters.push_back(parameter);
    }
    reducer_ = std::make_unique<GradientReducer>(parameters, process_group_, kFirstBucketBytes,
                                                 static_cast<size_t>(options_.bucket_cap_mb) * 1024 * 1024);
  } catch (const std::exception& e) {
    return NotMet(address, port, absl::StrCat("setting up the gloo process group failed: ", e.what()));
  }
  LOG(INFO) << "ddp: rank " << global_rank_ << " of " << world_size_ << " joined at " << address << ":" << port;
  return absl::OkStatus();
}

absl::Status DDPStrategy::Teardown() {
  reducer_.reset();
  process_group_.reset();
  store_.reset();
  if (!device_set_up_) return absl::OkStatus();
  device_set_up_ = false;
  return accelerator_->TeardownDevice(logical_device_);
}

Batch DDPStrategy::BatchToDevice(const Batch& batch) const { return MoveBatch(batch, device_); }

void DDPStrategy::Backward(const at::Tensor& loss, bool sync_gradients) {
  Collective("the backward pass's gradient all-reduce", [&] {
    if (sync_gradients) reducer_->PrepareForBackward();
    loss.backward();
    if (sync_gradients) reducer_->FinishBackward();
  });
}

void DDPStrategy::OptimizerStep(torch::optim::Optimizer& optimizer) { optimizer.step(); }

at::Tensor DDPStrategy::ReduceMean(const at::Tensor& value) {
  return Collective("reducing a logged value", [&] {
    std::vector<at::Tensor> tensors = {value.detach().to(at::kCPU, at::kDouble).clone()};
    process_group_->allreduce(tensors)->wait();
    return (tensors[0] / world_size_).to(value.device(), value.scalar_type());
  });
}

std::vector<at::Tensor> DDPStrategy::AllGather(const at::Tensor& value) {
  TORCH_CHECK(value.dim() >= 1, "AllGather needs a tensor with a first dimension, got a scalar");
  return Collective("gathering values from every rank", [&] {
    const at::Tensor local = value.detach().to(at::kCPU).contiguous();
    // The first dimensions first, then every value padded to the longest, then trimmed back.
    std::vector<at::Tensor> size = {at::scalar_tensor(local.size(0), at::kLong)};
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
    for (int r = 0; r < world_size_; ++r) values.push_back(output[0][r].slice(0, 0, sizes[0][r].item<int64_t>()));
    return values;
  });
}

bool DDPStrategy::ReduceAny(bool decision) {
  return Collective("agreeing on a decision of every rank", [&] {
    std::vector<at::Tensor> tensors = {at::scalar_tensor(decision ? 1 : 0, at::kInt)};
    c10d::AllreduceOptions max;
    max.reduceOp = c10d::ReduceOp::MAX;
    process_group_->allreduce(tensors, max)->wait();
    return tensors[0].item<int>() != 0;
  });
}

void DDPStrategy::Barrier() {
  Collective("waiting at a barrier", [&] { process_group_->barrier()->wait(); });
}

}  // namespace kiln
