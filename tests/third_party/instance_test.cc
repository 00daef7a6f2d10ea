// A user program that brings its own accelerator, defined right here and registered nowhere, passes an instance to
// the Trainer, and trains. The connector asks the instance every question: what `devices` means, which strategy
// and collective backend fit, and which precision it can run.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "connector/connector.h"
#include "connector/strategy_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/collectives.h"
#include "hal/devices.h"
#include "hal/registry.h"
#include "trainer/classifier.h"
#include "trainer/strategies/ddp_strategy.h"
#include "trainer/strategies/strategy.h"
#include "trainer/synthetic_data.h"
#include "trainer/testing/test_support.h"
#include "trainer/trainer.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The virtual NPU registers its device when chosen, and LibTorch's autograd engine takes only the devices registered
// at the process's first backward pass (hal/device_kit/device_kit.h): these tests train on the CPU before they use it,
// so it is chosen first, as a program that uses both would.
const bool kVirtualNpuChosen = [] {
  absl::StatusOr<kiln::AcceleratorSpec> spec = kiln::AcceleratorRegistry::Default().Find("virtual_npu");
  return spec.ok() && spec->factory()->ParseDevices(1).ok();
}();

// A made-up accelerator with four devices that computes on the host. It parses `devices` its own way (a count up
// to 4, or "auto" for all of them; never a list), prefers its own collective backend, and runs 16-mixed as 32-true.
class NewSotaAccelerator final : public kiln::Accelerator {
 public:
  std::string name() const override { return "new_sota"; }

  absl::StatusOr<std::vector<int>> ParseDevices(const kiln::Devices& devices) const override {
    absl::StatusOr<kiln::DeviceSelection> selection = kiln::ParseDevicesSyntax(devices);
    if (!selection.ok()) return selection.status();
    int count = 0;
    if (selection->kind == kiln::DeviceSelection::Kind::kAuto) count = kDevices;
    if (selection->kind == kiln::DeviceSelection::Kind::kCount) count = selection->count;
    if (count < 1 || count > kDevices) {
      return absl::InvalidArgumentError(
          absl::StrCat("new_sota takes a device count from 1 to ", kDevices, " or \"auto\", got ", devices.ToString()));
    }
    std::vector<int> indices(count);
    for (int i = 0; i < count; ++i) indices[i] = i;
    return indices;
  }

  int AutoDeviceCount() const override { return kDevices; }
  absl::Status CheckAvailable() const override { return absl::OkStatus(); }

  std::vector<c10::Device> ParallelDevices(const std::vector<int>& indices) const override {
    return std::vector<c10::Device>(indices.size(), c10::Device(c10::DeviceType::CPU));
  }

  absl::Status SetupDevice(const kiln::LogicalDevice& device) override {
    absl::MutexLock lock(&mutex_);
    calls_.push_back(absl::StrCat("setup ", device.ToString()));
    return absl::OkStatus();
  }

  absl::Status TeardownDevice(const kiln::LogicalDevice& device) override {
    absl::MutexLock lock(&mutex_);
    calls_.push_back(absl::StrCat("teardown ", device.ToString()));
    return absl::OkStatus();
  }

  absl::StatusOr<kiln::DeviceStats> GetDeviceStats(const kiln::LogicalDevice& device) const override {
    return kiln::DeviceStats{{"sota_flops_used", 0.0}};
  }

  std::string ProcessGroupBackend() const override { return "sota_ccl"; }
  std::vector<kiln::Precision> SupportedPrecisions() const override {
    return {kiln::Precision::k32True, kiln::Precision::k64True};
  }
  std::optional<kiln::PrecisionSubstitute> SubstitutePrecision(kiln::Precision requested) const override {
    if (requested != kiln::Precision::k16Mixed) return std::nullopt;
    return kiln::PrecisionSubstitute{kiln::Precision::k32True, "new_sota has no float16; training in 32-true"};
  }

  std::vector<std::string> calls() const {
    absl::MutexLock lock(&mutex_);
    return calls_;
  }

 private:
  static constexpr int kDevices = 4;
  mutable absl::Mutex mutex_;
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mutex_);
};

// A user's strategy, described to the connector: data-parallel, with no collective backend of its own.
class SotaParallelStrategy final : public kiln::StrategyDescriptor {
 public:
  explicit SotaParallelStrategy(std::optional<std::string> backend = std::nullopt) : backend_(std::move(backend)) {}
  std::string name() const override { return "sota_parallel"; }
  bool IsDistributed() const override { return true; }
  std::optional<std::string> ProcessGroupBackend() const override { return backend_; }

 private:
  std::optional<std::string> backend_;
};

TEST(AcceleratorInstanceTest, IsRegisteredNowhere) {
  EXPECT_FALSE(kiln::AcceleratorRegistry::Default().Find("new_sota").ok());
}

TEST(AcceleratorInstanceTest, TheInstanceParsesDevicesAndDeclaresStrategyBackendAndPrecision) {
  auto sota = std::make_shared<NewSotaAccelerator>();
  absl::StatusOr<kiln::Plan> plan = kiln::ResolvePlan({.accelerator = sota, .devices = "4", .precision = "16-mixed"});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->accelerator.get(), sota.get());
  EXPECT_EQ(plan->device_indices, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(plan->num_devices(), 4);
  EXPECT_EQ(plan->strategy, "ddp");
  EXPECT_EQ(plan->process_group_backend, "sota_ccl") << "the collective backend comes from the accelerator";
  EXPECT_EQ(plan->precision, kiln::Precision::k32True) << "the precision comes from what the accelerator declares";
  EXPECT_THAT(plan->warnings, ::testing::Contains("new_sota has no float16; training in 32-true"));

  // Its own parser, its own words.
  absl::StatusOr<kiln::Plan> too_many = kiln::ResolvePlan({.accelerator = sota, .devices = "5"});
  ASSERT_FALSE(too_many.ok());
  EXPECT_THAT(too_many.status().message(), HasSubstr("new_sota takes a device count from 1 to 4"));
  absl::StatusOr<kiln::Plan> unsupported = kiln::ResolvePlan({.accelerator = sota, .precision = "bf16-true"});
  ASSERT_FALSE(unsupported.ok());
  EXPECT_THAT(unsupported.status().message(), HasSubstr("32-true, 64-true"));
}

TEST(AcceleratorInstanceTest, AStrategyInstanceIsPassedTheSameWay) {
  auto sota = std::make_shared<NewSotaAccelerator>();
  auto strategy = std::make_shared<SotaParallelStrategy>();
  absl::StatusOr<kiln::Plan> plan = kiln::ResolvePlan({.accelerator = sota, .devices = "2", .strategy = strategy});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->strategy, "sota_parallel");
  EXPECT_EQ(plan->strategy_instance.get(), strategy.get()) << "the instance reaches the plan untouched";
  EXPECT_EQ(plan->process_group_backend, "sota_ccl") << "a strategy without a backend takes the accelerator's";

  absl::StatusOr<kiln::Plan> own_backend = kiln::ResolvePlan(
      {.accelerator = sota, .devices = "2", .strategy = std::make_shared<SotaParallelStrategy>("gloo")});
  ASSERT_TRUE(own_backend.ok()) << own_backend.status();
  EXPECT_EQ(own_backend->process_group_backend, "gloo") << "a strategy's own backend wins";
}

// Trains the default MLP on the small synthetic task with `accelerator` on one device; returns the parameters.
std::vector<at::Tensor> Train(kiln::AcceleratorFlag accelerator, kiln::Trainer** trainer_out = nullptr,
                              kiln::StrategyFlag strategy = "auto") {
  static std::vector<std::unique_ptr<kiln::Trainer>> trainers;  // Kept alive for the caller's checks.
  trainers.push_back(std::make_unique<kiln::Trainer>(kiln::TrainerOptions{
      .accelerator = std::move(accelerator),
      .devices = "1",
      .strategy = std::move(strategy),
      .max_epochs = 3,
      .seed = 7,
      .default_root_dir = kiln::testing::TempDir(),
      .enable_checkpointing = false,
      .enable_progress_bar = false,
  }));
  kiln::Trainer& trainer = *trainers.back();
  if (trainer_out != nullptr) *trainer_out = &trainer;
  torch::manual_seed(7);
  kiln::MlpClassifier model({});
  kiln::SyntheticClusters data(kiln::testing::SmallData());
  const absl::Status status = trainer.fit(model, data);
  EXPECT_TRUE(status.ok()) << status;
  std::vector<at::Tensor> parameters;
  for (const at::Tensor& parameter : model.parameters()) parameters.push_back(parameter.detach().clone());
  return parameters;
}

TEST(AcceleratorInstanceTest, TheTrainerTrainsOnAnInstanceRegisteredNowhere) {
  auto sota = std::make_shared<NewSotaAccelerator>();
  kiln::Trainer* trainer = nullptr;
  const std::vector<at::Tensor> on_sota = Train(sota, &trainer);
  ASSERT_TRUE(trainer->plan().has_value());
  EXPECT_EQ(trainer->plan()->accelerator.get(), sota.get());
  EXPECT_EQ(trainer->plan()->strategy, "single_device");
  EXPECT_EQ(trainer->global_step(), 30);
  EXPECT_GT(trainer->callback_metrics().at("val_acc"), 0.5) << "chance is 0.25: the model did not learn";
  EXPECT_EQ(sota->calls(), (std::vector<std::string>{"setup new_sota:0 (on cpu)", "teardown new_sota:0 (on cpu)"}));

  // It computes on the host, so it must train exactly as the CPU accelerator does.
  const std::vector<at::Tensor> on_cpu = Train("cpu");
  ASSERT_EQ(on_sota.size(), on_cpu.size());
  for (size_t i = 0; i < on_cpu.size(); ++i) EXPECT_TRUE(at::equal(on_sota[i], on_cpu[i])) << "parameter " << i;
}

// A user's trainer-side strategy, passed to kiln::Trainer as an instance: it runs on one device by handing every
// call to Kiln's SingleDeviceStrategy, and records that the trainer used it.
class RecordingStrategy final : public kiln::Strategy {
 public:
  std::string name() const override { return "recording"; }
  bool IsDistributed() const override { return false; }
  absl::Status Setup(const kiln::Plan& plan, torch::nn::Module& model) override {
    ++setups;
    return inner_.Setup(plan, model);
  }
  absl::Status Teardown() override { return inner_.Teardown(); }
  c10::Device root_device() const override { return inner_.root_device(); }
  kiln::Batch BatchToDevice(const kiln::Batch& batch) const override { return inner_.BatchToDevice(batch); }
  void Backward(const at::Tensor& loss, bool sync_gradients) override {
    ++backwards;
    inner_.Backward(loss, sync_gradients);
  }
  void OptimizerStep(torch::optim::Optimizer& optimizer) override { inner_.OptimizerStep(optimizer); }
  at::Tensor ReduceMean(const at::Tensor& value) override { return inner_.ReduceMean(value); }
  bool ReduceAny(bool decision) override { return inner_.ReduceAny(decision); }
  bool is_global_zero() const override { return true; }
  int global_rank() const override { return 0; }
  int world_size() const override { return 1; }
  void Barrier() override {}

  int setups = 0;
  int backwards = 0;

 private:
  kiln::SingleDeviceStrategy inner_;
};

TEST(AcceleratorInstanceTest, TheTrainerRunsAStrategyInstance) {
  auto sota = std::make_shared<NewSotaAccelerator>();
  auto strategy = std::make_shared<RecordingStrategy>();
  kiln::Trainer* trainer = nullptr;
  const std::vector<at::Tensor> with_instance = Train(sota, &trainer, strategy);
  EXPECT_EQ(trainer->plan()->strategy, "recording");
  EXPECT_EQ(trainer->strategy(), strategy.get()) << "the trainer must run the user's instance";
  EXPECT_EQ(strategy->setups, 1);
  EXPECT_EQ(strategy->backwards, trainer->global_step());
  const std::vector<at::Tensor> on_cpu = Train("cpu");
  for (size_t i = 0; i < on_cpu.size(); ++i) EXPECT_TRUE(at::equal(with_instance[i], on_cpu[i])) << "parameter " << i;
}

// A strategy of the user's own, registered by name with its factory: the trainer makes it through the registry, as
// it makes the built-in ones (fit --strategy=NAME and config files reach it the same way).
TEST(AcceleratorInstanceTest, AStrategyRegisteredWithAFactoryIsMadeByTheTrainer) {
  auto made = std::make_shared<std::vector<std::shared_ptr<RecordingStrategy>>>();
  ASSERT_TRUE(kiln::StrategyRegistry::Default()
                  .Register({.name = "sota_recording",
                             .description = "SingleDeviceStrategy, recorded.",
                             .distributed = false,
                             .factory = [made](const kiln::StrategyArguments&) {
                               made->push_back(std::make_shared<RecordingStrategy>());
                               return std::shared_ptr<kiln::StrategyDescriptor>(made->back());
                             }})
                  .ok());
  kiln::Trainer* trainer = nullptr;
  const std::vector<at::Tensor> by_name = Train(std::make_shared<NewSotaAccelerator>(), &trainer, "sota_recording");
  ASSERT_EQ(made->size(), 1u) << "the trainer did not call the factory exactly once";
  EXPECT_EQ(trainer->plan()->strategy, "sota_recording");
  EXPECT_EQ(trainer->strategy(), made->front().get());
  EXPECT_EQ(made->front()->setups, 1);
  const std::vector<at::Tensor> on_cpu = Train("cpu");
  for (size_t i = 0; i < on_cpu.size(); ++i) EXPECT_TRUE(at::equal(by_name[i], on_cpu[i])) << "parameter " << i;
}

TEST(AcceleratorInstanceTest, AStrategyRegisteredWithoutAFactoryIsRefusedNamingTheFix) {
  ASSERT_TRUE(kiln::StrategyRegistry::Default()
                  .Register({.name = "sota_nameonly", .description = "A name alone.", .distributed = false})
                  .ok());
  kiln::Trainer trainer(kiln::testing::Quiet({.accelerator = "cpu", .devices = "1", .strategy = "sota_nameonly"}));
  torch::manual_seed(7);
  kiln::MlpClassifier model({});
  kiln::SyntheticClusters data(kiln::testing::SmallData());
  const absl::Status status = trainer.fit(model, data);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("strategy 'sota_nameonly' is registered without a factory"));
  EXPECT_THAT(status.message(), HasSubstr("StrategySpec::factory"));
}

// DDP refuses, before it joins anyone, a backend the accelerator does not bring (the virtual NPU brings "vnccl";
// Gloo is every host's); and, before training, a backend that cannot carry the device's tensors, which the check
// all-reduce on the device at set-up finds (Gloo reduces CPU tensors).
TEST(AcceleratorInstanceTest, DdpRefusesABackendThatCannotCarryTheDevicesTensors) {
  ASSERT_TRUE(kVirtualNpuChosen) << "the virtual NPU could not be chosen before the tests ran";
  const auto run = [](const std::string& backend, kiln::Trainer** out) {
    static std::vector<std::unique_ptr<kiln::Trainer>> trainers;
    // Not testing::Quiet, which puts a named accelerator back on the CPU.
    trainers.push_back(std::make_unique<kiln::Trainer>(kiln::TrainerOptions{
        .accelerator = "virtual_npu",
        .devices = "1",
        .strategy = std::make_shared<kiln::DDPStrategy>(kiln::DDPOptions{.process_group_backend = backend}),
        .max_epochs = 1,
        .default_root_dir = kiln::testing::TempDir(),
        .enable_progress_bar = false,
    }));
    *out = trainers.back().get();
    torch::manual_seed(7);
    kiln::MlpClassifier model({});
    kiln::SyntheticClusters data(kiln::testing::SmallData());
    return trainers.back()->fit(model, data);
  };
  kiln::Trainer* trainer = nullptr;
  const absl::Status nccl = run("nccl", &trainer);
  EXPECT_EQ(nccl.code(), absl::StatusCode::kFailedPrecondition) << nccl;
  EXPECT_THAT(nccl.message(), HasSubstr("process group backend 'nccl' is not available for accelerator 'virtual_npu'"));
  EXPECT_THAT(nccl.message(), HasSubstr("it brings 'vnccl'"));
  EXPECT_THAT(nccl.message(), HasSubstr("set process_group_backend to 'vnccl' or leave it unset"));
  EXPECT_EQ(trainer->global_step(), 0);
  const absl::Status gloo = run("gloo", &trainer);
  EXPECT_EQ(gloo.code(), absl::StatusCode::kFailedPrecondition) << gloo;
  EXPECT_THAT(gloo.message(), HasSubstr("the collective backend 'gloo' cannot all-reduce virtual_npu:0 tensors"));
  EXPECT_THAT(gloo.message(), HasSubstr("use the accelerator's own backend 'vnccl'"));
  EXPECT_EQ(trainer->global_step(), 0);
}

// A collective backend whose all-reduce fails as a backend's does when a peer never comes (c10d's DistBackendError,
// hal/collectives.h), or, with `peer_failure` false, as one that cannot carry the tensors (a plain c10::Error).
class FailingAllReduce final : public c10d::Backend {
 public:
  FailingAllReduce(int rank, int size, bool peer_failure) : c10d::Backend(rank, size), peer_failure_(peer_failure) {}
  const std::string getBackendName() const override { return "flaky_ccl"; }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>&, const c10d::AllreduceOptions&) override {
    if (peer_failure_) C10_THROW_ERROR(DistBackendError, "flaky_ccl allreduce: timed out waiting for rank 1 after 3s");
    TORCH_CHECK(false, "flaky_ccl allreduce: no kernel for this tensor's device");
  }

 private:
  bool peer_failure_;
};

// A host accelerator whose collective backend is FailingAllReduce.
class FlakyAccelerator final : public kiln::Accelerator {
 public:
  explicit FlakyAccelerator(bool peer_failure) : peer_failure_(peer_failure) {}
  std::string name() const override { return "flaky"; }
  absl::StatusOr<std::vector<int>> ParseDevices(const kiln::Devices& devices) const override {
    return kiln::ParseDeviceCount(devices, 1, name());
  }
  int AutoDeviceCount() const override { return 1; }
  absl::Status CheckAvailable() const override { return absl::OkStatus(); }
  std::vector<c10::Device> ParallelDevices(const std::vector<int>& indices) const override {
    return std::vector<c10::Device>(indices.size(), c10::Device(c10::DeviceType::CPU));
  }
  absl::Status SetupDevice(const kiln::LogicalDevice&) override { return absl::OkStatus(); }
  absl::Status TeardownDevice(const kiln::LogicalDevice&) override { return absl::OkStatus(); }
  absl::StatusOr<kiln::DeviceStats> GetDeviceStats(const kiln::LogicalDevice&) const override { return kiln::DeviceStats{}; }
  std::string ProcessGroupBackend() const override { return "flaky_ccl"; }
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> MakeCollectiveBackend(
      const kiln::LogicalDevice&, const kiln::CollectiveOptions& options) override {
    return c10::intrusive_ptr<c10d::Backend>(
        c10::make_intrusive<FailingAllReduce>(options.rank, options.world_size, peer_failure_));
  }
  std::vector<kiln::Precision> SupportedPrecisions() const override { return {kiln::Precision::k32True}; }

 private:
  bool peer_failure_;
};

// The all-reduce that checks the backend before training: a peer that failed or never came is a failure to meet,
// said as one (naming the timeout, not telling the vendor to bring a backend); a backend that cannot carry the
// tensors is told what to bring.
TEST(AcceleratorInstanceTest, ACheckAllReduceThatTimesOutIsAPeerNotAMissingBackend) {
  const auto run = [](bool peer_failure) {
    kiln::Trainer trainer(kiln::TrainerOptions{
        .accelerator = std::make_shared<FlakyAccelerator>(peer_failure),
        .devices = 1,
        .strategy = "ddp",
        .process_group_timeout = absl::Seconds(20),
        .max_epochs = 1,
        .default_root_dir = kiln::testing::TempDir(),
        .enable_progress_bar = false,
    });
    kiln::MlpClassifier model({});
    kiln::SyntheticClusters data(kiln::testing::SmallData());
    return trainer.fit(model, data);
  };
  const absl::Status timed_out = run(/*peer_failure=*/true);
  EXPECT_EQ(timed_out.code(), absl::StatusCode::kDeadlineExceeded) << timed_out;
  EXPECT_THAT(timed_out.message(), HasSubstr("could not meet the other ranks"));
  EXPECT_THAT(timed_out.message(), HasSubstr("timed out waiting for rank 1"));
  EXPECT_THAT(timed_out.message(), Not(HasSubstr("must bring a backend")));
  const absl::Status incapable = run(/*peer_failure=*/false);
  EXPECT_EQ(incapable.code(), absl::StatusCode::kFailedPrecondition) << incapable;
  EXPECT_THAT(incapable.message(), HasSubstr("no kernel for this tensor's device"));
  EXPECT_THAT(incapable.message(), HasSubstr("must bring a backend for its device type"));
}

}  // namespace
