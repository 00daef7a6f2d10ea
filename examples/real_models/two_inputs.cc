// A two-tower classifier, Kiln's side of examples/real_models (lightning_twin.py's two_inputs): a TorchScript
// module whose forward takes a dictionary batch {"left", "right"}, trained on named tensors (the targets under
// "target") and validated on two sets, "near" (the training distribution) and "far" (shifted), whose metrics are
// named val_loss/dataloader_idx_0 and _1, as Lightning names them. Plain SGD with momentum (the fused kernel, as the
// Lightning side's fused=True), 2 epochs of 100 batches, no shuffling.
//
//   two_inputs DIR   (after lightning_twin.py make two_inputs DIR)
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "examples/real_models/twin_data.h"
#include "trainer/models/torchscript_module.h"

namespace {

class TwoSets final : public kiln::DataModule {
 public:
  explicit TwoSets(std::map<std::string, at::Tensor> tensors) : tensors_(std::move(tensors)) {}
  std::shared_ptr<kiln::DataLoader> train_dataloader() override { return Loader("train"); }
  std::vector<std::shared_ptr<kiln::DataLoader>> val_dataloaders() override { return {Loader("near"), Loader("far")}; }

 private:
  std::shared_ptr<kiln::DataLoader> Loader(const std::string& set) {
    std::vector<std::pair<std::string, at::Tensor>> named;
    for (const char* key : {"left", "right", "target"}) named.emplace_back(key, tensors_.at(set + "_" + key));
    return std::make_shared<kiln::TensorDataLoader>(std::move(named), kiln::TensorDataLoaderOptions{.batch_size = 16});
  }
  std::map<std::string, at::Tensor> tensors_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: two_inputs DIR (after lightning_twin.py make two_inputs DIR)\n";
    return 2;
  }
  const std::string dir = argv[1];
  absl::StatusOr<std::shared_ptr<kiln::TorchScriptModule>> model =
      kiln::TorchScriptModule::Load(dir + "/model.pt", {.optimizer = "sgd", .learning_rate = 0.05, .momentum = 0.9});
  if (!model.ok()) {
    std::cerr << "two_inputs: " << model.status() << "\n";
    return 1;
  }
  TwoSets data(kiln::examples::LoadTwinData(dir));
  kiln::TrainerOptions options = kiln::examples::TwinOptions(dir);
  options.max_epochs = 2;
  kiln::Trainer trainer(options);
  if (absl::Status status = trainer.fit(**model, data); !status.ok()) {
    std::cerr << "two_inputs: " << status << "\n";
    return 1;
  }
  for (const auto& [name, value] : trainer.callback_metrics()) std::cout << name << " " << value << "\n";
  return 0;
}
