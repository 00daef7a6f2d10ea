#include "trainer/loggers/tensorboard_events.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/struct.pb.h"
#include "trainer/loggers/tensorboard_event.pb.h"

namespace kiln {
namespace {

namespace tb = ::kiln::tensorboard;

// Deterministic, so that the hyper-parameter map is written in key order and equal events are equal bytes.
std::string Serialize(const google::protobuf::MessageLite& message) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return bytes;
}

std::string HParamsEvent(double wall_time, absl::string_view tag, const tb::HParamsPluginData& data) {
  tb::Event event;
  event.set_wall_time(wall_time);
  tb::Summary::Value* value = event.mutable_summary()->add_value();
  value->set_tag(std::string(tag));
  tb::SummaryMetadata::PluginData* plugin = value->mutable_metadata()->mutable_plugin_data();
  plugin->set_plugin_name("hparams");
  plugin->set_content(Serialize(data));
  return Serialize(event);
}

}  // namespace

// A hyper-parameter's text as the HParams plugin's value: "true"/"false" a bool, a finite number a number, else text.
void SetHparamValue(const std::string& text, google::protobuf::Value& value) {
  double number = 0;
  if (text == "true" || text == "false") {
    value.set_bool_value(text == "true");
  } else if (absl::SimpleAtod(text, &number) && std::isfinite(number)) {
    value.set_number_value(number);
  } else {
    value.set_string_value(text);
  }
}

std::string FileVersionEvent(double wall_time) {
  tb::Event event;
  event.set_wall_time(wall_time);
  event.set_file_version("brain.Event:2");
  return Serialize(event);
}

std::string ScalarEvent(double wall_time, int64_t step, absl::string_view tag, float simple_value) {
  tb::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  tb::Summary::Value* value = event.mutable_summary()->add_value();
  value->set_tag(std::string(tag));
  value->set_simple_value(simple_value);
  return Serialize(event);
}

std::string HParamsExperimentEvent(double wall_time, const std::map<std::string, std::string>& hparams,
                                   const std::vector<std::string>& metric_tags) {
  tb::HParamsPluginData data;
  tb::Experiment* experiment = data.mutable_experiment();
  for (const auto& [key, text] : hparams) {
    tb::HParamInfo* info = experiment->add_hparam_infos();
    info->set_name(key);
    google::protobuf::Value value;
    SetHparamValue(text, value);
    info->set_type(value.has_bool_value()     ? tb::DATA_TYPE_BOOL
                   : value.has_number_value() ? tb::DATA_TYPE_FLOAT64
                                              : tb::DATA_TYPE_STRING);
  }
  for (const std::string& tag : metric_tags) experiment->add_metric_infos()->mutable_name()->set_tag(tag);
  return HParamsEvent(wall_time, "_hparams_/experiment", data);
}

std::string HParamsStartEvent(double wall_time, const std::map<std::string, std::string>& hparams) {
  tb::HParamsPluginData data;
  tb::SessionStartInfo* start = data.mutable_session_start_info();
  for (const auto& [key, text] : hparams) SetHparamValue(text, (*start->mutable_hparams())[key]);
  start->set_start_time_secs(wall_time);
  return HParamsEvent(wall_time, "_hparams_/session_start_info", data);
}

std::string HParamsEndEvent(double wall_time, SessionStatus status) {
  tb::HParamsPluginData data;
  tb::SessionEndInfo* end = data.mutable_session_end_info();
  end->set_status(static_cast<tb::Status>(status));
  end->set_end_time_secs(wall_time);
  return HParamsEvent(wall_time, "_hparams_/session_end_info", data);
}

}  // namespace kiln
