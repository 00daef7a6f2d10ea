#include "collectives.h"

#include <utility>

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"
#include "device.h"
#include "hal/completed_work.h"

namespace virtual_npu {
namespace {

void CheckOnDevice(const at::Tensor& tensor, const char* what) {
  TORCH_CHECK(tensor.device().type() == kDeviceType, kCollectiveBackendName, ": ", what, " got a tensor on ",
              tensor.device(), "; it carries ", kDeviceName, " tensors only");
}

std::vector<at::Tensor> ToHost(const std::vector<at::Tensor>& tensors, const char* what) {
  std::vector<at::Tensor> host;
  host.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors) {
    CheckOnDevice(tensor, what);
    host.push_back(tensor.to(at::kCPU).contiguous());
  }
  return host;
}

void FromHost(std::vector<at::Tensor>& device, const std::vector<at::Tensor>& host) {
  for (size_t i = 0; i < device.size(); ++i) device[i].copy_(host[i]);
}

}  // namespace

Collectives::Collectives(int rank, int size, c10::intrusive_ptr<c10d::Backend> host)
    : c10d::Backend(rank, size), host_(std::move(host)) {}

absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> Collectives::Create(const kiln::CollectiveOptions& options) {
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> host = kiln::MakeGlooCollectiveBackend(options);
  if (!host.ok()) {
    return absl::Status(host.status().code(),
                        absl::StrCat(kCollectiveBackendName, "'s host transport: ", host.status().message()));
  }
  return c10::intrusive_ptr<c10d::Backend>(
      c10::make_intrusive<Collectives>(options.rank, options.world_size, *std::move(host)));
}

c10::intrusive_ptr<c10d::Work> Collectives::allreduce(std::vector<at::Tensor>& tensors,
                                                      const c10d::AllreduceOptions& opts) {
  std::vector<at::Tensor> host = ToHost(tensors, "allreduce");
  host_->allreduce(host, opts)->wait();
  FromHost(tensors, host);
  return kiln::CompletedWork(getRank(), c10d::OpType::ALLREDUCE, tensors);
}

c10::intrusive_ptr<c10d::Work> Collectives::broadcast(std::vector<at::Tensor>& tensors,
                                                      const c10d::BroadcastOptions& opts) {
  std::vector<at::Tensor> host = ToHost(tensors, "broadcast");
  host_->broadcast(host, opts)->wait();
  FromHost(tensors, host);
  return kiln::CompletedWork(getRank(), c10d::OpType::BROADCAST, tensors);
}

c10::intrusive_ptr<c10d::Work> Collectives::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> host_inputs = ToHost(inputs, "allgather");
  std::vector<std::vector<at::Tensor>> host_outputs;
  for (const std::vector<at::Tensor>& list : outputs) host_outputs.push_back(ToHost(list, "allgather"));
  host_->allgather(host_outputs, host_inputs, opts)->wait();
  std::vector<at::Tensor> results;
  for (size_t i = 0; i < outputs.size(); ++i) {
    FromHost(outputs[i], host_outputs[i]);
    results.insert(results.end(), outputs[i].begin(), outputs[i].end());
  }
  return kiln::CompletedWork(getRank(), c10d::OpType::ALLGATHER, std::move(results));
}

c10::intrusive_ptr<c10d::Work> Collectives::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                            const c10d::AllgatherOptions& opts) {
  return StagedFlat(output, input, "_allgather_base", c10d::OpType::_ALLGATHER_BASE,
                    [&](at::Tensor& out, at::Tensor& in) { return host_->_allgather_base(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> Collectives::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                           std::vector<std::vector<at::Tensor>>& inputs,
                                                           const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> host_outputs = ToHost(outputs, "reduce_scatter");
  std::vector<std::vector<at::Tensor>> host_inputs;
  for (const std::vector<at::Tensor>& list : inputs) host_inputs.push_back(ToHost(list, "reduce_scatter"));
  host_->reduce_scatter(host_outputs, host_inputs, opts)->wait();
  FromHost(outputs, host_outputs);
  return kiln::CompletedWork(getRank(), c10d::OpType::REDUCE_SCATTER, outputs);
}

c10::intrusive_ptr<c10d::Work> Collectives::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::ReduceScatterOptions& opts) {
  return StagedFlat(output, input, "_reduce_scatter_base", c10d::OpType::_REDUCE_SCATTER_BASE,
                    [&](at::Tensor& out, at::Tensor& in) { return host_->_reduce_scatter_base(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> Collectives::StagedFlat(
    at::Tensor& output, at::Tensor& input, const char* what, c10d::OpType type,
    const std::function<c10::intrusive_ptr<c10d::Work>(at::Tensor&, at::Tensor&)>& host_call) {
  CheckOnDevice(output, what);
  CheckOnDevice(input, what);
  at::Tensor host_output = output.to(at::kCPU).contiguous();
  at::Tensor host_input = input.to(at::kCPU).contiguous();
  host_call(host_output, host_input)->wait();
  output.copy_(host_output);
  return kiln::CompletedWork(getRank(), type, std::vector<at::Tensor>{output});
}

c10::intrusive_ptr<c10d::Work> Collectives::barrier(const c10d::BarrierOptions& opts) {
  host_->barrier(opts)->wait();
  return kiln::CompletedWork(getRank(), c10d::OpType::BARRIER, std::vector<at::Tensor>{});
}

}  // namespace virtual_npu
