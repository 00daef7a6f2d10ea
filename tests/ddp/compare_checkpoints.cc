// compare_checkpoints A.ckpt B.ckpt TOLERANCE [--with_optimizer]: compares the model parameters of two Kiln
// checkpoints (and, with --with_optimizer, every tensor of their optimizers' states, which must have the same
// layout: the same parameter indices and keys), prints the largest absolute difference, and exits 0 when it is at
// most TOLERANCE (1 otherwise, 2 for bad input).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "ATen/ATen.h"
#include "absl/strings/numbers.h"
#include "trainer/checkpoint/checkpoint_io.h"

namespace {

// The model's tensors by name and, with `optimizer`, each optimizer state tensor as
// "optimizer_states[i].state[j].KEY".
std::map<std::string, at::Tensor> Tensors(const std::string& path, bool optimizer) {
  absl::StatusOr<kiln::Checkpoint> checkpoint = kiln::ReadCheckpoint(path);
  if (!checkpoint.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(checkpoint.status().message()).c_str());
    std::exit(2);
  }
  std::map<std::string, at::Tensor> tensors;
  for (auto& [name, tensor] : kiln::CheckpointStateDict(*checkpoint)) tensors[name] = tensor;
  if (!optimizer || !checkpoint->contents.contains("optimizer_states")) return tensors;
  const auto optimizers = checkpoint->contents.at("optimizer_states").toListRef();
  for (size_t i = 0; i < optimizers.size(); ++i) {
    for (const auto& entry : optimizers[i].toGenericDict().at("state").toGenericDict()) {
      for (const auto& item : entry.value().toGenericDict()) {
        if (!item.value().isTensor()) continue;
        tensors["optimizer_states[" + std::to_string(i) + "].state[" + std::to_string(entry.key().toInt()) + "]." +
                item.key().toStringRef()] = item.value().toTensor();
      }
    }
  }
  return tensors;
}

}  // namespace

int main(int argc, char** argv) {
  double tolerance = 0;
  const bool optimizer = argc == 5 && std::string(argv[4]) == "--with_optimizer";
  if ((argc != 4 && !optimizer) || !absl::SimpleAtod(argv[3], &tolerance)) {
    std::fprintf(stderr, "usage: %s A.ckpt B.ckpt TOLERANCE [--with_optimizer]\n", argv[0]);
    return 2;
  }
  const auto a = Tensors(argv[1], optimizer);
  const auto b = Tensors(argv[2], optimizer);
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
