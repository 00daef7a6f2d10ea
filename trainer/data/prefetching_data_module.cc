#include "trainer/data/prefetching_data_module.h"

#include "c10/util/Exception.h"

namespace kiln {

PrefetchingDataModule::PrefetchingDataModule(std::shared_ptr<DataModule> inner, int64_t depth)
    : inner_(std::move(inner)), depth_(depth) {
  TORCH_CHECK(inner_ != nullptr, "PrefetchingDataModule needs a data module to wrap");
  TORCH_CHECK(depth_ >= 1, "PrefetchingDataModule: depth must be >= 1, got ", depth_);
}

std::shared_ptr<DataLoader> PrefetchingDataModule::Wrap(const std::shared_ptr<DataLoader>& loader) {
  if (loader == nullptr) return nullptr;
  auto found = wrapped_.find(loader.get());
  // The key is only a pointer: make sure it still names the loader it was made for.
  if (found != wrapped_.end() && found->second->inner() == loader) return found->second;
  auto wrapped = std::make_shared<PrefetchingDataLoader>(loader, depth_);
  wrapped_[loader.get()] = wrapped;
  return wrapped;
}

}  // namespace kiln
