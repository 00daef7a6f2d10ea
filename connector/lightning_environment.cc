#include "connector/lightning_environment.h"

namespace kiln {

absl::StatusOr<std::string> LightningEnvironment::MainAddress() const {
  // An empty MASTER_ADDR names no host: it counts as unset (an empty address would reach the process group).
  const std::string address = environment_.Get("MASTER_ADDR").value_or("");
  return address.empty() ? std::string("127.0.0.1") : address;
}

absl::StatusOr<std::optional<int>> LightningEnvironment::MainPort() const {
  return environment_.GetPort("MASTER_PORT");
}

absl::StatusOr<int> LightningEnvironment::WorldSize() const {
  absl::MutexLock lock(&mutex_);
  return world_size_;
}

void LightningEnvironment::SetWorldSize(int size) {
  absl::MutexLock lock(&mutex_);
  world_size_ = size;
}

absl::StatusOr<int> LightningEnvironment::GlobalRank() const {
  absl::MutexLock lock(&mutex_);
  return global_rank_;
}

void LightningEnvironment::SetGlobalRank(int rank) {
  absl::MutexLock lock(&mutex_);
  global_rank_ = rank;
}

absl::StatusOr<int> LightningEnvironment::LocalRank() const {
  return environment_.GetNonNegativeIntOr("LOCAL_RANK", 0);
}

absl::StatusOr<int> LightningEnvironment::NodeRank() const {
  if (environment_.Has("NODE_RANK")) return environment_.GetNonNegativeIntOr("NODE_RANK", 0);
  return environment_.GetNonNegativeIntOr("GROUP_RANK", 0);
}

}  // namespace kiln
