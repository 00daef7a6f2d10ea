// A folder of the benchmark's own for the files it writes, made unique (mkdtemp) under $TEST_TMPDIR, or /tmp outside
// Bazel, and removed with everything in it when the object goes. Two benchmark programs running at once (two
// checkpoint_bench runs, say) so never write the same file.
#ifndef KILN_TESTS_BENCH_SCRATCH_DIR_H_
#define KILN_TESTS_BENCH_SCRATCH_DIR_H_

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace kiln::bench {

class ScratchDir {
 public:
  // `name` begins the folder's name. Exits the program, saying why, when no folder can be made.
  explicit ScratchDir(const std::string& name) {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string pattern = std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name + "-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      std::fprintf(stderr, "cannot make a folder like %s for the benchmark's files\n", pattern.c_str());
      std::exit(1);
    }
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace kiln::bench

#endif  // KILN_TESTS_BENCH_SCRATCH_DIR_H_
