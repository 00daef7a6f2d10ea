#include "trainer/loggers/tensorboard_events.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "trainer/loggers/proto_wire.h"

namespace kiln {
namespace {

// Field numbers from the public .proto files named in the header.
namespace event {
constexpr int kWallTime = 1;
constexpr int kStep = 2;
constexpr int kFileVersion = 3;
constexpr int kSummary = 5;
}  // namespace event
namespace summary {
constexpr int kValue = 1;
}  // namespace summary
namespace value {
constexpr int kTag = 1;
constexpr int kSimpleValue = 2;
constexpr int kMetadata = 9;
}  // namespace value
namespace metadata {
constexpr int kPluginData = 1;
}  // namespace metadata
namespace plugin_data {
constexpr int kPluginName = 1;
constexpr int kContent = 2;
}  // namespace plugin_data
namespace hparams_plugin_data {  // HParamsPluginData; version 0 is the default and is not written.
constexpr int kSessionStartInfo = 3;
constexpr int kSessionEndInfo = 4;
}  // namespace hparams_plugin_data
namespace session_start_info {
constexpr int kHparams = 1;  // map<string, google.protobuf.Value>: entries {key = 1, value = 2}.
constexpr int kStartTimeSecs = 5;
}  // namespace session_start_info
namespace session_end_info {
constexpr int kStatus = 1;
constexpr int kEndTimeSecs = 2;
}  // namespace session_end_info
namespace struct_value {  // google.protobuf.Value
constexpr int kNumberValue = 2;
constexpr int kStringValue = 3;
constexpr int kBoolValue = 4;
}  // namespace struct_value

std::string SummaryEvent(double wall_time, const ProtoWriter& value) {
  ProtoWriter summary;
  summary.Message(summary::kValue, value);
  ProtoWriter out;
  out.Double(event::kWallTime, wall_time);
  out.Message(event::kSummary, summary);
  return out.bytes();
}

std::string HParamsEvent(double wall_time, absl::string_view tag, int data_field, const ProtoWriter& data) {
  ProtoWriter content;
  content.Message(data_field, data);
  ProtoWriter plugin;
  plugin.String(plugin_data::kPluginName, "hparams");
  plugin.String(plugin_data::kContent, content.bytes());
  ProtoWriter meta;
  meta.Message(metadata::kPluginData, plugin);
  ProtoWriter value;
  value.String(value::kTag, tag);
  value.Message(value::kMetadata, meta);
  return SummaryEvent(wall_time, value);
}

}  // namespace

std::string FileVersionEvent(double wall_time) {
  ProtoWriter out;
  out.Double(event::kWallTime, wall_time);
  out.String(event::kFileVersion, "brain.Event:2");
  return out.bytes();
}

std::string ScalarEvent(double wall_time, int64_t step, absl::string_view tag, float simple_value) {
  ProtoWriter value;
  value.String(value::kTag, tag);
  value.Float(value::kSimpleValue, simple_value);
  ProtoWriter summary;
  summary.Message(summary::kValue, value);
  ProtoWriter out;
  out.Double(event::kWallTime, wall_time);
  out.Int64(event::kStep, step);
  out.Message(event::kSummary, summary);
  return out.bytes();
}

std::string HParamsStartEvent(double wall_time, const std::map<std::string, std::string>& hparams) {
  ProtoWriter start;
  for (const auto& [key, text] : hparams) {
    ProtoWriter value;
    double number = 0;
    if (text == "true" || text == "false") {
      value.Varint(struct_value::kBoolValue, text == "true" ? 1 : 0);
    } else if (absl::SimpleAtod(text, &number) && std::isfinite(number)) {
      value.Double(struct_value::kNumberValue, number);
    } else {
      value.String(struct_value::kStringValue, text);
    }
    ProtoWriter entry;
    entry.String(1, key);
    entry.Message(2, value);
    start.Message(session_start_info::kHparams, entry);
  }
  start.Double(session_start_info::kStartTimeSecs, wall_time);
  return HParamsEvent(wall_time, "_hparams_/session_start_info", hparams_plugin_data::kSessionStartInfo, start);
}

std::string HParamsEndEvent(double wall_time, SessionStatus status) {
  ProtoWriter end;
  end.Varint(session_end_info::kStatus, static_cast<uint64_t>(status));
  end.Double(session_end_info::kEndTimeSecs, wall_time);
  return HParamsEvent(wall_time, "_hparams_/session_end_info", hparams_plugin_data::kSessionEndInfo, end);
}

}  // namespace kiln
