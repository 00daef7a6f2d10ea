// kiln::DeviceMesh: the processes of a run arranged as a 2-D grid, data parallel x tensor parallel, with the c10d
// process group of each row and column (PyTorch's init_device_mesh(mesh_shape=(dp, tp), mesh_dim_names=
// ("data_parallel", "tensor_parallel")), as Lightning's ModelParallelStrategy makes it). Rank r sits at
// (r / tp, r % tp): the ranks of one tensor-parallel group are consecutive ({0, 1}, {2, 3} at dp = tp = 2), those
// of one data-parallel group a stride tp apart ({0, 2}, {1, 3}).
//
// The strategy (kiln::ModelParallelStrategy, trainer/strategies/model_parallel_strategy.h) makes the mesh once the
// processes have met; a LightningModule reads it in configure_model (LightningModule::device_mesh()) and gives the
// tensor-parallel group to its parallel layers (trainer/core/tensor_parallel.h). A program of its own may make one from
// groups it made itself.
//
// The groups carry whatever collective backend the strategy's group carries (Gloo for CPU tensors, the accelerator's
// own for its device's). Immutable after construction: thread-safe to read.
#ifndef KILN_TRAINER_CORE_DEVICE_MESH_H_
#define KILN_TRAINER_CORE_DEVICE_MESH_H_

#include <string>
#include <vector>

#include "c10/util/intrusive_ptr.h"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"

namespace kiln {

class DeviceMesh {
 public:
  // Lightning's (and PyTorch's) names of the two dimensions.
  static constexpr char kDataParallel[] = "data_parallel";
  static constexpr char kTensorParallel[] = "tensor_parallel";

  // A mesh of data_parallel_size x tensor_parallel_size ranks, this process `global_rank` among them, with the group
  // of its row along each dimension (either may be null where that dimension's size is 1). Throws c10::ValueError for
  // sizes below 1, a rank outside the mesh, or a group whose size is not its dimension's.
  DeviceMesh(int data_parallel_size, int tensor_parallel_size, int global_rank,
             c10::intrusive_ptr<c10d::ProcessGroup> data_parallel_group,
             c10::intrusive_ptr<c10d::ProcessGroup> tensor_parallel_group);

  // Every rank in one (single device, or a program without a strategy): sizes 1, no groups.
  static DeviceMesh Single() { return DeviceMesh(1, 1, 0, nullptr, nullptr); }

  // {"data_parallel", "tensor_parallel"}.
  std::vector<std::string> dim_names() const { return {kDataParallel, kTensorParallel}; }
  // Every rank of the mesh (data_parallel_size() x tensor_parallel_size()).
  int size() const { return data_parallel_size_ * tensor_parallel_size_; }
  // The size along `dim` (one of dim_names()); throws c10::ValueError naming the accepted names otherwise.
  int size(const std::string& dim) const;
  // This rank's place along `dim` (its rank within that dimension's group); throws as size(dim).
  int local_rank(const std::string& dim) const;
  // The group of this rank's row along `dim`; null where that size is 1. Throws as size(dim).
  c10::intrusive_ptr<c10d::ProcessGroup> group(const std::string& dim) const;

  int data_parallel_size() const { return data_parallel_size_; }
  int tensor_parallel_size() const { return tensor_parallel_size_; }
  int data_parallel_rank() const { return global_rank_ / tensor_parallel_size_; }
  int tensor_parallel_rank() const { return global_rank_ % tensor_parallel_size_; }
  int global_rank() const { return global_rank_; }
  const c10::intrusive_ptr<c10d::ProcessGroup>& data_parallel_group() const { return data_parallel_group_; }
  const c10::intrusive_ptr<c10d::ProcessGroup>& tensor_parallel_group() const { return tensor_parallel_group_; }

  // The global ranks of every group along `dim` of a dp x tp mesh, in the order every rank makes them: along
  // "tensor_parallel", {{0..tp-1}, {tp..2tp-1}, ...}; along "data_parallel", {{0, tp, 2tp, ...}, {1, tp+1, ...}, ...}.
  // Throws as size(dim).
  static std::vector<std::vector<int>> GroupRanks(int data_parallel_size, int tensor_parallel_size,
                                                  const std::string& dim);

 private:
  int data_parallel_size_;
  int tensor_parallel_size_;
  int global_rank_;
  c10::intrusive_ptr<c10d::ProcessGroup> data_parallel_group_;
  c10::intrusive_ptr<c10d::ProcessGroup> tensor_parallel_group_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_CORE_DEVICE_MESH_H_
