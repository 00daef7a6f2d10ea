// main() for a fuzz target built without libFuzzer: runs every file named on the command line, and every file
// under each folder named there, through LLVMFuzzerTestOneInput once, in sorted order.
//
// It is how `bazel test //...` replays each target's seed corpus (and past findings, kept in the corpus) with the
// default toolchain. A crash, a sanitizer report or a failed check inside the target ends the process, naming the
// input first on standard error. Exit status 0 when every input ran, 1 when an argument names nothing readable or
// no input was found at all (an empty corpus would otherwise pass without testing anything).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) __attribute__((weak));

namespace {

namespace fs = std::filesystem;

bool CollectInputs(const std::string& argument, std::vector<std::string>& inputs) {
  std::error_code error;
  if (fs::is_regular_file(argument, error)) {
    inputs.push_back(argument);
    return true;
  }
  if (!fs::is_directory(argument, error)) {
    std::fprintf(stderr, "replay: '%s' is neither a file nor a folder\n", argument.c_str());
    return false;
  }
  std::vector<std::string> found;
  for (auto it = fs::recursive_directory_iterator(argument, error); !error && it != fs::recursive_directory_iterator();
       it.increment(error)) {
    if (it->is_regular_file(error)) found.push_back(it->path().string());
  }
  if (error) {
    std::fprintf(stderr, "replay: cannot list '%s': %s\n", argument.c_str(), error.message().c_str());
    return false;
  }
  std::sort(found.begin(), found.end());
  inputs.insert(inputs.end(), found.begin(), found.end());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    if (!CollectInputs(argv[i], inputs)) return 1;
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs; usage: %s <corpus folder or file>...\n", argv[0]);
    return 1;
  }
  for (const std::string& input : inputs) {
    std::ifstream file(input, std::ios::binary);
    if (!file) {
      std::fprintf(stderr, "replay: cannot read %s\n", input.c_str());
      return 1;
    }
    const std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", input.c_str(), bytes.size());
    std::fflush(stderr);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replayed %zu inputs without a failure\n", inputs.size());
  return 0;
}
