#include "trainer/synthetic_data.h"

#include "ATen/CPUGeneratorImpl.h"
#include "ATen/ATen.h"

namespace kiln {

SyntheticClusters::SyntheticClusters(const SyntheticOptions& options) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  const int64_t num_centres = options.num_classes * options.clusters_per_class;
  // Centre c belongs to class c % num_classes.
  const at::Tensor centres = at::normal(0.0, options.separation, {num_centres, options.num_features}, generator);
  const auto make = [&](int64_t n) {
    at::Tensor cluster = at::randint(num_centres, {n}, generator, at::TensorOptions().dtype(at::kLong));
    at::Tensor labels = cluster.remainder(options.num_classes);
    at::Tensor inputs = centres.index_select(0, cluster) + at::normal(0.0, 1.0, {n, options.num_features}, generator);
    return std::make_pair(inputs, labels);
  };
  auto [train_x, train_y] = make(options.num_train);
  auto [val_x, val_y] = make(options.num_val);
  train_ = std::make_shared<TensorDataLoader>(
      train_x, train_y, TensorDataLoaderOptions{options.batch_size, options.shuffle, false, options.seed});
  val_ = std::make_shared<TensorDataLoader>(
      val_x, val_y, TensorDataLoaderOptions{.batch_size = options.batch_size, .even_shards = false});
}

}  // namespace kiln
