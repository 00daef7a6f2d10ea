// hparams.yaml, as Lightning's loggers write it beside the metrics: one `key: value` line per hyper-parameter, in
// key order; "{}" when there are none. Numbers and true/false are written bare; other text is quoted when YAML
// would read it as something else. Written with yaml-cpp's emitter.
#ifndef KILN_TRAINER_LOGGERS_HPARAMS_YAML_H_
#define KILN_TRAINER_LOGGERS_HPARAMS_YAML_H_

#include <map>
#include <string>

#include "absl/status/status.h"

namespace YAML {
class Emitter;
}  // namespace YAML

namespace kiln {

// Writes `text` as hparams.yaml writes a value: bare when YAML reads it back as that bool, number or text, else
// double-quoted. For other YAML files Kiln writes (config.yaml), so that they quote alike.
void WriteYamlScalar(YAML::Emitter& out, const std::string& text);

std::string HparamsYaml(const std::map<std::string, std::string>& hparams);

// Writes HparamsYaml(hparams) to `path` through a temporary file and a rename.
absl::Status WriteHparamsYaml(const std::string& path, const std::map<std::string, std::string>& hparams);

}  // namespace kiln

#endif  // KILN_TRAINER_LOGGERS_HPARAMS_YAML_H_
