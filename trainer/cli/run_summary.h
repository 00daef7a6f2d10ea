// The machine-readable summary of a run (--summary_json): one JSON object, so that scripts can compare runs
// exactly.
//
//   {"mode": "fit", "final_metrics": {"val_acc": 0.93, ...}, "epochs": 10, "global_step": 640,
//    "wall_time_seconds": 4.2, "plan": {<Plan::ToJson>}, "accelerator": "cpu", "devices": ["cpu"],
//    "strategy": "single_device", "precision": "32-true", "resumed_from": "", "log_dir": "...",
//    "last_checkpoint": "...", "params_sha256": "<64 hex digits>", ...}
//
// One line, as connector/json.h's JsonLine writes it. Non-finite metrics are written as null. params_sha256 is SHA-256
// over every parameter's bytes (CPU, contiguous) in registration order: equal parameters give equal digests, bit for
// bit.
#ifndef KILN_TRAINER_CLI_RUN_SUMMARY_H_
#define KILN_TRAINER_CLI_RUN_SUMMARY_H_

#include <string>

#include "connector/json.h"
#include "nlohmann/json.hpp"
#include "torch/nn/module.h"
#include "trainer/core/metrics.h"

namespace kiln {

// SHA-256 over `module`'s parameters, as described above.
std::string ParamsSha256(const torch::nn::Module& module);

// A JSON object of metrics, in name order.
nlohmann::ordered_json JsonMetrics(const MetricMap& metrics);

// Builds the summary object field by field, in the order given (a key added again keeps its place and takes the new
// value).
class JsonObject {
 public:
  JsonObject& Add(const std::string& key, nlohmann::ordered_json value);
  // Text goes through AddString: these are deleted so that text meant as raw JSON (as Add once took) cannot
  // silently become a JSON string.
  JsonObject& Add(const std::string& key, const std::string& text) = delete;
  JsonObject& Add(const std::string& key, const char* text) = delete;
  JsonObject& AddString(const std::string& key, const std::string& text) {
    return Add(key, nlohmann::ordered_json(text));
  }
  // The object as JsonLine writes it, and a newline.
  std::string ToString() const;

 private:
  nlohmann::ordered_json fields_ = nlohmann::ordered_json::object();
};

}  // namespace kiln

#endif  // KILN_TRAINER_CLI_RUN_SUMMARY_H_
