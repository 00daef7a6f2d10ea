// hparams.yaml, as Lightning's loggers write it beside the metrics: one `key: value` line per hyper-parameter, in
// key order; "{}" when there are none. Numbers and true/false are written bare; other text is quoted when YAML
// would read it as something else. Written with yaml-cpp's emitter.
#ifndef KILN_TRAINER_LOGGERS_HPARAMS_YAML_H_
#define KILN_TRAINER_LOGGERS_HPARAMS_YAML_H_

#include <map>
#include <string>

#include "absl/status/status.h"

namespace kiln {

std::string HparamsYaml(const std::map<std::string, std::string>& hparams);

// Writes HparamsYaml(hparams) to `path` through a temporary file and a rename.
absl::Status WriteHparamsYaml(const std::string& path, const std::map<std::string, std::string>& hparams);

}  // namespace kiln

#endif  // KILN_TRAINER_LOGGERS_HPARAMS_YAML_H_
