#include "hal/plugin/plugin_collectives.h"

#include <cstring>
#include <optional>
#include <utility>

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"
#include "c10/util/Exception.h"
#include "hal/compat/error_message.h"
#include "hal/completed_work.h"

namespace kiln {
namespace {

std::optional<KILN_Data_Type> DataTypeOf(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return KILN_DATA_TYPE_FLOAT32;
    case at::kDouble:
      return KILN_DATA_TYPE_FLOAT64;
    case at::kHalf:
      return KILN_DATA_TYPE_FLOAT16;
    case at::kBFloat16:
      return KILN_DATA_TYPE_BFLOAT16;
    case at::kChar:
      return KILN_DATA_TYPE_INT8;
    case at::kByte:
      return KILN_DATA_TYPE_UINT8;
    case at::kInt:
      return KILN_DATA_TYPE_INT32;
    case at::kLong:
      return KILN_DATA_TYPE_INT64;
    case at::kBool:
      return KILN_DATA_TYPE_BOOL;
    default:
      return std::nullopt;
  }
}

const char* ReduceOpName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNUSED";
  }
}

// The data of one tensor as the C API takes it: a contiguous tensor (the original, or a copy to write back).
struct Buffer {
  at::Tensor tensor;
  KILN_Data_Type data_type;
  size_t count() const { return static_cast<size_t>(tensor.numel()); }
  void* data() const { return tensor.data_ptr(); }
};

}  // namespace

PluginCollectives::PluginCollectives(std::shared_ptr<const PluginLibrary> library, std::string name,
                                     c10::DeviceType device_type, int rank, int size, KILN_Communicator* communicator)
    : c10d::Backend(rank, size),
      library_(std::move(library)),
      name_(std::move(name)),
      device_type_(device_type),
      communicator_(communicator) {}

absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> PluginCollectives::Create(
    std::shared_ptr<const PluginLibrary> library, std::string name, c10::DeviceType device_type,
    const CollectiveOptions& options) {
  const KILN_Plugin_Api& api = library->api();
  const std::string who = absl::StrCat("rank ", options.rank, " of ", options.world_size, ": ", name,
                                       " (accelerator plugin '", library->path(), "')");
  KILN_Collectives_CommInit_Args init{};
  init.struct_size = KILN_Collectives_CommInit_Args_STRUCT_SIZE;
  std::vector<uint8_t> id;
  if (options.rank == 0) {
    KILN_Collectives_GetUniqueId_Args args{};
    args.struct_size = KILN_Collectives_GetUniqueId_Args_STRUCT_SIZE;
    if (absl::Status status = library->Call("Collectives_GetUniqueId", api.Collectives_GetUniqueId, &args);
        !status.ok()) {
      return status;
    }
    if (args.unique_id_size == 0 || args.unique_id_size > KILN_COLLECTIVES_UNIQUE_ID_MAX_BYTES) {
      return absl::InternalError(absl::StrCat(who, ": Collectives_GetUniqueId gave a unique id of ",
                                              args.unique_id_size, " bytes; an id has 1 to ",
                                              KILN_COLLECTIVES_UNIQUE_ID_MAX_BYTES));
    }
    id.assign(args.unique_id, args.unique_id + args.unique_id_size);
    try {
      options.store->set(kPluginUniqueIdKey, id);
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat(who, ": cannot give the other ranks the unique id: ", compat::ExceptionMessage(e)));
    }
  } else {
    try {
      options.store->wait({kPluginUniqueIdKey}, options.timeout);
      id = options.store->get(kPluginUniqueIdKey);
    } catch (const std::exception& e) {
      return absl::DeadlineExceededError(absl::StrCat(who, ": rank 0's unique id did not arrive within ",
                                                      options.timeout.count(), " ms (", compat::ExceptionMessage(e),
                                                      "); check that rank 0 runs and reached the same point"));
    }
    if (id.empty() || id.size() > KILN_COLLECTIVES_UNIQUE_ID_MAX_BYTES) {
      return absl::InternalError(absl::StrCat(who, ": the unique id in the store has ", id.size(),
                                              " bytes; an id has 1 to ", KILN_COLLECTIVES_UNIQUE_ID_MAX_BYTES));
    }
  }
  std::memcpy(init.unique_id, id.data(), id.size());
  init.unique_id_size = id.size();
  init.rank = options.rank;
  init.world_size = options.world_size;
  init.device_index = options.device_index;
  init.timeout_ms = options.timeout.count();
  if (absl::Status status = library->Call("Collectives_CommInit", api.Collectives_CommInit, &init); !status.ok()) {
    return status;
  }
  if (init.communicator == nullptr) {
    return absl::InternalError(absl::StrCat(who, ": Collectives_CommInit succeeded but gave no communicator"));
  }
  return c10::intrusive_ptr<c10d::Backend>(c10::make_intrusive<PluginCollectives>(
      std::move(library), std::move(name), device_type, options.rank, options.world_size, init.communicator));
}

PluginCollectives::~PluginCollectives() {
  KILN_Collectives_CommDestroy_Args args{};
  args.struct_size = KILN_Collectives_CommDestroy_Args_STRUCT_SIZE;
  args.communicator = communicator_;
  const absl::Status status = library_->Call("Collectives_CommDestroy", library_->api().Collectives_CommDestroy, &args);
  if (!status.ok()) TORCH_WARN(name_, ": destroying the communicator failed: ", status.message());
}

template <typename Args>
void PluginCollectives::Call(const char* collective, const char* function, KILN_Error* (*plugin_function)(Args*),
                             Args& args) {
  args.communicator = communicator_;
  absl::Status status;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    status = library_->Call(function, plugin_function, &args);
  }
  if (status.ok()) return;
  const std::string message = absl::StrCat(name_, " ", collective, " on rank ", getRank(), " of ", getSize(),
                                           " failed (", absl::StatusCodeToString(status.code()), "): ", status.message());
  // A peer that did not come or failed is c10d's DistBackendError (hal/collectives.h), as its own backends throw it.
  if (absl::IsDeadlineExceeded(status) || absl::IsUnavailable(status) || absl::IsAborted(status)) {
    C10_THROW_ERROR(DistBackendError, message);
  }
  TORCH_CHECK(false, message);
}

void PluginCollectives::CheckTensor(const at::Tensor& tensor, const char* collective) const {
  TORCH_CHECK(tensor.device().type() == device_type_, name_, " ", collective, " got a tensor on ", tensor.device(),
              "; it carries ", c10::DeviceTypeName(device_type_, /*lower_case=*/true), " tensors only");
  TORCH_CHECK(tensor.layout() == at::kStrided, name_, " ", collective, " got a ", tensor.layout(),
              " tensor; it carries dense tensors only");
}

namespace {

// `tensor` as the C API takes it; throws when its type is not one the C API names.
Buffer BufferOf(const at::Tensor& tensor, const std::string& name, const char* collective) {
  const std::optional<KILN_Data_Type> type = DataTypeOf(tensor.scalar_type());
  TORCH_CHECK(type.has_value(), name, " ", collective, " got a ", tensor.scalar_type(),
              " tensor; the plugin C API carries float32, float64, float16, bfloat16, int8, uint8, int32, int64 "
              "and bool");
  return Buffer{tensor.contiguous(), *type};
}

KILN_Reduce_Op ReduceOpOf(const c10d::ReduceOp& op, const std::string& name, const char* collective) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return KILN_REDUCE_OP_SUM;
    case c10d::ReduceOp::PRODUCT:
      return KILN_REDUCE_OP_PRODUCT;
    case c10d::ReduceOp::MIN:
      return KILN_REDUCE_OP_MIN;
    case c10d::ReduceOp::MAX:
      return KILN_REDUCE_OP_MAX;
    default:
      TORCH_CHECK(false, name, " ", collective, " with ReduceOp ", ReduceOpName(op.op_),
                  ": the plugin C API reduces with SUM, PRODUCT, MIN and MAX only");
  }
}

// Writes `result` back into `tensor` when it is a copy.
void WriteBack(at::Tensor& tensor, const at::Tensor& result) {
  if (!result.is_same(tensor)) tensor.copy_(result.view_as(tensor));
}

}  // namespace

c10::intrusive_ptr<c10d::Work> PluginCollectives::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, name_, " allreduce takes one tensor, got ", tensors.size());
  CheckTensor(tensors[0], "allreduce");
  Buffer buffer = BufferOf(tensors[0], name_, "allreduce");
  KILN_Collectives_AllReduce_Args args{};
  args.struct_size = KILN_Collectives_AllReduce_Args_STRUCT_SIZE;
  args.send_buffer = buffer.data();
  args.recv_buffer = buffer.data();
  args.count = buffer.count();
  args.data_type = buffer.data_type;
  args.op = ReduceOpOf(opts.reduceOp, name_, "allreduce");
  Call("allreduce", "Collectives_AllReduce", library_->api().Collectives_AllReduce, args);
  WriteBack(tensors[0], buffer.tensor);
  return CompletedWork(getRank(), c10d::OpType::ALLREDUCE, tensors);
}

c10::intrusive_ptr<c10d::Work> PluginCollectives::broadcast(std::vector<at::Tensor>& tensors,
                                                            const c10d::BroadcastOptions& opts) {
  TORCH_CHECK(tensors.size() == 1 && opts.rootTensor == 0, name_, " broadcast takes one tensor, got ", tensors.size(),
              " (root tensor ", opts.rootTensor, ")");
  CheckTensor(tensors[0], "broadcast");
  Buffer buffer = BufferOf(tensors[0], name_, "broadcast");
  KILN_Collectives_Broadcast_Args args{};
  args.struct_size = KILN_Collectives_Broadcast_Args_STRUCT_SIZE;
  args.buffer = buffer.data();
  args.count = buffer.count();
  args.data_type = buffer.data_type;
  args.root = static_cast<int32_t>(opts.rootRank);
  Call("broadcast", "Collectives_Broadcast", library_->api().Collectives_Broadcast, args);
  WriteBack(tensors[0], buffer.tensor);
  return CompletedWork(getRank(), c10d::OpType::BROADCAST, tensors);
}

c10::intrusive_ptr<c10d::Work> PluginCollectives::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::AllgatherOptions& /*opts*/) {
  CheckTensor(output, "allgather");
  CheckTensor(input, "allgather");
  TORCH_CHECK(output.scalar_type() == input.scalar_type() && output.numel() == input.numel() * getSize(), name_,
              " allgather needs an output of ", getSize(), " times the input's ", input.numel(), " ",
              input.scalar_type(), " elements, got ", output.numel(), " ", output.scalar_type(), " elements");
  Buffer send = BufferOf(input, name_, "allgather");
  Buffer receive = BufferOf(output, name_, "allgather");
  KILN_Collectives_AllGather_Args args{};
  args.struct_size = KILN_Collectives_AllGather_Args_STRUCT_SIZE;
  args.send_buffer = send.data();
  args.recv_buffer = receive.data();
  args.count = send.count();
  args.data_type = send.data_type;
  Call("allgather", "Collectives_AllGather", library_->api().Collectives_AllGather, args);
  WriteBack(output, receive.tensor);
  return CompletedWork(getRank(), c10d::OpType::_ALLGATHER_BASE, {output});
}

c10::intrusive_ptr<c10d::Work> PluginCollectives::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1 && outputs[0].size() == static_cast<size_t>(getSize()), name_,
              " allgather takes one input and one list of ", getSize(), " outputs");
  at::Tensor flat = at::empty({getSize() * inputs[0].numel()}, inputs[0].options());
  at::Tensor input = inputs[0];
  _allgather_base(flat, input, opts);
  const int64_t n = inputs[0].numel();
  for (int r = 0; r < getSize(); ++r) {
    at::Tensor& out = outputs[0][r];
    TORCH_CHECK(out.numel() == n, name_, " allgather's output ", r, " has ", out.numel(), " elements, not ", n);
    out.copy_(flat.slice(0, r * n, (r + 1) * n).view_as(out));
  }
  return CompletedWork(getRank(), c10d::OpType::ALLGATHER, outputs[0]);
}

c10::intrusive_ptr<c10d::Work> PluginCollectives::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                       const c10d::ReduceScatterOptions& opts) {
  CheckTensor(output, "reduce_scatter");
  CheckTensor(input, "reduce_scatter");
  TORCH_CHECK(output.scalar_type() == input.scalar_type() && input.numel() == output.numel() * getSize(), name_,
              " reduce_scatter needs an input of ", getSize(), " times the output's ", output.numel(), " ",
              output.scalar_type(), " elements, got ", input.numel(), " ", input.scalar_type(), " elements");
  Buffer send = BufferOf(input, name_, "reduce_scatter");
  Buffer receive = BufferOf(output, name_, "reduce_scatter");
  KILN_Collectives_ReduceScatter_Args args{};
  args.struct_size = KILN_Collectives_ReduceScatter_Args_STRUCT_SIZE;
  args.send_buffer = send.data();
  args.recv_buffer = receive.data();
  args.count = receive.count();
  args.data_type = send.data_type;
  args.op = ReduceOpOf(opts.reduceOp, name_, "reduce_scatter");
  Call("reduce_scatter", "Collectives_ReduceScatter", library_->api().Collectives_ReduceScatter, args);
  WriteBack(output, receive.tensor);
  return CompletedWork(getRank(), c10d::OpType::_REDUCE_SCATTER_BASE, {output});
}

c10::intrusive_ptr<c10d::Work> PluginCollectives::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                 std::vector<std::vector<at::Tensor>>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1 && inputs[0].size() == static_cast<size_t>(getSize()), name_,
              " reduce_scatter takes one output and one list of ", getSize(), " inputs");
  std::vector<at::Tensor> flattened;
  for (const at::Tensor& input : inputs[0]) {
    CheckTensor(input, "reduce_scatter");
    flattened.push_back(input.reshape({-1}));
  }
  at::Tensor flat = at::cat(flattened);
  _reduce_scatter_base(outputs[0], flat, opts);
  return CompletedWork(getRank(), c10d::OpType::REDUCE_SCATTER, outputs);
}

c10::intrusive_ptr<c10d::Work> PluginCollectives::barrier(const c10d::BarrierOptions& /*opts*/) {
  KILN_Collectives_Barrier_Args args{};
  args.struct_size = KILN_Collectives_Barrier_Args_STRUCT_SIZE;
  Call("barrier", "Collectives_Barrier", library_->api().Collectives_Barrier, args);
  return CompletedWork(getRank(), c10d::OpType::BARRIER, {});
}

}  // namespace kiln
