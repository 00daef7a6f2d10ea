// The accelerator conformance suite: the contract of hal/accelerator.h, checked against one registered accelerator.
//
// Backend authors run it with the `kiln_accelerator_conformance_test` macro (tools/conformance.bzl), which links
// this file (it has its own main()) with their backend and passes the accelerator's registered name:
//
//   conformance_test --accelerator=<name> [--bitwise] [--one_rank_per_device]
//                    [--accelerator_plugin=<path to a plugin's .so>]...
//
// --one_rank_per_device: the accelerator's collective backend needs a device of its own for each rank (NCCL refuses
// two ranks on one GPU); the collective checks then run as many ranks as there are devices, at most 4.
//
// With --accelerator_plugin, the accelerator comes from a plugin shared library (hal/plugin/kiln_plugin_c_api.h),
// loaded into the default registry before the checks run, exactly as Kiln's programs load one.
// Checks that need the hardware (devices, set-up, statistics, training, collectives) skip, printing the accelerator's
// own reason, when it is not available here; the others (registration, never throwing, parsing) always run. Tests
// share the accelerator instance the registry holds, as Kiln's programs do.
//
// The collective checks run 2 and 4 real processes: this binary starts itself again once per rank with
// --collective_rank (and the arguments it was given), and each rank makes the accelerator's collective backend
// (Accelerator::MakeCollectiveBackend) and checks every collective of hal/collectives.h on its device's tensors.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ATen/ATen.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "hal/collectives.h"
#include "hal/compat/error_message.h"
#include "hal/precision.h"
#include "hal/plugin/plugin_loader.h"
#include "hal/privateuse1_library.h"
#include "hal/registry.h"
#include "hal/testing/rank_runner.h"
#include "torch/csrc/distributed/c10d/PrefixStore.hpp"
#include "torch/csrc/distributed/c10d/TCPStore.hpp"
#include "torch/optim/sgd.h"

namespace kiln::conformance {
namespace {

struct Config {
  std::string accelerator;
  bool bitwise = false;
  bool one_rank_per_device = false;
  std::vector<std::string> plugins;  // Plugin libraries to load first.
  std::vector<std::string> libraries;  // PrivateUse1 libraries to adopt first, NAME=PATH (hal/privateuse1_library.h).
  std::string self;                  // This binary, for the collective checks' ranks.
  // Set in a rank of the collective checks (see RunCollectiveRank).
  int collective_rank = -1;
  int collective_world = 0;
  int collective_port = 0;
  int collective_timeout_ms = 0;
};

Config& GetConfig() {
  static Config config;
  return config;
}

bool IsLowerSnakeCase(absl::string_view key) {
  if (key.empty() || !absl::ascii_islower(key[0])) return false;
  for (char c : key) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '_') return false;
  }
  return true;
}

class ConformanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::shared_ptr<Accelerator>> found = AcceleratorRegistry::Default().Get(GetConfig().accelerator);
    ASSERT_TRUE(found.ok()) << found.status().message()
                            << "\nIs the backend's cc_library in this test's deps, with alwayslink = True, and does "
                               "it register under this name?";
    accelerator_ = *found;
  }

  // Empty when the accelerator can be used here with at least one device; otherwise why not.
  std::string UnavailableReason() const {
    const absl::Status available = accelerator_->CheckAvailable();
    if (!available.ok()) {
      return absl::StrCat("accelerator '", accelerator_->name(),
                          "' is not available on this machine: ", available.message());
    }
    if (accelerator_->AutoDeviceCount() < 1) {
      return absl::StrCat("accelerator '", accelerator_->name(), "' is available but counts no device");
    }
    return "";
  }

  // The devices of `devices`, through ParseDevices and ParallelDevices; fails the test when parsing fails.
  std::vector<LogicalDevice> DevicesFor(const Devices& devices) const {
    absl::StatusOr<std::vector<int>> indices = accelerator_->ParseDevices(devices);
    EXPECT_TRUE(indices.ok()) << "devices=" << devices.ToString() << ": " << indices.status();
    if (!indices.ok()) return {};
    return LogicalDevices(*accelerator_, *indices);
  }

  // Every device the accelerator has here: devices=-1 where it accepts that (numbered devices), else "auto".
  std::vector<LogicalDevice> AllDevices() const {
    absl::StatusOr<std::vector<int>> all = accelerator_->ParseDevices(-1);
    return all.ok() ? LogicalDevices(*accelerator_, *all) : DevicesFor("auto");
  }

  std::shared_ptr<Accelerator> accelerator_;
};

#define KILN_SKIP_UNLESS_AVAILABLE()                                     \
  if (const std::string reason = UnavailableReason(); !reason.empty()) { \
    GTEST_SKIP() << reason;                                              \
  }

TEST_F(ConformanceTest, IsRegisteredUnderItsNameAndAliases) {
  absl::StatusOr<AcceleratorSpec> spec = AcceleratorRegistry::Default().Find(GetConfig().accelerator);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(accelerator_->name(), spec->name) << "name() must return the registered name";
  EXPECT_FALSE(accelerator_->name().empty());
  EXPECT_EQ(absl::AsciiStrToLower(accelerator_->name()), accelerator_->name()) << "name() must be lower case";
  EXPECT_FALSE(spec->description.empty()) << "the registration has no description for listings";
  for (const std::string& alias : spec->aliases) {
    absl::StatusOr<std::shared_ptr<Accelerator>> by_alias = AcceleratorRegistry::Default().Get(alias);
    ASSERT_TRUE(by_alias.ok()) << alias << ": " << by_alias.status();
    EXPECT_EQ(by_alias->get(), accelerator_.get()) << "alias '" << alias << "' gives another instance";
  }
}

// The test links every backend Kiln's programs link (the built-in ones and the WORKSPACE's kiln_backends), as fit
// does: a name or alias another backend has taken is a failure here, naming both source files.
TEST_F(ConformanceTest, RegistersBesideEveryLinkedBackend) {
  const absl::Status startup = AcceleratorRegistry::Default().StartupStatus();
  EXPECT_TRUE(startup.ok()) << startup.message();
  absl::StatusOr<AcceleratorSpec> spec = AcceleratorRegistry::Default().Find(GetConfig().accelerator);
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::cout << "note: '" << spec->name << "' comes from " << (spec->origin.empty() ? "(unknown)" : spec->origin)
            << "; registered beside it: " << AcceleratorRegistry::Default().NameList() << "\n";
}

TEST_F(ConformanceTest, CountingAndDeclarationsNeverThrow) {
  int count = -1;
  EXPECT_NO_THROW(count = accelerator_->AutoDeviceCount());
  EXPECT_GE(count, 0);
  int again = -1;
  EXPECT_NO_THROW(again = accelerator_->AutoDeviceCount());
  EXPECT_EQ(count, again) << "AutoDeviceCount changed between two calls";

  absl::Status available;
  EXPECT_NO_THROW(available = accelerator_->CheckAvailable());
  if (!available.ok()) {
    EXPECT_TRUE(available.code() == absl::StatusCode::kFailedPrecondition ||
                available.code() == absl::StatusCode::kUnavailable)
        << "unavailable must be FailedPrecondition or Unavailable, got " << available;
    EXPECT_GE(available.message().size(), 10u) << "the reason must say why, in words a user can act on";
    std::cout << "note: '" << accelerator_->name() << "' is not available here: " << available.message() << "\n";
  }

  std::string backend;
  EXPECT_NO_THROW(backend = accelerator_->ProcessGroupBackend());
  EXPECT_FALSE(backend.empty()) << "ProcessGroupBackend() must name a collective backend";

  std::vector<Precision> supported;
  EXPECT_NO_THROW(supported = accelerator_->SupportedPrecisions());
  ASSERT_FALSE(supported.empty()) << "SupportedPrecisions() must not be empty";
  EXPECT_EQ(std::set<Precision>(supported.begin(), supported.end()).size(), supported.size())
      << "SupportedPrecisions() lists a precision twice: " << PrecisionNames(supported);
  for (Precision requested : AllPrecisions()) {
    if (std::find(supported.begin(), supported.end(), requested) != supported.end()) continue;
    std::optional<PrecisionSubstitute> substitute;
    EXPECT_NO_THROW(substitute = accelerator_->SubstitutePrecision(requested));
    if (!substitute.has_value()) continue;
    EXPECT_NE(std::find(supported.begin(), supported.end(), substitute->precision), supported.end())
        << "the substitute for " << PrecisionName(requested) << " is " << PrecisionName(substitute->precision)
        << ", which SupportedPrecisions() does not list";
    EXPECT_FALSE(substitute->warning.empty()) << "a substitute for " << PrecisionName(requested) << " needs a warning";
  }
}

TEST_F(ConformanceTest, ParsingRejectsBadInputWithClearErrors) {
  struct Bad {
    Devices devices;
    std::string quoted;  // What the error must quote.
  };
  const std::vector<Bad> bad = {{"many", "many"}, {"-2", "-2"}, {-2, "-2"},
                                {"1,x", "1,x"},   {"[0", "[0"}, {std::vector<int>{-1}, "-1"},
                                {"0.5", "0.5"},   {" ", "' '"}};
  for (const Bad& value : bad) {
    SCOPED_TRACE(absl::StrCat("devices=", value.devices.ToString()));
    absl::StatusOr<std::vector<int>> parsed;
    EXPECT_NO_THROW(parsed = accelerator_->ParseDevices(value.devices));
    ASSERT_FALSE(parsed.ok()) << "accepted as " << absl::StrJoin(*parsed, ",");
    EXPECT_TRUE(parsed.status().code() == absl::StatusCode::kInvalidArgument ||
                parsed.status().code() == absl::StatusCode::kFailedPrecondition)
        << parsed.status();
    EXPECT_TRUE(absl::StrContains(parsed.status().message(), value.quoted))
        << "the error does not quote the bad value (" << value.quoted << "): " << parsed.status().message();
  }
  // Whatever the answer, these must not throw (counts far beyond any machine, every device, a list).
  for (const Devices& devices : {Devices(1 << 20), Devices(-1), Devices("0,1"), Devices("auto"), Devices(1)}) {
    EXPECT_NO_THROW(accelerator_->ParseDevices(devices).ok()) << devices.ToString();
  }
}

TEST_F(ConformanceTest, AutoAndOneParseToTheCountedDevices) {
  KILN_SKIP_UNLESS_AVAILABLE();
  absl::StatusOr<std::vector<int>> all = accelerator_->ParseDevices("auto");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(static_cast<int>(all->size()), accelerator_->AutoDeviceCount());
  absl::StatusOr<std::vector<int>> one = accelerator_->ParseDevices(1);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->size(), 1u);
}

// Whatever form `devices` takes, ParseDevices names devices that are there. For numbered devices (the accelerator
// takes a list of indices) every index is below the number present, a larger count or index is refused, and "auto"
// and -1 stay within them; for devices that are processes (the CPU's), the indices are 0..n-1.
TEST_F(ConformanceTest, IndicesStayWithinTheDevicesPresent) {
  KILN_SKIP_UNLESS_AVAILABLE();
  const bool numbered = accelerator_->ParseDevices(std::vector<int>{0}).ok();
  const absl::StatusOr<std::vector<int>> all = accelerator_->ParseDevices(-1);
  const int present = numbered && all.ok() ? static_cast<int>(all->size()) : accelerator_->AutoDeviceCount();
  ASSERT_GE(present, 1);
  std::vector<Devices> forms = {Devices("auto"), Devices(1), Devices("1"), Devices(present),
                                Devices(absl::StrCat(present))};
  if (numbered) {
    forms.insert(forms.end(), {Devices(-1), Devices("-1"), Devices(std::vector<int>{0}),
                               Devices(std::vector<int>{present - 1}), Devices(absl::StrCat(present - 1, ","))});
  }
  for (const Devices& devices : forms) {
    SCOPED_TRACE(absl::StrCat("devices=", devices.ToString(), " with ", present,
                              numbered ? " numbered device(s) present" : " device(s) counted"));
    absl::StatusOr<std::vector<int>> indices = accelerator_->ParseDevices(devices);
    if (!indices.ok()) {
      EXPECT_EQ(indices.status().code(), absl::StatusCode::kInvalidArgument) << indices.status();
      continue;
    }
    EXPECT_FALSE(indices->empty()) << "parsed to no device";
    std::set<int> distinct(indices->begin(), indices->end());
    EXPECT_EQ(distinct.size(), indices->size()) << "an index appears twice: " << absl::StrJoin(*indices, ",");
    const int bound = numbered ? present : static_cast<int>(indices->size());
    for (int index : *indices) {
      EXPECT_TRUE(index >= 0 && index < bound)
          << "index " << index << " is not a device here (" << absl::StrJoin(*indices, ",") << "; "
          << (numbered ? "devices 0.." : "processes 0..") << bound - 1 << " exist)";
    }
    if (devices == Devices("auto")) {
      EXPECT_EQ(static_cast<int>(indices->size()), accelerator_->AutoDeviceCount());
    }
  }
  if (numbered) {
    for (const Devices& beyond : {Devices(present + 1), Devices(std::vector<int>{present})}) {
      absl::StatusOr<std::vector<int>> indices = accelerator_->ParseDevices(beyond);
      EXPECT_FALSE(indices.ok()) << "devices=" << beyond.ToString() << " was accepted as "
                                 << (indices.ok() ? absl::StrJoin(*indices, ",") : "")
                                 << " with " << present << " device(s) present; it must be an error that says "
                                 << "which exist";
    }
  }
}

TEST_F(ConformanceTest, ParallelDevicesMatchTheParsedSet) {
  KILN_SKIP_UNLESS_AVAILABLE();
  for (const Devices& devices : {Devices("auto"), Devices(1)}) {
    SCOPED_TRACE(absl::StrCat("devices=", devices.ToString()));
    absl::StatusOr<std::vector<int>> indices = accelerator_->ParseDevices(devices);
    ASSERT_TRUE(indices.ok()) << indices.status();
    std::vector<c10::Device> parallel;
    EXPECT_NO_THROW(parallel = accelerator_->ParallelDevices(*indices));
    ASSERT_EQ(parallel.size(), indices->size()) << "ParallelDevices must give one device per parsed index";
    std::set<c10::DeviceIndex> distinct;
    bool all_indexed = true;
    for (const LogicalDevice& logical : LogicalDevices(*accelerator_, *indices)) {
      const c10::Device& device = logical.compute;
      EXPECT_EQ(device.type(), parallel.front().type()) << "devices of one accelerator must share a type";
      all_indexed = all_indexed && device.has_index();
      if (device.has_index()) distinct.insert(device.index());
      absl::StatusOr<DeviceStats> stats = accelerator_->GetDeviceStats(logical);
      EXPECT_TRUE(stats.ok()) << "the accelerator refuses its own device " << logical.ToString() << ": "
                              << stats.status();
    }
    if (all_indexed) {
      EXPECT_EQ(distinct.size(), parallel.size()) << "two processes were given the same device";
    }
  }
}

TEST_F(ConformanceTest, SetupAndTeardownRepeat) {
  KILN_SKIP_UNLESS_AVAILABLE();
  for (const LogicalDevice& device : AllDevices()) {
    for (int round = 0; round < 3; ++round) {
      SCOPED_TRACE(absl::StrCat(device.ToString(), ", round ", round));
      absl::Status setup = accelerator_->SetupDevice(device);
      ASSERT_TRUE(setup.ok()) << setup;
      at::Tensor on_device = at::arange(16, at::kFloat).to(device.compute);
      EXPECT_EQ(on_device.device().type(), device.compute.type());
      EXPECT_EQ((on_device * 2).sum().to(at::kCPU).item<float>(), 240.0f);
      on_device.reset();
      absl::Status teardown = accelerator_->TeardownDevice(device);
      ASSERT_TRUE(teardown.ok()) << teardown;
    }
  }
}

// hal/accelerator.h: the const methods may be called from several threads at once (the connector, the trainer and
// tools share one instance). Four threads ask the same questions; every answer must equal the first thread's.
TEST_F(ConformanceTest, ConstMethodsAnswerAlikeFromSeveralThreads) {
  struct Answers {
    std::string name, backend, parsed, precisions;
    int count = -1;
    bool available = false;
    size_t stats = 0;
    bool steady = true;  // Every round gave this thread the same count.
  };
  const bool usable = UnavailableReason().empty();
  const std::vector<LogicalDevice> devices = usable ? AllDevices() : std::vector<LogicalDevice>{};
  const auto ask = [&] {
    Answers answers;
    for (int round = 0; round < 20; ++round) {
      answers.name = accelerator_->name();
      answers.backend = accelerator_->ProcessGroupBackend();
      absl::StatusOr<std::vector<int>> parsed = accelerator_->ParseDevices("auto");
      answers.parsed = parsed.ok() ? absl::StrJoin(*parsed, ",") : std::string(parsed.status().message());
      answers.precisions = PrecisionNames(accelerator_->SupportedPrecisions());
      const int count = accelerator_->AutoDeviceCount();
      if (round > 0 && (count != answers.count)) answers.steady = false;
      answers.count = count;
      answers.available = accelerator_->CheckAvailable().ok();
      answers.stats = 0;
      for (const LogicalDevice& device : devices) answers.stats += accelerator_->GetDeviceStats(device).ok() ? 1 : 0;
    }
    return answers;
  };
  std::vector<Answers> answers(4);
  std::vector<std::thread> threads;
  for (Answers& slot : answers) threads.emplace_back([&slot, &ask] { slot = ask(); });
  for (std::thread& thread : threads) thread.join();
  for (size_t i = 1; i < answers.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("thread ", i));
    EXPECT_EQ(answers[i].name, answers[0].name);
    EXPECT_EQ(answers[i].backend, answers[0].backend);
    EXPECT_EQ(answers[i].parsed, answers[0].parsed) << "ParseDevices(\"auto\") answered differently";
    EXPECT_EQ(answers[i].precisions, answers[0].precisions);
    EXPECT_EQ(answers[i].count, answers[0].count) << "AutoDeviceCount answered differently from another thread";
    EXPECT_EQ(answers[i].available, answers[0].available);
    EXPECT_EQ(answers[i].stats, answers[0].stats);
  }
  for (const Answers& thread : answers) {
    EXPECT_TRUE(thread.steady) << "AutoDeviceCount answered differently from another thread's calls in between";
  }
  EXPECT_EQ(answers[0].stats, devices.size()) << "a device's statistics failed while other threads asked too";
}

TEST_F(ConformanceTest, StatisticsAreWellFormed) {
  KILN_SKIP_UNLESS_AVAILABLE();
  const std::vector<LogicalDevice> devices = AllDevices();
  ASSERT_FALSE(devices.empty());
  for (const LogicalDevice& device : devices) {
    SCOPED_TRACE(device.ToString());
    absl::StatusOr<DeviceStats> stats;
    EXPECT_NO_THROW(stats = accelerator_->GetDeviceStats(device));
    ASSERT_TRUE(stats.ok()) << stats.status();
    for (const auto& [key, value] : *stats) {
      EXPECT_TRUE(IsLowerSnakeCase(key)) << "statistic key '" << key << "' is not lower_snake_case";
      EXPECT_TRUE(std::isfinite(value)) << "statistic '" << key << "' is " << value;
    }
  }
  LogicalDevice foreign = devices.front();
  foreign.compute = c10::Device(foreign.compute.type() == c10::DeviceType::Meta ? c10::DeviceType::IPU
                                                                                : c10::DeviceType::Meta);
  absl::StatusOr<DeviceStats> refused;
  EXPECT_NO_THROW(refused = accelerator_->GetDeviceStats(foreign));
  EXPECT_FALSE(refused.ok()) << "statistics of " << foreign.ToString() << ", which is not this accelerator's device";
  // For numbered devices, an index beyond those present is not one of its devices either, whatever it computes on.
  absl::StatusOr<std::vector<int>> all = accelerator_->ParseDevices(-1);
  if (accelerator_->ParseDevices(std::vector<int>{0}).ok() && all.ok()) {
    LogicalDevice beyond = devices.back();
    beyond.index = static_cast<int>(all->size());
    absl::StatusOr<DeviceStats> missing;
    EXPECT_NO_THROW(missing = accelerator_->GetDeviceStats(beyond));
    EXPECT_FALSE(missing.ok()) << "statistics of " << beyond.ToString() << ", beyond the " << all->size()
                               << " device(s) present";
  }
}

// A declared peak (what MFU divides by) is a positive, finite FLOP/s figure for the dtypes the accelerator trains in;
// unknown (std::nullopt, the default) is always allowed. Never a throw.
TEST_F(ConformanceTest, PeakFlopsArePositiveOrUnknown) {
  KILN_SKIP_UNLESS_AVAILABLE();
  for (const LogicalDevice& device : AllDevices()) {
    for (Precision precision : accelerator_->SupportedPrecisions()) {
      SCOPED_TRACE(absl::StrCat(device.ToString(), " ", PrecisionName(precision)));
      std::optional<double> peak;
      EXPECT_NO_THROW(peak = accelerator_->PeakFlops(device, ComputeDtype(precision)));
      if (peak.has_value()) {
        EXPECT_TRUE(std::isfinite(*peak) && *peak > 0) << "PeakFlops gave " << *peak;
      }
    }
  }
}

// A small two-layer model trained with SGD and momentum; returns the final parameters and the losses.
struct TrainingResult {
  std::vector<at::Tensor> parameters;  // On the CPU.
  std::vector<double> losses;
  bool ran_on_device = true;
};

TrainingResult Train(const c10::Device& device, int steps) {
  at::Generator generator = at::detail::createCPUGenerator(20240607);
  const at::Tensor inputs = at::randn({64, 8}, generator, at::kFloat);
  const at::Tensor targets = at::randn({64, 3}, generator, at::kFloat);
  std::vector<at::Tensor> parameters = {at::randn({16, 8}, generator, at::kFloat) * 0.3, at::zeros({16}, at::kFloat),
                                        at::randn({3, 16}, generator, at::kFloat) * 0.3, at::zeros({3}, at::kFloat)};
  for (at::Tensor& parameter : parameters) parameter = parameter.to(device).set_requires_grad(true);
  torch::optim::SGD optimizer(parameters, torch::optim::SGDOptions(0.05).momentum(0.9));
  const at::Tensor x = inputs.to(device);
  const at::Tensor y = targets.to(device);
  TrainingResult result;
  for (int step = 0; step < steps; ++step) {
    optimizer.zero_grad();
    const at::Tensor hidden = at::tanh(at::linear(x, parameters[0], parameters[1]));
    const at::Tensor loss = at::mse_loss(at::linear(hidden, parameters[2], parameters[3]), y);
    loss.backward();
    optimizer.step();
    result.losses.push_back(loss.detach().to(at::kCPU).item<double>());
  }
  for (const at::Tensor& parameter : parameters) {
    result.ran_on_device = result.ran_on_device && parameter.device() == device &&
                           (!parameter.grad().defined() || parameter.grad().device() == device);
    result.parameters.push_back(parameter.detach().to(at::kCPU));
  }
  return result;
}

TEST_F(ConformanceTest, TrainingStepsMatchTheCpu) {
  KILN_SKIP_UNLESS_AVAILABLE();
  const std::vector<Precision> supported = accelerator_->SupportedPrecisions();
  if (std::find(supported.begin(), supported.end(), Precision::k32True) == supported.end()) {
    GTEST_SKIP() << "'" << accelerator_->name() << "' does not declare 32-true, the precision this check trains in";
  }
  const std::vector<LogicalDevice> devices = DevicesFor(1);
  ASSERT_EQ(devices.size(), 1u);
  const LogicalDevice& logical = devices.front();
  const c10::Device device = logical.compute;
  ASSERT_TRUE(accelerator_->SetupDevice(logical).ok());
  constexpr int kSteps = 8;
  const TrainingResult on_device = Train(device, kSteps);
  const TrainingResult on_cpu = Train(c10::Device(c10::DeviceType::CPU), kSteps);
  EXPECT_TRUE(accelerator_->TeardownDevice(logical).ok());

  EXPECT_TRUE(on_device.ran_on_device) << "parameters or gradients left " << device << " during training";
  ASSERT_EQ(on_device.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_LT(on_cpu.losses.back(), on_cpu.losses.front()) << "the reference run did not learn";
  for (int step = 0; step < kSteps; ++step) {
    if (GetConfig().bitwise) {
      EXPECT_EQ(on_device.losses[step], on_cpu.losses[step]) << "loss of step " << step;
    } else {
      EXPECT_NEAR(on_device.losses[step], on_cpu.losses[step], 1e-5 * std::abs(on_cpu.losses[step]) + 1e-6)
          << "loss of step " << step;
    }
  }
  for (size_t i = 0; i < on_cpu.parameters.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("parameter ", i));
    if (GetConfig().bitwise) {
      EXPECT_TRUE(at::equal(on_device.parameters[i], on_cpu.parameters[i]))
          << "largest difference: " << (on_device.parameters[i] - on_cpu.parameters[i]).abs().max().item<float>();
    } else {
      EXPECT_TRUE(at::allclose(on_device.parameters[i], on_cpu.parameters[i], /*rtol=*/1e-5, /*atol=*/1e-6))
          << "largest difference: " << (on_device.parameters[i] - on_cpu.parameters[i]).abs().max().item<float>();
    }
  }
}

TEST_F(ConformanceTest, EveryCountedDeviceHoldsATensor) {
  KILN_SKIP_UNLESS_AVAILABLE();
  // Every device the accelerator counts must take a tensor and give it back: a count above what the runtime can use
  // would otherwise surface later, as an out-of-memory error in the middle of training on the last devices.
  absl::StatusOr<std::vector<int>> all = accelerator_->ParseDevices(-1);
  if (!all.ok() || all->empty()) all = accelerator_->ParseDevices("auto");
  ASSERT_TRUE(all.ok() && !all->empty()) << "no device counted: " << all.status().message();
  const at::Tensor probe = at::arange(256, at::kFloat);  // 1 KiB.
  for (const LogicalDevice& device : LogicalDevices(*accelerator_, *all)) {
    SCOPED_TRACE(device.ToString());
    ASSERT_TRUE(accelerator_->SetupDevice(device).ok()) << "SetupDevice(" << device.ToString() << ") failed";
    std::string failure;
    try {
      if (!at::equal(probe.to(device.compute).to(at::kCPU), probe)) failure = "it gave back other values";
    } catch (const std::exception& e) {
      const std::string message = compat::ExceptionMessage(e);
      failure = message.substr(0, message.find('\n'));
    }
    EXPECT_TRUE(failure.empty()) << accelerator_->name() << " counts " << all->size() << " device(s), but "
                                 << device.ToString() << " cannot hold a 1 KiB tensor (" << failure
                                 << "): its device count lies. Count only the devices this process can use "
                                 << "(ParseDevices, AutoDeviceCount; a device kit's Device::Count)";
    (void)accelerator_->TeardownDevice(device);
  }
}

// ---- Collectives (hal/collectives.h), across real processes.

// What each rank of the collective checks says before each step, on its standard output: the test reads the last one
// of a rank that never ended, to name the step it never left.
constexpr char kStepLine[] = "conformance: entering ";

// Where each rank is, in the store: "<step number> <step>", set when it enters the step. A rank whose step fails names
// the ranks that had not come to it.
std::string ProgressKey(int rank) { return absl::StrCat("progress_", rank); }

// A rank of the collective checks, in a process of its own: makes the accelerator's backend and checks every
// collective on its device's tensors (but those the accelerator declares it lacks, which it skips saying so). Prints
// "FAIL: ..." for each wrong result; returns the process's exit status (0: every check passed; 1: a wrong result;
// 3: the backend could not be made; 4: a collective threw: the message names the collective, this rank and the ranks
// that had not come to it).
int RunCollectiveRank(const Config& config) {
  const int rank = config.collective_rank;
  const int world = config.collective_world;
  absl::StatusOr<std::shared_ptr<Accelerator>> found = AcceleratorRegistry::Default().Get(config.accelerator);
  if (!found.ok()) {
    std::cout << "error: " << found.status().message() << std::endl;
    return 3;
  }
  Accelerator& accelerator = **found;
  absl::StatusOr<std::vector<int>> indices = accelerator.ParseDevices(-1);
  if (!indices.ok() || indices->empty()) indices = accelerator.ParseDevices("auto");
  if (!indices.ok() || indices->empty()) {
    std::cout << "error: no device to run on" << std::endl;
    return 3;
  }
  const std::vector<LogicalDevice> devices = LogicalDevices(accelerator, *indices);
  const LogicalDevice& logical = devices[rank % devices.size()];
  const c10::Device device = logical.compute;
  if (absl::Status status = accelerator.SetupDevice(logical); !status.ok()) {
    std::cout << "error: SetupDevice(" << logical.ToString() << "): " << status.message() << std::endl;
    return 3;
  }
  const std::chrono::milliseconds timeout(config.collective_timeout_ms);
  CollectiveOptions options;
  options.rank = rank;
  options.world_size = world;
  options.device_index = device.has_index() ? device.index() : 0;
  options.timeout = timeout;
  options.host_endpoints = {{.is_interface = false, .name = "127.0.0.1"}};
  c10::intrusive_ptr<c10d::Store> progress;
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(config.collective_port);
    store_options.isServer = rank == 0;
    store_options.numWorkers = static_cast<size_t>(world);
    store_options.waitWorkers = false;
    store_options.timeout = timeout;
    auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);
    options.store = c10::make_intrusive<c10d::PrefixStore>("conformance", store);
    progress = c10::make_intrusive<c10d::PrefixStore>("progress", store);
  } catch (const std::exception& e) {
    std::cout << "error: the store: " << compat::ExceptionMessage(e) << std::endl;
    return 3;
  }
  int step_number = 0;
  std::string step;
  // Enters `name`: says so on standard output and in the store.
  const auto enter = [&](const std::string& name) {
    step = name;
    ++step_number;
    std::cout << kStepLine << name << " (rank " << rank << " of " << world << ")" << std::endl;
    try {
      const std::string where = absl::StrCat(step_number, " ", name);
      progress->set(ProgressKey(rank), std::vector<uint8_t>(where.begin(), where.end()));
    } catch (const std::exception&) {
      // The step itself will fail and say why.
    }
  };
  // The ranks that had not come to this step, as the store says: "rank 1 (still in broadcast)".
  const auto missing = [&]() -> std::string {
    std::vector<std::string> behind;
    try {
      for (int peer = 0; peer < world; ++peer) {
        if (peer == rank) continue;
        if (!progress->check({ProgressKey(peer)})) {
          behind.push_back(absl::StrCat("rank ", peer, " (not started)"));
          continue;
        }
        const std::vector<uint8_t> bytes = progress->get(ProgressKey(peer));
        const std::string where(bytes.begin(), bytes.end());
        const size_t space = where.find(' ');
        int number = 0;
        if (absl::SimpleAtoi(where.substr(0, space), &number) && number < step_number) {
          behind.push_back(absl::StrCat("rank ", peer, " (still in ", where.substr(space + 1), ")"));
        }
      }
    } catch (const std::exception& e) {
      return absl::StrCat("; where the other ranks are cannot be read (", compat::ExceptionMessage(e), ")");
    }
    if (behind.empty()) return "; every other rank had come to it: the backend's " + step + " itself failed";
    return absl::StrCat("; ", absl::StrJoin(behind, ", "), " had not come to it");
  };
  enter("MakeCollectiveBackend");
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> made = accelerator.MakeCollectiveBackend(logical, options);
  if (!made.ok()) {
    std::cout << "error: MakeCollectiveBackend on rank " << rank << " of " << world << ": " << made.status().message()
              << missing() << std::endl;
    return 3;
  }
  c10d::Backend& backend = **made;
  const auto on_device = at::TensorOptions(at::kFloat).device(device);
  int failures = 0;
  // Plans, logs and `process_group_backend` name the backend by ProcessGroupBackend(): it must be the one made.
  if (backend.getBackendName() != accelerator.ProcessGroupBackend()) {
    std::cout << "FAIL: MakeCollectiveBackend made a backend named '" << backend.getBackendName()
              << "', but ProcessGroupBackend() says '" << accelerator.ProcessGroupBackend() << "'" << std::endl;
    ++failures;
  }
  const auto expect = [&](const char* what, const at::Tensor& got, const at::Tensor& want) {
    if (got.device() != device) {
      std::cout << "FAIL: " << what << ": the result left " << device << " for " << got.device() << std::endl;
      ++failures;
    } else if (!at::equal(got.to(at::kCPU), want)) {
      std::cout << "FAIL: " << what << " on rank " << rank << " of " << world << " gave " << got.to(at::kCPU)
                << " where " << want << " is right; the backend's " << what << " computes wrongly" << std::endl;
      ++failures;
    }
  };
  // What the backend declares it lacks is skipped, saying so (Accelerator::SupportedCollectives).
  const CollectiveSupport support = accelerator.SupportedCollectives();
  const auto skip = [&](const char* what) {
    std::cout << "SKIPPED: " << what << ": accelerator '" << accelerator.name()
              << "' declares its backend has none (Accelerator::SupportedCollectives)" << std::endl;
  };
  try {
    enter("allreduce (sum)");
    std::vector<at::Tensor> sum = {at::full({5}, rank + 1, on_device)};
    backend.allreduce(sum)->wait();
    expect("allreduce", sum[0], at::full({5}, world * (world + 1) / 2, at::kFloat));

    enter("broadcast (from rank 0)");
    std::vector<at::Tensor> from_root = {at::full({3}, rank == 0 ? 7.0 : -1.0, on_device)};
    backend.broadcast(from_root)->wait();
    expect("broadcast", from_root[0], at::full({3}, 7.0, at::kFloat));

    if (support.allgather) {
      enter("allgather");
      std::vector<at::Tensor> mine = {at::full({2}, rank, on_device)};
      std::vector<std::vector<at::Tensor>> gathered(1);
      for (int r = 0; r < world; ++r) gathered[0].push_back(at::zeros({2}, on_device));
      backend.allgather(gathered, mine)->wait();
      for (int r = 0; r < world; ++r) expect("allgather", gathered[0][r], at::full({2}, r, at::kFloat));

      enter("_allgather_base");
      at::Tensor flat = at::zeros({2 * world}, on_device);
      at::Tensor input = at::full({2}, rank, on_device);
      backend._allgather_base(flat, input)->wait();
      expect("_allgather_base", flat, at::arange(world, at::kFloat).repeat_interleave(2));
    } else {
      skip("allgather and _allgather_base");
    }

    if (support.reduce_scatter) {
      enter("_reduce_scatter_base");
      // Rank q contributes arange(2 * world) + q; rank r keeps elements [2r, 2r + 2) of the sum.
      at::Tensor contributions = (at::arange(2 * world, at::kFloat) + rank).to(device);
      at::Tensor scattered = at::zeros({2}, on_device);
      backend._reduce_scatter_base(scattered, contributions)->wait();
      expect("_reduce_scatter_base", scattered,
             at::arange(2 * rank, 2 * rank + 2, at::kFloat) * world + world * (world - 1) / 2);
    } else {
      skip("_reduce_scatter_base");
    }

    enter("barrier");
    backend.barrier()->wait();
    // Rank 0 serves the store: it stays until every rank is done, as Kiln's trainer keeps the program's store (a
    // backend may use the store in its last collective: a store-based barrier reads its peers' keys after rank 0's).
    step = "leaving (rank 0 serves the store until every rank is done)";
    progress->set(absl::StrCat("done/", rank), std::vector<uint8_t>{1});
    if (rank == 0) {
      std::vector<std::string> done;
      for (int peer = 0; peer < world; ++peer) done.push_back(absl::StrCat("done/", peer));
      progress->wait(done, timeout);
    }
  } catch (const std::exception& e) {
    std::cout << "error: " << step << " threw on rank " << rank << " of " << world << ": "
              << compat::ExceptionMessage(e) << missing() << std::endl;
    return 4;
  }
  (void)accelerator.TeardownDevice(logical);
  return failures == 0 ? 0 : 1;
}

// The step a rank's output says it entered last ("" when none).
std::string LastStep(const std::string& output) {
  const size_t at = output.rfind(kStepLine);
  if (at == std::string::npos) return "";
  const size_t start = at + std::string(kStepLine).size();
  const size_t end = output.find(" (rank ", start);
  return output.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

// Starts ranks `ranks` of `world` (this binary again, with --collective_*) through testing::RunRanks.
std::vector<testing::RankRun> RunRanks(const std::vector<int>& ranks, int world, int timeout_ms, double deadline_s) {
  const Config& config = GetConfig();
  const int port = testing::FreeLoopbackPort();
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::vector<std::vector<std::string>> argvs;
  for (const int rank : ranks) {
    std::vector<std::string> args = {config.self, "--accelerator=" + config.accelerator,
                                     absl::StrCat("--collective_rank=", rank),
                                     absl::StrCat("--collective_world=", world), absl::StrCat("--collective_port=", port),
                                     absl::StrCat("--collective_timeout_ms=", timeout_ms)};
    for (const std::string& plugin : config.plugins) args.push_back("--accelerator_plugin=" + plugin);
    for (const std::string& library : config.libraries) args.push_back("--accelerator_library=" + library);
    argvs.push_back(std::move(args));
  }
  return testing::RunRanks(argvs, absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/collective_", port), deadline_s);
}

std::string Output(const testing::RankRun& run) { return testing::RankOutput(run); }

// The numbers of processes the collective checks run: 2 and 4, sharing devices where there are fewer; with
// --one_rank_per_device, those that have a device each, or as many as there are devices when that is fewer than 2.
std::vector<int> CollectiveWorlds(const Accelerator& accelerator) {
  if (!GetConfig().one_rank_per_device) return {2, 4};
  absl::StatusOr<std::vector<int>> all = accelerator.ParseDevices(-1);
  const int devices = all.ok() ? static_cast<int>(all->size()) : accelerator.AutoDeviceCount();
  std::vector<int> worlds;
  for (const int world : {2, 4}) {
    if (world <= devices) worlds.push_back(world);
  }
  if (worlds.empty()) worlds.push_back(std::max(1, devices));
  std::cout << "[   INFO   ] " << accelerator.name() << " runs one rank per device and has " << devices
            << " here: the collective checks run " << absl::StrJoin(worlds, " and ")
            << " process(es) (2 and 4 need as many devices)" << std::endl;
  return worlds;
}

// The collective checks' bounds, as shares of the test's own time limit (TEST_TIMEOUT), so that a rank whose peer
// never comes, or a backend that never returns, fails the check with every rank's output before Bazel would kill the
// test: half of it for the worlds' runs together, and in each a quarter of its run for the store, the join and each
// collective (bounded in turn) so that a waiting rank reports its own timeout; a tenth, at most 12 s, beside a 3 s
// timeout for the missing peer; the rest for the other checks and for reporting.
struct CollectiveBounds {
  double deadline_s;
  int timeout_ms;
};
CollectiveBounds BoundsFor(size_t worlds) {
  const double deadline_s = 0.5 * testing::TestTimeoutSeconds() / static_cast<double>(std::max<size_t>(1, worlds));
  return {deadline_s, std::max(1000, static_cast<int>(deadline_s * 1000 / 4))};
}

TEST_F(ConformanceTest, CollectivesGiveTheRightValuesAcrossProcesses) {
  KILN_SKIP_UNLESS_AVAILABLE();
  if (const std::string lacking = accelerator_->SupportedCollectives().Lacking(); !lacking.empty()) {
    std::cout << "[   INFO   ] " << accelerator_->name() << " declares its collective backend has no " << lacking
              << " (Accelerator::SupportedCollectives): those checks are skipped" << std::endl;
  }
  const std::vector<int> worlds = CollectiveWorlds(*accelerator_);
  const CollectiveBounds bounds = BoundsFor(worlds.size());
  for (const int world : worlds) {
    SCOPED_TRACE(absl::StrCat(world, " processes"));
    std::vector<int> ranks(world);
    for (int r = 0; r < world; ++r) ranks[r] = r;
    const std::vector<testing::RankRun> runs = RunRanks(ranks, world, bounds.timeout_ms, bounds.deadline_s);
    for (size_t r = 0; r < runs.size(); ++r) {
      const std::string output = Output(runs[r]);
      const std::string last = LastStep(output);
      EXPECT_EQ(runs[r].status, 0)
          << "rank " << r << " of " << world
          << (runs[r].status == -2
                  ? absl::StrCat(" did not finish within ", static_cast<int>(bounds.deadline_s), " s",
                                 last.empty() ? "" : absl::StrCat(": it never left ", last),
                                 ", though every collective must end within its timeout (",
                                 bounds.timeout_ms / 1000, " s here)")
              : runs[r].status == -3 ? absl::StrCat(" was stopped after another rank had failed",
                                                    last.empty() ? "" : absl::StrCat(", in ", last))
                                     : " failed")
          << "; the backend of Accelerator::MakeCollectiveBackend must give hal/collectives.h's results on "
          << accelerator_->name() << "'s tensors. Its output:\n"
          << output;
    }
  }
}

TEST_F(ConformanceTest, AMissingPeerFailsWithinTheTimeout) {
  KILN_SKIP_UNLESS_AVAILABLE();
  // Rank 0 of 2 alone: making the backend or its first collective must fail within the timeout (plus set-up).
  constexpr int kTimeoutMs = 3000;
  const double slack_s = std::min(12.0, 0.1 * testing::TestTimeoutSeconds());
  const std::vector<testing::RankRun> runs = RunRanks({0}, 2, kTimeoutMs, kTimeoutMs / 1000.0 + slack_s);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_NE(runs[0].status, -2) << "rank 0 waited for a peer that never came past " << kTimeoutMs / 1000 << " s + "
                                << slack_s << " s: the backend must bound joining and every collective by "
                                << "CollectiveOptions::timeout (hal/collectives.h). Its output:\n"
                                << Output(runs[0]);
  EXPECT_NE(runs[0].status, 0) << "rank 0 of 2 succeeded without its peer. Its output:\n" << Output(runs[0]);
}

}  // namespace
}  // namespace kiln::conformance

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  kiln::conformance::Config& config = kiln::conformance::GetConfig();
  config.self = kiln::testing::ThisProgram(argv[0]);
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    int number = 0;
    if (absl::ConsumePrefix(&arg, "--collective_rank=") && absl::SimpleAtoi(arg, &number)) {
      config.collective_rank = number;
    } else if (absl::ConsumePrefix(&arg, "--collective_world=") && absl::SimpleAtoi(arg, &number)) {
      config.collective_world = number;
    } else if (absl::ConsumePrefix(&arg, "--collective_port=") && absl::SimpleAtoi(arg, &number)) {
      config.collective_port = number;
    } else if (absl::ConsumePrefix(&arg, "--collective_timeout_ms=") && absl::SimpleAtoi(arg, &number)) {
      config.collective_timeout_ms = number;
    } else if (absl::ConsumePrefix(&arg, "--accelerator=")) {
      config.accelerator = std::string(arg);
    } else if (arg == "--bitwise") {
      config.bitwise = true;
    } else if (arg == "--one_rank_per_device") {
      config.one_rank_per_device = true;
    } else if (absl::ConsumePrefix(&arg, "--accelerator_plugin=")) {
      config.plugins.emplace_back(arg);
    } else if (absl::ConsumePrefix(&arg, "--accelerator_library=")) {
      config.libraries.emplace_back(arg);
    } else {
      std::cerr << "error: unknown argument '" << argv[i] << "'; usage: " << argv[0]
                << " --accelerator=<registered name> [--bitwise] [--one_rank_per_device]"
                   " [--accelerator_plugin=<path>]... [--accelerator_library=<name>=<path>]... [gtest flags]\n";
      return 2;
    }
  }
  if (config.accelerator.empty()) {
    std::cerr << "error: --accelerator=<registered name> is required (kiln_accelerator_conformance_test sets it)\n";
    return 2;
  }
  for (const std::string& spec : config.libraries) {
    if (absl::Status registered = kiln::RegisterPrivateUse1LibrarySpec(kiln::AcceleratorRegistry::Default(), spec);
        !registered.ok()) {
      std::cerr << "error: " << registered.message() << "\n";
      return 2;
    }
  }
  for (const std::string& path : config.plugins) {
    absl::StatusOr<kiln::PluginInfo> loaded = kiln::LoadAcceleratorPlugin(path, kiln::AcceleratorRegistry::Default());
    if (!loaded.ok()) {
      std::cerr << "error: " << loaded.status().message() << "\n";
      return 2;
    }
    std::cout << "Loaded accelerator plugin '" << loaded->name << "' from " << path << " (plugin API "
              << loaded->api_version << ")\n";
  }
  if (config.collective_rank >= 0) return kiln::conformance::RunCollectiveRank(config);
  std::cout << "Kiln accelerator conformance suite for '" << config.accelerator << "'"
            << (config.bitwise ? ", training compared with the CPU bit for bit" : "") << "\n";
  return RUN_ALL_TESTS();
}
