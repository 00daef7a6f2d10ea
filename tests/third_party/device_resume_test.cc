// Checkpoints on an out-of-tree device: the sample virtual NPU (linked through @kiln_backends, chosen by name). A
// run resumed from a checkpoint written on the device continues exactly, with the optimizer's restored state back
// on the device rather than left on the CPU, where LibTorch 1.13 must read it.
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hal/registry.h"
#include "torch/optim/adam.h"
#include "trainer/classifier.h"
#include "trainer/synthetic_data.h"
#include "trainer/testing/test_support.h"
#include "trainer/trainer.h"

namespace {

constexpr char kDevice[] = "virtual_npu";

struct FitResult {
  std::vector<at::Tensor> parameters;      // On the CPU.
  std::vector<c10::Device> state_devices;  // Where the optimizer's state tensors are after fit.
  std::string resumed_from;
};

FitResult Fit(const std::string& root, int64_t max_epochs, const std::string& ckpt_path) {
  kiln::Trainer trainer({.accelerator = kDevice,
                         .devices = 1,
                         .max_epochs = max_epochs,
                         .seed = 3,
                         .default_root_dir = root,
                         .enable_progress_bar = false});
  torch::manual_seed(3);
  kiln::MlpClassifier model({});
  kiln::SyntheticClusters data(kiln::testing::SmallData());
  const absl::Status status = trainer.fit(model, data, ckpt_path);
  EXPECT_TRUE(status.ok()) << status;
  FitResult run;
  run.resumed_from = trainer.resumed_from();
  for (const at::Tensor& parameter : model.parameters()) run.parameters.push_back(parameter.detach().to(at::kCPU));
  for (const auto& optimizer : trainer.optimizers()) {
    for (const auto& [key, state] : optimizer->state()) {
      const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(state.get());
      if (adam == nullptr) continue;
      run.state_devices.push_back(adam->exp_avg().device());
      run.state_devices.push_back(adam->exp_avg_sq().device());
    }
  }
  return run;
}

TEST(DeviceResumeTest, ResumingOnTheDeviceContinuesExactlyWithStateOnTheDevice) {
  if (!kiln::AcceleratorRegistry::Default().Find(kDevice).ok()) {
    FAIL() << kDevice << " is not linked: Kiln's WORKSPACE lists it in kiln_backends for this test; registered: "
           << kiln::AcceleratorRegistry::Default().NameList();
  }
  const std::string interrupted = kiln::testing::TempDir();
  Fit(interrupted, 1, "");
  const FitResult resumed = Fit(interrupted, 3, "last");
  const FitResult straight = Fit(kiln::testing::TempDir(), 3, "");

  EXPECT_FALSE(resumed.resumed_from.empty()) << "ckpt_path=\"last\" found no checkpoint";
  ASSERT_EQ(resumed.parameters.size(), straight.parameters.size());
  for (size_t i = 0; i < straight.parameters.size(); ++i) {
    EXPECT_TRUE(at::equal(resumed.parameters[i], straight.parameters[i])) << "parameter " << i;
  }
  ASSERT_FALSE(resumed.state_devices.empty()) << "Adam kept no state";
  for (const c10::Device& device : resumed.state_devices) {
    EXPECT_EQ(device.type(), c10::DeviceType::PrivateUse1) << "restored optimizer state stayed on " << device;
  }
}

}  // namespace
