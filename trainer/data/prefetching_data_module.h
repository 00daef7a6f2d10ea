// PrefetchingDataModule: wraps any DataModule so that each of its loaders is a PrefetchingDataLoader, reading
// `depth` batches ahead on a background thread. The batches are exactly the wrapped loaders' (see
// prefetching_data_loader.h).
//
// A loader is wrapped once and handed out again while the wrapped module keeps returning the same loader object.
// Thread-safety: like any DataModule, used by the loop thread.
#ifndef KILN_TRAINER_DATA_PREFETCHING_DATA_MODULE_H_
#define KILN_TRAINER_DATA_PREFETCHING_DATA_MODULE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "trainer/data/prefetching_data_loader.h"
#include "trainer/core/data_loader.h"

namespace kiln {

class PrefetchingDataModule final : public DataModule {
 public:
  // `depth` >= 1.
  PrefetchingDataModule(std::shared_ptr<DataModule> inner, int64_t depth);

  void setup(Stage stage) override { inner_->setup(stage); }
  std::shared_ptr<DataLoader> train_dataloader() override { return Wrap(inner_->train_dataloader()); }
  std::shared_ptr<DataLoader> val_dataloader() override { return Wrap(inner_->val_dataloader()); }
  std::shared_ptr<DataLoader> test_dataloader() override { return Wrap(inner_->test_dataloader()); }
  std::shared_ptr<DataLoader> predict_dataloader() override { return Wrap(inner_->predict_dataloader()); }
  std::vector<std::shared_ptr<DataLoader>> val_dataloaders() override { return WrapAll(inner_->val_dataloaders()); }
  std::vector<std::shared_ptr<DataLoader>> test_dataloaders() override { return WrapAll(inner_->test_dataloaders()); }
  std::vector<std::shared_ptr<DataLoader>> predict_dataloaders() override {
    return WrapAll(inner_->predict_dataloaders());
  }
  std::string state_key() const override { return inner_->state_key(); }
  c10::IValue state_dict() const override { return inner_->state_dict(); }
  absl::Status load_state_dict(const c10::IValue& state) override { return inner_->load_state_dict(state); }

  const std::shared_ptr<DataModule>& inner() const { return inner_; }

 private:
  std::shared_ptr<DataLoader> Wrap(const std::shared_ptr<DataLoader>& loader);
  std::vector<std::shared_ptr<DataLoader>> WrapAll(const std::vector<std::shared_ptr<DataLoader>>& loaders) {
    std::vector<std::shared_ptr<DataLoader>> wrapped;
    for (const auto& loader : loaders) wrapped.push_back(Wrap(loader));
    return wrapped;
  }

  std::shared_ptr<DataModule> inner_;
  const int64_t depth_;
  std::map<const DataLoader*, std::shared_ptr<PrefetchingDataLoader>> wrapped_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_DATA_PREFETCHING_DATA_MODULE_H_
