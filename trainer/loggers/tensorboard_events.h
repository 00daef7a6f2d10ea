// TensorBoard's Event protocol buffers (tensorflow/core/util/event.proto, summary.proto) and the hyper-parameter
// summaries of its HParams plugin (tensorboard/plugins/hparams/plugin_data.proto), serialised by libprotobuf from
// Kiln's own definitions of them (tensorboard_event.proto, same field numbers).
//
// Each function returns one serialised `Event`, ready to be framed as a TFRecord:
//   FileVersionEvent    Event{wall_time, file_version: "brain.Event:2"}: the first record of every event file.
//   ScalarEvent         Event{wall_time, step, summary{value{tag, simple_value}}}: what SummaryWriter.add_scalar
//                       writes.
//   HParamsStartEvent   Event{summary{value{tag: "_hparams_/session_start_info", metadata{plugin_data{
//                       plugin_name: "hparams", content: HParamsPluginData{session_start_info{hparams,
//                       start_time_secs}}}}}}}: the run's hyper-parameters, as torch.utils.tensorboard's hparams()
//                       writes them. Values that are numbers become number_value, "true"/"false" bool_value,
//                       anything else string_value.
//   HParamsExperimentEvent  "_hparams_/experiment", experiment{hparam_infos{name, type}, metric_infos{name{tag}}}:
//                       what the HParams dashboard lists (the hyper-parameters, and the metrics shown beside them).
//   HParamsEndEvent     the same with "_hparams_/session_end_info" and session_end_info{status, end_time_secs}.
#ifndef KILN_TRAINER_LOGGERS_TENSORBOARD_EVENTS_H_
#define KILN_TRAINER_LOGGERS_TENSORBOARD_EVENTS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kiln {

// The HParams plugin's session status (plugin's api.proto, enum Status).
enum class SessionStatus { kUnknown = 0, kSuccess = 1, kFailure = 2, kRunning = 3 };

std::string FileVersionEvent(double wall_time);
std::string ScalarEvent(double wall_time, int64_t step, absl::string_view tag, float value);
std::string HParamsExperimentEvent(double wall_time, const std::map<std::string, std::string>& hparams,
                                   const std::vector<std::string>& metric_tags);
std::string HParamsStartEvent(double wall_time, const std::map<std::string, std::string>& hparams);
std::string HParamsEndEvent(double wall_time, SessionStatus status);

}  // namespace kiln

#endif  // KILN_TRAINER_LOGGERS_TENSORBOARD_EVENTS_H_
