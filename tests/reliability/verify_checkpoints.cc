// Checks that every checkpoint named on the command line is complete: it reads as a Kiln checkpoint
// (trainer/checkpoint/checkpoint_io.h: ReadCheckpoint, which also verifies every record's CRC-32). Prints one line per file;
// exit status 1 when any fails, 2 without arguments.
#include <cstdio>

#include "trainer/checkpoint/checkpoint_io.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: verify_checkpoints FILE.ckpt...\n");
    return 2;
  }
  int failed = 0;
  for (int i = 1; i < argc; ++i) {
    const auto archive = kiln::ReadCheckpoint(argv[i]);
    if (archive.ok()) {
      std::printf("complete: %s\n", argv[i]);
    } else {
      std::printf("BROKEN: %s\n", std::string(archive.status().message()).c_str());
      ++failed;
    }
  }
  return failed == 0 ? 0 : 1;
}
