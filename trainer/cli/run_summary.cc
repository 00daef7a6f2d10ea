#include "trainer/cli/run_summary.h"

#include <utility>

#include "ATen/ATen.h"
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

nlohmann::ordered_json JsonMetrics(const MetricMap& metrics) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  for (const auto& [name, value] : metrics) json[name] = value;  // JsonLine writes non-finite values as null.
  return json;
}

JsonObject& JsonObject::Add(const std::string& key, nlohmann::ordered_json value) {
  fields_[key] = std::move(value);
  return *this;
}

std::string JsonObject::ToString() const { return JsonLine(fields_) + "\n"; }

}  // namespace kiln
