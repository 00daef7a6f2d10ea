#include "trainer/core/data_loader.h"

#include <algorithm>

#include "ATen/CPUGeneratorImpl.h"
#include "ATen/ATen.h"
#include "ATen/core/Dict.h"
#include "absl/strings/str_cat.h"
#include "c10/util/Exception.h"

namespace kiln {

TensorDataLoader::TensorDataLoader(at::Tensor inputs, at::Tensor targets, TensorDataLoaderOptions options)
    : inputs_(std::move(inputs)), targets_(std::move(targets)), options_(options) {
  TORCH_CHECK(inputs_.defined() && inputs_.dim() >= 1, "TensorDataLoader needs inputs with a batch dimension");
  TORCH_CHECK(!targets_.defined() || targets_.size(0) == inputs_.size(0), "TensorDataLoader: ", inputs_.size(0),
              " inputs but ", targets_.size(0), " targets");
  TORCH_CHECK(options_.batch_size >= 1, "TensorDataLoader: batch_size must be >= 1, got ", options_.batch_size);
  set_epoch(0);
}

TensorDataLoader::TensorDataLoader(std::vector<std::pair<std::string, at::Tensor>> named,
                                   TensorDataLoaderOptions options)
    : named_(std::move(named)), options_(options) {
  TORCH_CHECK(!named_.empty(), "TensorDataLoader needs at least one named tensor");
  for (const auto& [name, tensor] : named_) {
    TORCH_CHECK(tensor.defined() && tensor.dim() >= 1, "TensorDataLoader: '", name,
                "' needs a batch dimension (a tensor of one dimension or more)");
    TORCH_CHECK(tensor.size(0) == named_[0].second.size(0), "TensorDataLoader: '", name, "' has ", tensor.size(0),
                " examples but '", named_[0].first, "' has ", named_[0].second.size(0));
    for (const auto& [other, unused] : named_) {
      TORCH_CHECK(&other == &name || other != name, "TensorDataLoader: the name '", name, "' is given twice");
    }
  }
  TORCH_CHECK(options_.batch_size >= 1, "TensorDataLoader: batch_size must be >= 1, got ", options_.batch_size);
  inputs_ = named_[0].second;
  set_epoch(0);
}

int64_t TensorDataLoader::num_local_examples() const { return order_.defined() ? order_.size(0) : inputs_.size(0); }

int64_t TensorDataLoader::num_batches() const {
  const int64_t n = num_local_examples();
  return options_.drop_last ? n / options_.batch_size : (n + options_.batch_size - 1) / options_.batch_size;
}

void TensorDataLoader::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  const int64_t n = inputs_.size(0);
  if (!options_.shuffle && world_size_ == 1) {
    order_ = at::Tensor();
    return;
  }
  at::Tensor order;
  if (options_.shuffle) {
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(options_.seed + static_cast<uint64_t>(epoch));
    order = at::randperm(n, generator, at::TensorOptions().dtype(at::kLong));
  } else {
    order = at::arange(n, at::TensorOptions().dtype(at::kLong));
  }
  if (world_size_ > 1 && !options_.even_shards) {
    order = order.slice(0, rank_, n, world_size_);
  } else if (world_size_ > 1) {
    // PyTorch's DistributedSampler: pad by repeating the first examples, or trim, to a multiple of world_size.
    const int64_t total = options_.drop_last ? (n / world_size_) * world_size_
                                             : ((n + world_size_ - 1) / world_size_) * world_size_;
    if (total < n) {
      order = order.slice(0, 0, total);
    } else {
      while (order.size(0) < total) order = at::cat({order, order.slice(0, 0, total - order.size(0))});
    }
    order = order.slice(0, rank_, total, world_size_);
  }
  order_ = order;
}

absl::Status TensorDataLoader::set_shard(int rank, int world_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("set_shard(rank=", rank, ", world_size=", world_size,
                                                   "): need 0 <= rank < world_size"));
  }
  rank_ = rank;
  world_size_ = world_size;
  set_epoch(epoch_);
  return absl::OkStatus();
}

Batch TensorDataLoader::get_batch(int64_t index) {
  TORCH_CHECK(index >= 0 && index < num_batches(), "batch index ", index, " out of range [0, ", num_batches(), ")");
  const int64_t start = index * options_.batch_size;
  const int64_t end = std::min(start + options_.batch_size, num_local_examples());
  const at::Tensor rows = order_.defined() ? order_.slice(0, start, end) : at::Tensor();
  const auto take = [&](const at::Tensor& tensor) {
    if (!tensor.defined()) return tensor;
    return rows.defined() ? tensor.index_select(0, rows) : tensor.slice(0, start, end);
  };
  if (named_.empty()) return {take(inputs_), take(targets_)};
  c10::impl::GenericDict data(c10::StringType::get(), c10::TensorType::get());
  data.reserve(named_.size());
  for (const auto& [name, tensor] : named_) data.insert(name, take(tensor));
  Batch batch;
  batch.data = data;
  return batch;
}

}  // namespace kiln
