#include "trainer/models/model_summary.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace kiln {
namespace {

std::string TypeName(const torch::nn::Module& module) {
  absl::string_view name = module.name();
  const size_t colon = name.rfind("::");
  if (colon != absl::string_view::npos) name.remove_prefix(colon + 2);
  absl::ConsumeSuffix(&name, "Impl");
  return std::string(name);
}

int64_t CountParameters(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const at::Tensor& parameter : module.parameters(/*recurse=*/true)) count += parameter.numel();
  return count;
}

void AddLayers(const torch::nn::Module& module, const std::string& prefix, int depth, int max_depth,
               std::vector<LayerSummary>& layers) {
  if (depth > max_depth) return;
  for (const auto& child : module.named_children()) {
    const std::string name = prefix.empty() ? child.key() : absl::StrCat(prefix, ".", child.key());
    layers.push_back({name, TypeName(*child.value()), CountParameters(*child.value())});
    AddLayers(*child.value(), name, depth + 1, max_depth, layers);
  }
}

}  // namespace

std::string HumanReadableCount(int64_t count) {
  static const char* const kUnits[] = {" ", "K", "M", "B", "T"};
  const int digits = count > 0 ? static_cast<int>(std::floor(std::log10(static_cast<double>(count)))) + 1 : 1;
  const int groups = std::min(static_cast<int>(std::ceil(digits / 3.0)), 5);
  const double scaled = static_cast<double>(count) * std::pow(10.0, -3.0 * (groups - 1));
  const int index = groups - 1;
  if (index < 1 || scaled >= 100) {
    return std::string(
        absl::StripTrailingAsciiWhitespace(absl::StrCat(static_cast<int64_t>(scaled), " ", kUnits[index])));
  }
  return absl::StrFormat("%.1f %s", scaled, kUnits[index]);
}

ModelSummary Summarize(const torch::nn::Module& module, int max_depth) {
  ModelSummary summary;
  AddLayers(module, "", 1, max_depth, summary.layers);
  double bytes = 0;
  for (const at::Tensor& parameter : module.parameters(/*recurse=*/true)) {
    (parameter.requires_grad() ? summary.trainable_parameters : summary.non_trainable_parameters) += parameter.numel();
    bytes += static_cast<double>(parameter.numel()) * static_cast<double>(parameter.element_size());
  }
  summary.size_megabytes = bytes / 1e6;
  return summary;
}

std::string ModelSummary::ToString() const {
  size_t index_width = std::to_string(layers.empty() ? 0 : layers.size() - 1).size();
  size_t name_width = 4;
  size_t type_width = 4;
  std::vector<std::string> counts;
  for (const LayerSummary& layer : layers) {
    name_width = std::max(name_width, layer.name.size());
    type_width = std::max(type_width, layer.type.size());
    counts.push_back(HumanReadableCount(layer.parameters));
  }
  std::string out;
  if (!layers.empty()) {
    std::vector<std::string> lines = {
        absl::StrFormat("%-*s | %-*s | %-*s | %s", index_width, "", name_width, "Name", type_width, "Type", "Params")};
    for (size_t i = 0; i < layers.size(); ++i) {
      lines.push_back(absl::StrFormat("%-*d | %-*s | %-*s | %s", index_width, i, name_width, layers[i].name, type_width,
                                      layers[i].type, counts[i]));
    }
    size_t longest = 0;
    for (const std::string& line : lines) longest = std::max(longest, line.size());
    const std::string rule(longest + 2, '-');
    absl::StrAppend(&out, lines[0], "\n", rule, "\n");
    for (size_t i = 1; i < lines.size(); ++i) absl::StrAppend(&out, lines[i], "\n");
    absl::StrAppend(&out, rule, "\n");
  }
  absl::StrAppendFormat(&out, "%-10sTrainable params\n", HumanReadableCount(trainable_parameters));
  absl::StrAppendFormat(&out, "%-10sNon-trainable params\n", HumanReadableCount(non_trainable_parameters));
  absl::StrAppendFormat(&out, "%-10sTotal params\n", HumanReadableCount(total_parameters()));
  absl::StrAppendFormat(&out, "%-10.3fTotal estimated model params size (MB)\n", size_megabytes);
  return out;
}

}  // namespace kiln
