#include "trainer/ddp_strategy.h"

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <vector>

#include "ATen/ATen.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "hal/compat/c10d.h"
#include "torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"
#include "torch/csrc/distributed/c10d/TCPStore.hpp"
#include "torch/csrc/distributed/c10d/comm.hpp"
#include "trainer/gradient_reducer.h"

namespace kiln {
namespace {

constexpr size_t kBroadcastBucketBytes = 250 * 1024 * 1024;  // PyTorch DDP's _sync_module_states bucket.
constexpr size_t kFirstBucketBytes = 1024 * 1024;            // PyTorch DDP's _DEFAULT_FIRST_BUCKET_BYTES.

std::chrono::milliseconds Millis(absl::Duration duration) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(duration));
}

bool IsLoopback(const std::string& address) {
  return address == "localhost" || absl::StartsWith(address, "127.") || address == "::1";
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
  device_ = plan.root_device();
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

  if (absl::Status status = SetupDeviceAndModel(*accelerator_, device_, model, &device_set_up_); !status.ok()) {
    return status;
  }

  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(port);
  store_options.isServer = global_rank_ == 0;
  store_options.numWorkers = static_cast<size_t>(world_size_);
  store_options.waitWorkers = true;
  store_options.timeout = Millis(options_.timeout);
  try {
    store_ = c10::make_intrusive<c10d::TCPStore>(address, store_options);
  } catch (const std::exception& e) {
    const std::string message = e.what();
    if (absl::StrContains(message, "ddress already in use")) {
      return absl::FailedPreconditionError(absl::StrCat(
          "MASTER_PORT=", port, " is already in use on this machine; pick another port, or unset MASTER_PORT to "
          "let Kiln choose a free one (", message, ")"));
    }
    return NotMet(address, port, message);
  }

  try {
    auto group_options = c10d::ProcessGroupGloo::Options::create(Millis(options_.timeout));
    group_options->devices.push_back(IsLoopback(address)
                                         ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                         : c10d::ProcessGroupGloo::createDefaultDevice());
    process_group_ = compat::MakeGlooProcessGroup(store_, global_rank_, world_size_, group_options);

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
  return accelerator_->TeardownDevice(device_);
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
  return Collective("agreeing on whether to stop", [&] {
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
