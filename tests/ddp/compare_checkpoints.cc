// compare_checkpoints A.ckpt B.ckpt TOLERANCE: compares the model parameters of two Kiln checkpoints, prints the
// largest absolute difference, and exits 0 when it is at most TOLERANCE (1 otherwise, 2 for bad input).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "ATen/ATen.h"
#include "absl/strings/numbers.h"
#include "trainer/checkpoint/checkpoint_io.h"

namespace {

std::map<std::string, at::Tensor> ModelTensors(const std::string& path) {
  absl::StatusOr<kiln::Checkpoint> checkpoint = kiln::ReadCheckpoint(path);
  if (!checkpoint.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(checkpoint.status().message()).c_str());
    std::exit(2);
  }
  std::map<std::string, at::Tensor> tensors;
  for (auto& [name, tensor] : kiln::CheckpointStateDict(*checkpoint)) tensors[name] = tensor;
  return tensors;
}

}  // namespace

int main(int argc, char** argv) {
  double tolerance = 0;
  if (argc != 4 || !absl::SimpleAtod(argv[3], &tolerance)) {
    std::fprintf(stderr, "usage: %s A.ckpt B.ckpt TOLERANCE\n", argv[0]);
    return 2;
  }
  const auto a = ModelTensors(argv[1]);
  const auto b = ModelTensors(argv[2]);
  if (a.size() != b.size() || a.empty()) {
    std::fprintf(stderr, "error: the checkpoints hold %zu and %zu tensors\n", a.size(), b.size());
    return 2;
  }
  double largest = 0;
  for (const auto& [name, tensor] : a) {
    auto other = b.find(name);
    if (other == b.end() || other->second.sizes() != tensor.sizes()) {
      std::fprintf(stderr, "error: '%s' is missing or has another shape in %s\n", name.c_str(), argv[2]);
      return 2;
    }
    largest = std::max(largest, (tensor.to(at::kDouble) - other->second.to(at::kDouble)).abs().max().item<double>());
  }
  std::printf("max_abs_diff %.3g over %zu tensors (tolerance %.3g)\n", largest, a.size(), tolerance);
  return largest <= tolerance ? 0 : 1;
}
