#include "trainer/cli/run_summary.h"

#include <cmath>

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainer/cli/sha256.h"

namespace kiln {

std::string ParamsSha256(const torch::nn::Module& module) {
  Sha256 sha;
  for (const at::Tensor& parameter : module.parameters()) {
    const at::Tensor bytes = parameter.detach().to(at::kCPU).contiguous();
    sha.Update(bytes.data_ptr(), bytes.numel() * bytes.element_size());
  }
  return sha.HexDigest();
}

std::string JsonMetrics(const MetricMap& metrics) {
  std::vector<std::string> fields;
  for (const auto& [name, value] : metrics) {
    fields.push_back(absl::StrCat(JsonString(name), ": ",
                                  std::isfinite(value) ? absl::StrFormat("%.17g", value) : std::string("null")));
  }
  return absl::StrCat("{", absl::StrJoin(fields, ", "), "}");
}

JsonObject& JsonObject::Add(const std::string& key, const std::string& raw_json) {
  fields_.emplace_back(key, raw_json);
  return *this;
}

std::string JsonObject::ToString() const {
  std::vector<std::string> fields;
  for (const auto& [key, value] : fields_) fields.push_back(absl::StrCat(JsonString(key), ": ", value));
  return absl::StrCat("{", absl::StrJoin(fields, ", "), "}\n");
}

}  // namespace kiln
