// The test of a release's old labels (old_labels.bzl): it passes by building. Each library linked in includes the
// headers of one label of the release, through that label alone; a header the label no longer provides stops the
// build with Bazel's "undeclared inclusion(s)". This only says what was checked.
#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  std::printf("release %s: %s public headers built through their %s labels\n", argv[1], argv[2], argv[3]);
  return 0;
}
