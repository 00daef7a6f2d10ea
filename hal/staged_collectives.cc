#include "hal/staged_collectives.h"

#include <utility>

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"
#include "c10/util/Exception.h"
#include "hal/compat/error_message.h"
#include "hal/completed_work.h"

namespace kiln {
namespace {

void FromHost(std::vector<at::Tensor> &device,
              const std::vector<at::Tensor> &host) {
  for (size_t i = 0; i < device.size(); ++i)
    device[i].copy_(host[i]);
}

} // namespace

StagedCollectives::StagedCollectives(int rank, int size,
                                     c10::intrusive_ptr<c10d::Backend> host,
                                     std::string name,
                                     c10::DeviceType device_type)
    : c10d::Backend(rank, size), host_(std::move(host)), name_(std::move(name)),
      device_type_(device_type) {}

void StagedCollectives::CheckOnDevice(const at::Tensor &tensor,
                                      const char *what) const {
  TORCH_CHECK(tensor.device().type() == device_type_, name_, ": ", what,
              " got a tensor on ", tensor.device(), "; it carries ",
              c10::DeviceTypeName(device_type_, /*lower_case=*/true),
              " tensors only");
}

void StagedCollectives::Wait(const char *what,
                             const c10::intrusive_ptr<c10d::Work> &work) const {
  // hal/collectives.h: an error names the collective (and this rank); a peer's
  // failure stays c10d's DistBackendError.
  try {
    work->wait();
  } catch (const c10::DistError &e) {
    C10_THROW_ERROR(DistBackendError,
                    absl::StrCat(name_, " ", what, " on rank ", getRank(), " of ",
                                 getSize(), ": ", compat::ExceptionMessage(e)));
  } catch (const std::exception &e) {
    TORCH_CHECK(false, name_, " ", what, " on rank ", getRank(), " of ",
                getSize(), ": ", compat::ExceptionMessage(e));
  }
}

std::vector<at::Tensor>
StagedCollectives::ToHost(const std::vector<at::Tensor> &tensors,
                          const char *what) const {
  std::vector<at::Tensor> host;
  host.reserve(tensors.size());
  for (const at::Tensor &tensor : tensors) {
    CheckOnDevice(tensor, what);
    host.push_back(tensor.to(at::kCPU).contiguous());
  }
  return host;
}

absl::StatusOr<c10::intrusive_ptr<c10d::Backend>>
StagedCollectives::Create(const CollectiveOptions &options, std::string name,
                          c10::DeviceType device_type) {
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> host =
      MakeGlooCollectiveBackend(options);
  if (!host.ok()) {
    return absl::Status(
        host.status().code(),
        absl::StrCat(name, "'s host transport: ", host.status().message()));
  }
  return c10::intrusive_ptr<c10d::Backend>(
      c10::make_intrusive<StagedCollectives>(options.rank, options.world_size,
                                             *std::move(host), std::move(name),
                                             device_type));
}

c10::intrusive_ptr<c10d::Work>
StagedCollectives::allreduce(std::vector<at::Tensor> &tensors,
                             const c10d::AllreduceOptions &opts) {
  std::vector<at::Tensor> host = ToHost(tensors, "allreduce");
  Wait("allreduce", host_->allreduce(host, opts));
  FromHost(tensors, host);
  return CompletedWork(getRank(), c10d::OpType::ALLREDUCE, tensors);
}

c10::intrusive_ptr<c10d::Work>
StagedCollectives::broadcast(std::vector<at::Tensor> &tensors,
                             const c10d::BroadcastOptions &opts) {
  std::vector<at::Tensor> host = ToHost(tensors, "broadcast");
  Wait("broadcast", host_->broadcast(host, opts));
  FromHost(tensors, host);
  return CompletedWork(getRank(), c10d::OpType::BROADCAST, tensors);
}

c10::intrusive_ptr<c10d::Work>
StagedCollectives::allgather(std::vector<std::vector<at::Tensor>> &outputs,
                             std::vector<at::Tensor> &inputs,
                             const c10d::AllgatherOptions &opts) {
  std::vector<at::Tensor> host_inputs = ToHost(inputs, "allgather");
  std::vector<std::vector<at::Tensor>> host_outputs;
  for (const std::vector<at::Tensor> &list : outputs)
    host_outputs.push_back(ToHost(list, "allgather"));
  Wait("allgather", host_->allgather(host_outputs, host_inputs, opts));
  std::vector<at::Tensor> results;
  for (size_t i = 0; i < outputs.size(); ++i) {
    FromHost(outputs[i], host_outputs[i]);
    results.insert(results.end(), outputs[i].begin(), outputs[i].end());
  }
  return CompletedWork(getRank(), c10d::OpType::ALLGATHER, std::move(results));
}

c10::intrusive_ptr<c10d::Work>
StagedCollectives::_allgather_base(at::Tensor &output, at::Tensor &input,
                                   const c10d::AllgatherOptions &opts) {
  return StagedFlat(output, input, "_allgather_base",
                    c10d::OpType::_ALLGATHER_BASE,
                    [&](at::Tensor &out, at::Tensor &in) {
                      return host_->_allgather_base(out, in, opts);
                    });
}

c10::intrusive_ptr<c10d::Work>
StagedCollectives::reduce_scatter(std::vector<at::Tensor> &outputs,
                                  std::vector<std::vector<at::Tensor>> &inputs,
                                  const c10d::ReduceScatterOptions &opts) {
  std::vector<at::Tensor> host_outputs = ToHost(outputs, "reduce_scatter");
  std::vector<std::vector<at::Tensor>> host_inputs;
  for (const std::vector<at::Tensor> &list : inputs)
    host_inputs.push_back(ToHost(list, "reduce_scatter"));
  Wait("reduce_scatter", host_->reduce_scatter(host_outputs, host_inputs, opts));
  FromHost(outputs, host_outputs);
  return CompletedWork(getRank(), c10d::OpType::REDUCE_SCATTER, outputs);
}

c10::intrusive_ptr<c10d::Work> StagedCollectives::_reduce_scatter_base(
    at::Tensor &output, at::Tensor &input,
    const c10d::ReduceScatterOptions &opts) {
  return StagedFlat(output, input, "_reduce_scatter_base",
                    c10d::OpType::_REDUCE_SCATTER_BASE,
                    [&](at::Tensor &out, at::Tensor &in) {
                      return host_->_reduce_scatter_base(out, in, opts);
                    });
}

c10::intrusive_ptr<c10d::Work> StagedCollectives::StagedFlat(
    at::Tensor &output, at::Tensor &input, const char *what, c10d::OpType type,
    const std::function<c10::intrusive_ptr<c10d::Work>(
        at::Tensor &, at::Tensor &)> &host_call) {
  CheckOnDevice(output, what);
  CheckOnDevice(input, what);
  at::Tensor host_output = output.to(at::kCPU).contiguous();
  at::Tensor host_input = input.to(at::kCPU).contiguous();
  Wait(what, host_call(host_output, host_input));
  output.copy_(host_output);
  return CompletedWork(getRank(), type, std::vector<at::Tensor>{output});
}

c10::intrusive_ptr<c10d::Work>
StagedCollectives::barrier(const c10d::BarrierOptions &opts) {
  Wait("barrier", host_->barrier(opts));
  return CompletedWork(getRank(), c10d::OpType::BARRIER,
                       std::vector<at::Tensor>{});
}

} // namespace kiln
