// hal/c10d_creators: c10d's naming conventions as a table, and the creator read from a real vendor library (the
// double of this folder, built by plain g++) once it is loaded.
#include "hal/c10d_creators.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace kiln {
namespace {

constexpr char kLibrary[] = "tests/vendor_stack/libacme_torch.so";

TEST(C10dBackendNameOf, FollowsC10dsConventions) {
  const struct {
    const char* function;
    const char* backend;
  } cases[] = {
      {"c10d::ProcessGroupOCCL::createProcessGroupOCCL", "occl"},  // PyTorch's OpenReg.
      {"c10d::BackendDummy::createBackendDummy", "dummy"},          // PyTorch's cpp-extension tutorial.
      {"c10d_npu::ProcessGroupHCCL::create", "hccl"},
      {"acme::createProcessGroupACCL", "accl"},
      {"create_process_group_xccl", "xccl"},
      {"acme::ProcessGroup::create", ""},  // No name after the prefix.
      {"acme::make_group", ""},
  };
  for (const auto& c : cases) EXPECT_EQ(C10dBackendNameOf(c.function), c.backend) << c.function;
}

TEST(FindC10dCreators, RefusesALibraryThatIsNotLoaded) {
  absl::StatusOr<std::vector<C10dCreator>> creators = FindC10dCreators(kLibrary);
  ASSERT_FALSE(creators.ok());
  EXPECT_NE(creators.status().message().find("is not loaded"), std::string::npos) << creators.status();
}

TEST(FindC10dCreators, FindsTheVendorsCreatorByItsSignature) {
  ASSERT_NE(::dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL), nullptr) << ::dlerror();
  absl::StatusOr<std::vector<C10dCreator>> creators = FindC10dCreators(kLibrary);
  ASSERT_TRUE(creators.ok()) << creators.status();
  ASSERT_EQ(creators->size(), 1u);
  EXPECT_EQ((*creators)[0].backend, "accl");
  EXPECT_EQ((*creators)[0].function, "acme::ProcessGroupACCL::createProcessGroupACCL");
  EXPECT_NE((*creators)[0].create, nullptr);
}

TEST(FindC10dCreators, RefusesAFileThatIsNotASharedLibrary) {
  // The loader knows a library by the path it was loaded from; the file at that path is replaced by text afterwards,
  // which is the one way a loaded path can hold something that is not ELF.
  const std::string tmp = std::getenv("TEST_TMPDIR");
  const std::string path = tmp + "/libcopy.so";
  {
    std::ifstream in(kLibrary, std::ios::binary);
    std::ofstream out(path, std::ios::binary);
    out << in.rdbuf();
  }
  ASSERT_NE(::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL), nullptr) << ::dlerror();
  std::ofstream(tmp + "/text") << std::string(200, 'x');
  ASSERT_EQ(std::rename((tmp + "/text").c_str(), path.c_str()), 0);
  absl::StatusOr<std::vector<C10dCreator>> creators = FindC10dCreators(path);
  ASSERT_FALSE(creators.ok());
  EXPECT_NE(creators.status().message().find("is not a 64-bit ELF shared library"), std::string::npos)
      << creators.status();
}

}  // namespace
}  // namespace kiln
