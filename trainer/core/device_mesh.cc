#include "trainer/core/device_mesh.h"

#include <utility>

#include "c10/util/Exception.h"

namespace kiln {
namespace {

void CheckDim(const std::string& dim) {
  TORCH_CHECK_VALUE(dim == DeviceMesh::kDataParallel || dim == DeviceMesh::kTensorParallel,
                    "device mesh has no dimension '", dim, "'; its dimensions are '", DeviceMesh::kDataParallel,
                    "' and '", DeviceMesh::kTensorParallel, "'");
}

}  // namespace

DeviceMesh::DeviceMesh(int data_parallel_size, int tensor_parallel_size, int global_rank,
                       c10::intrusive_ptr<c10d::ProcessGroup> data_parallel_group,
                       c10::intrusive_ptr<c10d::ProcessGroup> tensor_parallel_group)
    : data_parallel_size_(data_parallel_size),
      tensor_parallel_size_(tensor_parallel_size),
      global_rank_(global_rank),
      data_parallel_group_(std::move(data_parallel_group)),
      tensor_parallel_group_(std::move(tensor_parallel_group)) {
  TORCH_CHECK_VALUE(data_parallel_size >= 1 && tensor_parallel_size >= 1, "device mesh sizes must be at least 1, got ",
                    "data_parallel_size=", data_parallel_size, " and tensor_parallel_size=", tensor_parallel_size);
  TORCH_CHECK_VALUE(global_rank >= 0 && global_rank < size(), "rank ", global_rank, " is outside a device mesh of ",
                    data_parallel_size, " x ", tensor_parallel_size, " ranks");
  TORCH_CHECK_VALUE(data_parallel_group_ == nullptr || data_parallel_group_->getSize() == data_parallel_size,
                    "the data-parallel group has ", data_parallel_group_ ? data_parallel_group_->getSize() : 0,
                    " ranks; the mesh's data_parallel_size is ", data_parallel_size);
  TORCH_CHECK_VALUE(tensor_parallel_group_ == nullptr || tensor_parallel_group_->getSize() == tensor_parallel_size,
                    "the tensor-parallel group has ", tensor_parallel_group_ ? tensor_parallel_group_->getSize() : 0,
                    " ranks; the mesh's tensor_parallel_size is ", tensor_parallel_size);
}

int DeviceMesh::size(const std::string& dim) const {
  CheckDim(dim);
  return dim == kDataParallel ? data_parallel_size_ : tensor_parallel_size_;
}

int DeviceMesh::local_rank(const std::string& dim) const {
  CheckDim(dim);
  return dim == kDataParallel ? data_parallel_rank() : tensor_parallel_rank();
}

c10::intrusive_ptr<c10d::ProcessGroup> DeviceMesh::group(const std::string& dim) const {
  CheckDim(dim);
  return dim == kDataParallel ? data_parallel_group_ : tensor_parallel_group_;
}

std::vector<std::vector<int>> DeviceMesh::GroupRanks(int data_parallel_size, int tensor_parallel_size,
                                                     const std::string& dim) {
  CheckDim(dim);
  std::vector<std::vector<int>> groups;
  if (dim == kTensorParallel) {
    for (int d = 0; d < data_parallel_size; ++d) {
      groups.emplace_back();
      for (int t = 0; t < tensor_parallel_size; ++t) groups.back().push_back(d * tensor_parallel_size + t);
    }
  } else {
    for (int t = 0; t < tensor_parallel_size; ++t) {
      groups.emplace_back();
      for (int d = 0; d < data_parallel_size; ++d) groups.back().push_back(d * tensor_parallel_size + t);
    }
  }
  return groups;
}

}  // namespace kiln
