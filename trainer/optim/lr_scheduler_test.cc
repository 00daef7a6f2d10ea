// Kiln's schedules against PyTorch's. The expected rates are not written here: the test runs Debian's python3 with
// torch 1.13 (python3-torch) on the same settings and compares every rate after construction and after each step.
// Recursive schedules use PyTorch's arithmetic, so they agree to rounding (a relative 1e-12 is allowed).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torch/optim/sgd.h"
#include "trainer/optim/cosine_annealing_lr.h"
#include "trainer/optim/linear_lr.h"
#include "trainer/optim/lr_scheduler_options.h"
#include "trainer/optim/one_cycle_lr.h"
#include "trainer/optim/reduce_lr_on_plateau.h"
#include "trainer/optim/sequential_lr.h"
#include "trainer/optim/step_lr.h"

namespace kiln {
namespace {

// Each case prints one line: its name, then every rate of every group (group by group within a step), after
// construction and after each step. Plateau cases then print their state after the last step.
constexpr char kPythonCases[] = R"PY(
import warnings
warnings.filterwarnings("ignore")
import torch
from torch.optim import lr_scheduler as S

def opt(*lrs):
    return torch.optim.SGD([{"params": [torch.zeros(1, requires_grad=True)], "lr": lr} for lr in lrs], lr=lrs[0])

def run(name, o, sched, steps, metrics=None):
    rates = [g["lr"] for g in o.param_groups]
    for i in range(steps):
        o.step()
        if metrics is None:
            sched.step()
        else:
            sched.step(metrics[i])
        rates += [g["lr"] for g in o.param_groups]
    print(name, " ".join(repr(float(r)) for r in rates))

o = opt(0.1); run("step", o, S.StepLR(o, step_size=3, gamma=0.5), 10)
o = opt(0.1, 0.02); run("cosine", o, S.CosineAnnealingLR(o, T_max=7, eta_min=0.001), 20)
o = opt(0.1); run("linear", o, S.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=4), 8)
o = opt(0.1); run("onecycle", o, S.OneCycleLR(o, max_lr=0.5, total_steps=20, cycle_momentum=False), 20)
o = opt(0.1); run("onecycle3", o, S.OneCycleLR(o, max_lr=0.5, total_steps=17, pct_start=0.25,
                 anneal_strategy="linear", div_factor=10.0, final_div_factor=100.0, three_phase=True,
                 cycle_momentum=False), 17)
o = opt(0.1, 0.05)
w = S.LinearLR(o, start_factor=0.1, end_factor=1.0, total_iters=3)
c = S.CosineAnnealingLR(o, T_max=10, eta_min=0.0)
run("warmup_cosine", o, S.SequentialLR(o, [w, c], milestones=[3]), 15)
o = opt(0.1)
w = S.LinearLR(o, start_factor=0.5, end_factor=1.0, total_iters=2)
s = S.StepLR(o, step_size=2, gamma=0.1)
run("warmup_step", o, S.SequentialLR(o, [w, s], milestones=[2]), 8)
m = [5, 4, 4, 4, 4, 4, 3.9, 3.9, 3.9, 3.9, 1, 1, 1, 1, 1, 1, 1]
o = opt(1.0)
p = S.ReduceLROnPlateau(o, mode="min", factor=0.5, patience=2, threshold=0.1, cooldown=1, min_lr=0.1)
run("plateau_min", o, p, len(m), m)
print("plateau_min_state", p.best, p.num_bad_epochs, p.cooldown_counter, p.last_epoch)
m = [1, 2, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5]
o = opt(1.0)
p = S.ReduceLROnPlateau(o, mode="max", threshold=0.6, threshold_mode="abs")
run("plateau_max", o, p, len(m), m)
print("plateau_max_state", p.best, p.num_bad_epochs, p.cooldown_counter, p.last_epoch)
)PY";

std::map<std::string, std::vector<double>>* PythonRates() {
  static auto* rates = [] {
    auto* result = new std::map<std::string, std::vector<double>>;
    const char* tmp = std::getenv("TEST_TMPDIR");
    const std::string script = std::string(tmp != nullptr ? tmp : "/tmp") + "/lr_scheduler_cases.py";
    std::ofstream(script) << kPythonCases;
    FILE* pipe = popen(("/usr/bin/python3 " + script + " 2>&1").c_str(), "r");
    if (pipe == nullptr) return result;
    std::string output;
    char buffer[4096];
    while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
    const int status = pclose(pipe);
    if (status != 0) {
      ADD_FAILURE() << "python3 with torch (Debian's python3-torch; tools/setup.sh installs it) failed:\n" << output;
      return result;
    }
    for (absl::string_view line : absl::StrSplit(output, '\n', absl::SkipEmpty())) {
      std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
      std::vector<double>& values = (*result)[fields[0]];
      for (size_t i = 1; i < fields.size(); ++i) values.push_back(std::stod(fields[i]));
    }
    return result;
  }();
  return rates;
}

const std::vector<double>& Expected(const std::string& name) {
  auto found = PythonRates()->find(name);
  static const std::vector<double> kNone;
  if (found == PythonRates()->end()) {
    ADD_FAILURE() << "python printed no case '" << name << "'";
    return kNone;
  }
  return found->second;
}

// One SGD parameter group per rate, as the Python side builds them.
std::unique_ptr<torch::optim::SGD> Optimizer(const std::vector<double>& lrs) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (double lr : lrs) {
    groups.emplace_back(std::vector<at::Tensor>{at::zeros({1}, at::TensorOptions().requires_grad(true))},
                        std::make_unique<torch::optim::SGDOptions>(lr));
  }
  return std::make_unique<torch::optim::SGD>(std::move(groups), torch::optim::SGDOptions(lrs[0]));
}

std::vector<double> Rates(const torch::optim::Optimizer& optimizer) {
  std::vector<double> rates;
  for (const auto& group : optimizer.param_groups()) rates.push_back(group.options().get_lr());
  return rates;
}

// The rates after construction and after each of `steps` steps, as the Python side prints them.
template <typename Step>
std::vector<double> Record(const torch::optim::Optimizer& optimizer, int steps, Step&& step) {
  std::vector<double> rates = Rates(optimizer);
  for (int i = 0; i < steps; ++i) {
    step(i);
    for (double rate : Rates(optimizer)) rates.push_back(rate);
  }
  return rates;
}

void ExpectRates(const std::string& name, const std::vector<double>& actual) {
  const std::vector<double>& expected = Expected(name);
  ASSERT_EQ(actual.size(), expected.size()) << name;
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], 1e-12 * std::abs(expected[i]) + 1e-300) << name << ", value " << i;
  }
}

TEST(LRSchedulerTest, StepLR) {
  auto optimizer = Optimizer({0.1});
  StepLR scheduler(*optimizer, /*step_size=*/3, /*gamma=*/0.5);
  ExpectRates("step", Record(*optimizer, 10, [&](int) { scheduler.step(); }));
  EXPECT_EQ(scheduler.last_epoch(), 10);
}

TEST(LRSchedulerTest, CosineAnnealingLRPastTMaxAndTwoGroups) {
  auto optimizer = Optimizer({0.1, 0.02});
  CosineAnnealingLR scheduler(*optimizer, /*T_max=*/7, /*eta_min=*/0.001);
  ExpectRates("cosine", Record(*optimizer, 20, [&](int) { scheduler.step(); }));
}

TEST(LRSchedulerTest, LinearLR) {
  auto optimizer = Optimizer({0.1});
  LinearLR scheduler(*optimizer, 0.25, 1.0, 4);
  ExpectRates("linear", Record(*optimizer, 8, [&](int) { scheduler.step(); }));
}

TEST(LRSchedulerTest, OneCycleLR) {
  auto optimizer = Optimizer({0.1});
  OneCycleLR scheduler(*optimizer, {.max_lr = 0.5, .total_steps = 20});
  ExpectRates("onecycle", Record(*optimizer, 20, [&](int) { scheduler.step(); }));
  EXPECT_THROW(scheduler.step(), c10::Error) << "a 21st step of a 20-step cycle";
}

TEST(LRSchedulerTest, OneCycleLRThreePhaseLinear) {
  auto optimizer = Optimizer({0.1});
  OneCycleLR scheduler(*optimizer, {.max_lr = 0.5,
                                    .total_steps = 17,
                                    .pct_start = 0.25,
                                    .anneal_strategy = "linear",
                                    .div_factor = 10.0,
                                    .final_div_factor = 100.0,
                                    .three_phase = true});
  ExpectRates("onecycle3", Record(*optimizer, 17, [&](int) { scheduler.step(); }));
}

TEST(LRSchedulerTest, WarmupThenCosine) {
  auto optimizer = Optimizer({0.1, 0.05});
  auto warmup = std::make_shared<LinearLR>(*optimizer, 0.1, 1.0, 3);
  auto cosine = std::make_shared<CosineAnnealingLR>(*optimizer, 10, 0.0);
  SequentialLR scheduler(*optimizer, {warmup, cosine}, {3});
  ExpectRates("warmup_cosine", Record(*optimizer, 15, [&](int) { scheduler.step(); }));
}

TEST(LRSchedulerTest, WarmupThenStep) {
  auto optimizer = Optimizer({0.1});
  auto warmup = std::make_shared<LinearLR>(*optimizer, 0.5, 1.0, 2);
  auto step = std::make_shared<StepLR>(*optimizer, 2, 0.1);
  SequentialLR scheduler(*optimizer, {warmup, step}, {2});
  ExpectRates("warmup_step", Record(*optimizer, 8, [&](int) { scheduler.step(); }));
}

// The milestones fit checks a run's length against are where the rates change course: read from the rates.
TEST(LRSchedulerTest, MilestonesAreWhereTheScheduleChangesCourse) {
  const auto steps = [](const std::vector<LRScheduler::Milestone>& milestones) {
    std::vector<int64_t> out;
    for (const LRScheduler::Milestone& milestone : milestones) out.push_back(milestone.step);
    return out;
  };
  auto optimizer = Optimizer({0.1});
  StepLR step(*optimizer, 3, 0.5);
  ASSERT_EQ(steps(step.milestones()), std::vector<int64_t>{3});
  EXPECT_EQ(step.milestones()[0].setting, "StepLR(step_size=3)");
  std::vector<double> rates = Record(*optimizer, 4, [&](int) { step.step(); });
  EXPECT_EQ(rates[0], rates[2]) << "no change before the milestone";
  EXPECT_NE(rates[2], rates[3]) << "the change at step 3";

  auto warmed = Optimizer({0.1});
  auto warmup = std::make_shared<LinearLR>(*warmed, 0.5, 1.0, 2);
  auto decay = std::make_shared<StepLR>(*warmed, 3, 0.1);
  SequentialLR sequence(*warmed, {warmup, decay}, {2});
  EXPECT_EQ(steps(sequence.milestones()), (std::vector<int64_t>{2, 5})) << "the switch, then the decay after it";
  EXPECT_EQ(sequence.milestones()[1].setting, "SequentialLR's schedule 1, StepLR(step_size=3)");
  rates = Record(*warmed, 6, [&](int) { sequence.step(); });
  EXPECT_EQ(rates[2], rates[4]) << "the StepLR holds the rate from the switch until its own milestone";
  EXPECT_NE(rates[4], rates[5]) << "and decays at 2 + 3";

  auto cut = Optimizer({0.1});
  auto long_step = std::make_shared<StepLR>(*cut, 5, 0.1);
  auto after = std::make_shared<LinearLR>(*cut, 0.5, 1.0, 2);
  SequentialLR cut_off(*cut, {long_step, after}, {3});
  EXPECT_EQ(steps(cut_off.milestones()), std::vector<int64_t>{3}) << "a decay after the switch never happens";
}

void ExpectState(const std::string& name, const ReduceLROnPlateau& scheduler) {
  const std::vector<double>& state = Expected(name);
  ASSERT_EQ(state.size(), 4u);
  EXPECT_DOUBLE_EQ(scheduler.best(), state[0]);
  EXPECT_EQ(scheduler.num_bad_epochs(), state[1]);
  EXPECT_EQ(scheduler.cooldown_counter(), state[2]);
  EXPECT_EQ(scheduler.last_epoch(), state[3]);
}

TEST(LRSchedulerTest, ReduceLROnPlateauMinWithCooldownAndFloor) {
  const std::vector<double> metrics = {5, 4, 4, 4, 4, 4, 3.9, 3.9, 3.9, 3.9, 1, 1, 1, 1, 1, 1, 1};
  auto optimizer = Optimizer({1.0});
  ReduceLROnPlateau scheduler(
      *optimizer, {.mode = "min", .factor = 0.5, .patience = 2, .threshold = 0.1, .cooldown = 1, .min_lr = 0.1});
  ExpectRates("plateau_min",
              Record(*optimizer, static_cast<int>(metrics.size()), [&](int i) { scheduler.step(metrics[i]); }));
  ExpectState("plateau_min_state", scheduler);
}

TEST(LRSchedulerTest, ReduceLROnPlateauMaxAbsoluteWithDefaults) {
  const std::vector<double> metrics = {1, 2, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5};
  auto optimizer = Optimizer({1.0});
  ReduceLROnPlateau scheduler(*optimizer, {.mode = "max", .threshold = 0.6, .threshold_mode = "abs"});
  ExpectRates("plateau_max",
              Record(*optimizer, static_cast<int>(metrics.size()), [&](int i) { scheduler.step(metrics[i]); }));
  ExpectState("plateau_max_state", scheduler);
}

TEST(LRSchedulerTest, ReduceLROnPlateauStateRoundTripsAndRefusesAnotherMode) {
  auto optimizer = Optimizer({1.0});
  ReduceLROnPlateau scheduler(*optimizer, {.patience = 1});
  for (double metric : {3.0, 2.0, 2.5, 2.5}) scheduler.step(metric);
  const c10::impl::GenericDict state = scheduler.state_dict();
  auto fresh_optimizer = Optimizer({1.0});
  ReduceLROnPlateau fresh(*fresh_optimizer, {.patience = 1});
  ASSERT_TRUE(fresh.CheckStateDict(state).ok());
  fresh.load_state_dict(state);
  EXPECT_EQ(fresh.best(), 2.0);
  EXPECT_EQ(fresh.num_bad_epochs(), scheduler.num_bad_epochs());
  EXPECT_EQ(fresh.last_epoch(), 4);
  ReduceLROnPlateau other(*fresh_optimizer, {.mode = "max"});
  EXPECT_THAT(std::string(other.CheckStateDict(state).message()), ::testing::HasSubstr("mode 'min'"));
  c10::impl::GenericDict empty(c10::StringType::get(), c10::AnyType::get());
  EXPECT_THAT(std::string(fresh.CheckStateDict(empty).message()), ::testing::HasSubstr("'best'"));
}

TEST(LRSchedulerTest, BadSettingsThrowNamingThem) {
  auto optimizer = Optimizer({0.1});
  EXPECT_THROW(StepLR(*optimizer, 0), c10::Error);
  EXPECT_THROW(CosineAnnealingLR(*optimizer, 0), c10::Error);
  EXPECT_THROW(LinearLR(*optimizer, 0.0), c10::Error);
  EXPECT_THROW(OneCycleLR(*optimizer, {.max_lr = 0.1, .total_steps = 0}), c10::Error);
  EXPECT_THROW(ReduceLROnPlateau(*optimizer, {.factor = 1.0}), c10::Error);
}

// MakeLRSchedulers steps the schedule over the whole run on a scratch optimizer before it builds it: a rate that is
// ever NaN, infinite or past float32, or a schedule shorter than the run, is a ValueError before the first step, and
// the optimizer's rates are left as they were.
TEST(LRSchedulerTest, MakeLRSchedulersChecksTheRatesOverTheWholeRun) {
  const auto refuses = [](const LRSchedulerOptions& options, int64_t run_length, const std::string& says) {
    auto optimizer = Optimizer({0.1});
    try {
      MakeLRSchedulers(*optimizer, options, run_length);
      ADD_FAILURE() << options.name << ": accepted";
    } catch (const c10::ValueError& error) {
      EXPECT_THAT(error.what_without_backtrace(), ::testing::HasSubstr(says)) << options.name;
    }
    EXPECT_EQ(optimizer->param_groups()[0].options().get_lr(), 0.1) << "the check changed the optimizer's rate";
  };
  LRSchedulerOptions one_cycle{.name = "onecycle", .interval = SchedulerConfig::Interval::kStep};
  one_cycle.one_cycle.pct_start = 0.25;  // 0.25 * 4 steps: a warm-up phase of no steps, which divides by zero.
  refuses(one_cycle, 4, "gives a rate of -nan at step 0");
  one_cycle.one_cycle.pct_start = 0.3;
  one_cycle.one_cycle.div_factor = 1e-320;
  refuses(one_cycle, 8, "gives a rate of inf at step 0");
  one_cycle.one_cycle.div_factor = 25;
  one_cycle.one_cycle.total_steps = 4;
  refuses(one_cycle, 8, "OneCycleLR was stepped 6 times but its total_steps is 4");  // Its first step at construction counts.
  LRSchedulerOptions step{.name = "step", .step_size = 1, .gamma = 1e30};
  step.run_epochs = 3;
  refuses(step, -1, "gives a rate of 1e+59 at epoch 2 of the 3");  // 1e29 at epoch 1 is within float32.
  // The same schedules within range build, and a run the check cannot measure is not refused for it.
  auto optimizer = Optimizer({0.1});
  one_cycle.one_cycle.total_steps = 0;
  EXPECT_EQ(MakeLRSchedulers(*optimizer, one_cycle, 8).size(), 1u);
  step.gamma = 10;
  EXPECT_EQ(MakeLRSchedulers(*optimizer, step, -1).size(), 1u);
  step.gamma = 1e30;
  step.run_epochs = 0;
  EXPECT_EQ(MakeLRSchedulers(*optimizer, step, -1).size(), 1u);
}

}  // namespace
}  // namespace kiln
