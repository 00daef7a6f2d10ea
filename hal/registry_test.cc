#include "hal/registry.h"

#include <memory>
#include <stdexcept>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/testing/fake_accelerator.h"

namespace kiln {
namespace {

using ::kiln::testing::FakeAccelerator;
using ::kiln::testing::FakeAcceleratorOptions;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

AcceleratorSpec FakeSpec(std::string name, int priority = 0, std::vector<std::string> aliases = {}) {
  AcceleratorSpec spec;
  spec.name = name;
  spec.description = "fake " + name;
  spec.aliases = std::move(aliases);
  spec.priority = priority;
  spec.factory = [name] {
    FakeAcceleratorOptions options;
    options.name = name;
    return std::make_shared<FakeAccelerator>(options);
  };
  return spec;
}

TEST(RegistryTest, RegistersAndFindsByNameAndAliasCaseInsensitively) {
  AcceleratorRegistry registry;
  ASSERT_TRUE(registry.Register(FakeSpec("npu", 5, {"Virtual_NPU"})).ok());
  for (const char* key : {"npu", "NPU", "virtual_npu", "VIRTUAL_npu"}) {
    absl::StatusOr<std::shared_ptr<Accelerator>> accelerator = registry.Get(key);
    ASSERT_TRUE(accelerator.ok()) << key << ": " << accelerator.status();
    EXPECT_EQ((*accelerator)->name(), "npu");
  }
  absl::StatusOr<AcceleratorSpec> spec = registry.Find("virtual_npu");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->priority, 5);
  EXPECT_THAT(spec->aliases, ElementsAre("virtual_npu"));
}

TEST(RegistryTest, StoresEachAliasOnceAndNeverTheNameItself) {
  AcceleratorRegistry registry;
  ASSERT_TRUE(registry.Register(FakeSpec("npu", 0, {"NPU", "vnpu", "VNPU", "accel", "vnpu"})).ok());
  absl::StatusOr<AcceleratorSpec> spec = registry.Find("VNPU");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->aliases, ElementsAre("vnpu", "accel"));
  EXPECT_TRUE(registry.Get("npu").ok());
}

TEST(RegistryTest, InstanceIsCreatedOnceAndShared) {
  AcceleratorRegistry registry;
  int made = 0;
  AcceleratorSpec spec = FakeSpec("a");
  spec.factory = [&made] {
    ++made;
    return std::make_shared<FakeAccelerator>();
  };
  ASSERT_TRUE(registry.Register(spec).ok());
  auto first = registry.Get("a");
  auto second = registry.Get("A");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->get(), second->get());
  EXPECT_EQ(made, 1);
}

TEST(RegistryTest, DuplicateNameIsAnErrorUnlessOverriding) {
  AcceleratorRegistry registry;
  ASSERT_TRUE(registry.Register(FakeSpec("npu", 1, {"n"})).ok());
  absl::Status duplicate = registry.Register(FakeSpec("NPU", 2));
  EXPECT_EQ(duplicate.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(duplicate.message(), HasSubstr("accelerator name 'npu' is already taken by accelerator 'npu'"));

  ASSERT_TRUE(registry.Register(FakeSpec("npu", 7, {"m"}), {.override_existing = true}).ok());
  EXPECT_EQ(registry.Find("npu")->priority, 7);
  EXPECT_FALSE(registry.Find("n").ok()) << "the replaced entry's aliases must go with it";
  EXPECT_TRUE(registry.Find("m").ok());
}

TEST(RegistryTest, AliasClashesAreErrors) {
  AcceleratorRegistry registry;
  ASSERT_TRUE(registry.Register(FakeSpec("cuda", 10, {"gpu"})).ok());
  EXPECT_THAT(registry.Register(FakeSpec("other", 0, {"gpu"})).message(),
              HasSubstr("alias 'gpu' of accelerator 'other' is already taken by accelerator 'cuda'"));
  EXPECT_THAT(registry.Register(FakeSpec("gpu")).message(), HasSubstr("'gpu' is already an alias of accelerator 'cuda'"));
  EXPECT_THAT(registry.Register(FakeSpec("x", 0, {"cuda"})).message(),
              HasSubstr("alias 'cuda' of accelerator 'x' is already taken by accelerator 'cuda'"));
}

TEST(RegistryTest, ClashesNameWhereBothRegistrationsComeFrom) {
  AcceleratorRegistry registry;
  AcceleratorSpec first = FakeSpec("npu", 0, {"n"});
  first.origin = "backends/npu/npu.cc";
  ASSERT_TRUE(registry.Register(first).ok());
  AcceleratorSpec second = FakeSpec("npu");
  second.origin = "external/vendor/vendor.cc";
  EXPECT_THAT(registry.Register(second).message(),
              HasSubstr("accelerator name 'npu' (registered in external/vendor/vendor.cc) is already taken by "
                        "accelerator 'npu' (registered in backends/npu/npu.cc)"));
  AcceleratorSpec third = FakeSpec("other", 0, {"n"});
  third.origin = "external/vendor/other.cc";
  EXPECT_THAT(registry.Register(third).message(),
              HasSubstr("alias 'n' of accelerator 'other' (registered in external/vendor/other.cc) is already taken "
                        "by accelerator 'npu' (registered in backends/npu/npu.cc)"));
}

// What KILN_REGISTER_ACCELERATOR does before main(): a clash is kept, not aborted on, and StartupStatus names both
// source files and the fix. (This test binary links no backend, so the default registry starts empty.)
TEST(RegistryTest, AClashAtStartupIsKeptForStartupStatus) {
  AcceleratorRegistry& registry = AcceleratorRegistry::Default();
  EXPECT_TRUE(registry.StartupStatus().ok()) << registry.StartupStatus();
  EXPECT_TRUE(internal::RegisterAtStartup(FakeSpec("startup_clash"), "backends/one/one.cc"));
  EXPECT_FALSE(internal::RegisterAtStartup(FakeSpec("startup_clash"), "external/two/two.cc"));
  const absl::Status status = registry.StartupStatus();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("accelerator name 'startup_clash' (registered in external/two/two.cc) is "
                                          "already taken by accelerator 'startup_clash' (registered in "
                                          "backends/one/one.cc)"));
  EXPECT_THAT(status.message(), HasSubstr("KILN_REGISTER_ACCELERATOR line"));
  EXPECT_EQ(registry.Find("startup_clash")->origin, "backends/one/one.cc") << "the first registration stays";
}

TEST(RegistryTest, UnknownNameListsRegisteredOnes) {
  AcceleratorRegistry registry;
  ASSERT_TRUE(registry.Register(FakeSpec("zeta")).ok());
  ASSERT_TRUE(registry.Register(FakeSpec("alpha")).ok());
  absl::StatusOr<std::shared_ptr<Accelerator>> missing = registry.Get("tpu");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("unknown accelerator 'tpu'; registered: alpha, zeta"));
  EXPECT_THAT(AcceleratorRegistry().Get("cpu").status().message(), HasSubstr("registered: (none)"));
  // An empty registry is a missing link: the error names the target to add.
  EXPECT_THAT(AcceleratorRegistry().Get("cpu").status().message(), HasSubstr("@kiln//backends:linked"));
}

TEST(RegistryTest, RejectsInvalidSpecs) {
  AcceleratorRegistry registry;
  EXPECT_THAT(registry.Register(FakeSpec("auto")).message(), HasSubstr("'auto' is reserved"));
  EXPECT_THAT(registry.Register(FakeSpec("")).message(), HasSubstr("invalid accelerator name ''"));
  EXPECT_THAT(registry.Register(FakeSpec("has space")).message(), HasSubstr("invalid accelerator name"));
  EXPECT_THAT(registry.Register(FakeSpec("ok", 0, {"bad alias"})).message(),
              HasSubstr("invalid accelerator alias 'bad alias'"));
  AcceleratorSpec no_factory = FakeSpec("nofactory");
  no_factory.factory = nullptr;
  EXPECT_THAT(registry.Register(no_factory).message(), HasSubstr("without a factory"));
  EXPECT_EQ(registry.NameList(), "(none)") << "failed registrations must leave nothing behind";
}

TEST(RegistryTest, FactoryFailuresAreErrorsNotCrashes) {
  AcceleratorRegistry registry;
  AcceleratorSpec throws = FakeSpec("throws");
  throws.factory = []() -> std::shared_ptr<Accelerator> { throw std::runtime_error("driver exploded"); };
  AcceleratorSpec null = FakeSpec("null");
  null.factory = [] { return std::shared_ptr<Accelerator>(); };
  ASSERT_TRUE(registry.Register(throws).ok());
  ASSERT_TRUE(registry.Register(null).ok());
  EXPECT_THAT(registry.Get("throws").status().message(), HasSubstr("'throws' threw: driver exploded"));
  EXPECT_THAT(registry.Get("null").status().message(), HasSubstr("'null' returned null"));
}

TEST(RegistryTest, ListsByPriorityThenName) {
  AcceleratorRegistry registry;
  ASSERT_TRUE(registry.Register(FakeSpec("b", 1)).ok());
  ASSERT_TRUE(registry.Register(FakeSpec("a", 1)).ok());
  ASSERT_TRUE(registry.Register(FakeSpec("top", 9)).ok());
  std::vector<std::string> names;
  for (const AcceleratorSpec& spec : registry.List()) names.push_back(spec.name);
  EXPECT_THAT(names, ElementsAre("top", "a", "b"));
}

TEST(RegistryTest, TestRegistriesDoNotLeakIntoTheDefault) {
  {
    AcceleratorRegistry registry;
    ASSERT_TRUE(registry.Register(FakeSpec("leaky")).ok());
  }
  EXPECT_FALSE(AcceleratorRegistry::Default().Find("leaky").ok());
}

}  // namespace
}  // namespace kiln
