// The machine-readable summary of a run (--summary_json): one JSON object, so that scripts can compare runs
// exactly.
//
//   {"mode": "fit", "final_metrics": {"val_acc": 0.93, ...}, "epochs": 10, "global_step": 640,
//    "wall_time_seconds": 4.2, "plan": {<Plan::ToJson>}, "accelerator": "cpu", "devices": ["cpu"],
//    "strategy": "single_device", "precision": "32-true", "resumed_from": "", "log_dir": "...",
//    "last_checkpoint": "...", "params_sha256": "<64 hex digits>", ...}
//
// Non-finite metrics are written as null. params_sha256 is SHA-256 over every parameter's bytes (CPU, contiguous)
// in registration order: equal parameters give equal digests, bit for bit.
#ifndef KILN_TRAINER_CLI_RUN_SUMMARY_H_
#define KILN_TRAINER_CLI_RUN_SUMMARY_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "connector/json.h"  // JsonString, for the reports built here.
#include "torch/nn/module.h"
#include "trainer/core/metrics.h"

namespace kiln {

// SHA-256 over `module`'s parameters, as described above.
std::string ParamsSha256(const torch::nn::Module& module);

// A JSON object of metrics, in name order.
std::string JsonMetrics(const MetricMap& metrics);

// Builds the summary object field by field, in the order given. Values are raw JSON.
class JsonObject {
 public:
  JsonObject& Add(const std::string& key, const std::string& raw_json);
  JsonObject& AddString(const std::string& key, const std::string& text) { return Add(key, JsonString(text)); }
  std::string ToString() const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_CLI_RUN_SUMMARY_H_
