#include "hal/devices.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kiln {
namespace {

constexpr char kAcceptedForms[] =
    "expected \"auto\", a device count N, -1 for all devices, or device indices such as \"0,1\", \"3,\" or "
    "\"[0, 1]\"";

absl::Status SyntaxError(const Devices& devices, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid devices value ", devices.ToString(), ": ", why, "; ", kAcceptedForms));
}

absl::StatusOr<DeviceSelection> FromInt(const Devices& devices, int value) {
  if (value == -1) return DeviceSelection{DeviceSelection::Kind::kAll, 0, {}};
  if (value < 0) return SyntaxError(devices, "a negative count other than -1");
  return DeviceSelection{DeviceSelection::Kind::kCount, value, {}};
}

absl::StatusOr<DeviceSelection> FromList(const Devices& devices, std::vector<int> indices) {
  for (int index : indices) {
    if (index < 0) return SyntaxError(devices, absl::StrCat("device index ", index, " is negative"));
  }
  return DeviceSelection{DeviceSelection::Kind::kIndices, 0, std::move(indices)};
}

absl::StatusOr<DeviceSelection> FromString(const Devices& devices, absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (absl::AsciiStrToLower(text) == "auto") return DeviceSelection{};
  bool bracketed = absl::ConsumePrefix(&text, "[");
  if (bracketed && !absl::ConsumeSuffix(&text, "]")) return SyntaxError(devices, "unbalanced '['");
  if (!bracketed && absl::EndsWith(text, "]")) return SyntaxError(devices, "unbalanced ']'");
  text = absl::StripAsciiWhitespace(text);
  // A bare number (no comma, no brackets) is a count, as in Lightning: "2" means two devices, not device 2.
  if (!bracketed && text.find(',') == absl::string_view::npos) {
    int value = 0;
    if (text.empty() || !absl::SimpleAtoi(text, &value)) {
      return SyntaxError(devices, "not a number or a list of numbers");
    }
    return FromInt(devices, value);
  }
  std::vector<int> indices;
  if (!text.empty()) {
    std::vector<absl::string_view> parts = absl::StrSplit(text, ',');
    // "3," selects device 3: a single trailing comma marks a one-element list.
    if (parts.size() > 1 && absl::StripAsciiWhitespace(parts.back()).empty()) parts.pop_back();
    for (absl::string_view part : parts) {
      part = absl::StripAsciiWhitespace(part);
      int index = 0;
      if (part.empty() || !absl::SimpleAtoi(part, &index)) {
        return SyntaxError(devices, absl::StrCat("'", part, "' is not a device index"));
      }
      indices.push_back(index);
    }
  }
  return FromList(devices, std::move(indices));
}

}  // namespace

std::string Devices::ToString() const {
  struct Printer {
    std::string operator()(const std::string& text) const { return absl::StrCat("'", text, "'"); }
    std::string operator()(int count) const { return absl::StrCat(count); }
    std::string operator()(const std::vector<int>& indices) const {
      return absl::StrCat("[", absl::StrJoin(indices, ", "), "]");
    }
  };
  return std::visit(Printer{}, value_);
}

absl::StatusOr<DeviceSelection> ParseDevicesSyntax(const Devices& devices) {
  const Devices::Value& value = devices.value();
  if (const auto* text = std::get_if<std::string>(&value)) return FromString(devices, *text);
  if (const auto* count = std::get_if<int>(&value)) return FromInt(devices, *count);
  return FromList(devices, std::get<std::vector<int>>(value));
}

bool IsZeroDevices(const Devices& devices) {
  absl::StatusOr<DeviceSelection> selection = ParseDevicesSyntax(devices);
  if (!selection.ok()) return false;
  switch (selection->kind) {
    case DeviceSelection::Kind::kCount:
      return selection->count == 0;
    case DeviceSelection::Kind::kIndices:
      return selection->indices.empty();
    default:
      return false;
  }
}

absl::StatusOr<std::vector<int>> ParseDeviceCount(const Devices& devices, int auto_count,
                                                  absl::string_view accelerator_name) {
  absl::StatusOr<DeviceSelection> selection = ParseDevicesSyntax(devices);
  if (!selection.ok()) return selection.status();
  int count = 0;
  switch (selection->kind) {
    case DeviceSelection::Kind::kAuto:
      count = auto_count;
      break;
    case DeviceSelection::Kind::kCount:
      count = selection->count;
      break;
    default:
      break;
  }
  if (count <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("`devices` selected with the ", accelerator_name, " accelerator should be an int > 0, got ",
                     devices.ToString(), "; pass the number of processes to run, for example devices=2"));
  }
  if (count > kMaxDeviceCount) {
    return absl::InvalidArgumentError(absl::StrCat("`devices` selected with the ", accelerator_name, " accelerator asks for ",
                                                   count, " processes on one machine, more than the ", kMaxDeviceCount,
                                                   " Kiln supports; pass the number of processes to run, for example "
                                                   "devices=2"));
  }
  std::vector<int> indices(count);
  for (int i = 0; i < count; ++i) indices[i] = i;
  return indices;
}

absl::StatusOr<std::vector<int>> ParseDeviceIndices(const Devices& devices, int visible_count,
                                                    absl::string_view accelerator_name,
                                                    absl::string_view visibility_hint) {
  absl::StatusOr<DeviceSelection> selection = ParseDevicesSyntax(devices);
  if (!selection.ok()) return selection.status();
  const std::string hint = visibility_hint.empty() ? "" : absl::StrCat(" (", visibility_hint, ")");
  const std::string visible = visible_count == 1 ? "only 1 is visible" : absl::StrCat("only ", visible_count,
                                                                                     " are visible");
  std::vector<int> indices;
  switch (selection->kind) {
    case DeviceSelection::Kind::kAuto:
    case DeviceSelection::Kind::kAll:
      if (visible_count <= 0) {
        return absl::FailedPreconditionError(absl::StrCat("devices=", devices.ToString(), " asks for every ",
                                                          accelerator_name, " device, but none is visible", hint));
      }
      for (int i = 0; i < visible_count; ++i) indices.push_back(i);
      return indices;
    case DeviceSelection::Kind::kCount:
      if (selection->count > visible_count) {
        return absl::InvalidArgumentError(absl::StrCat(selection->count, " ", accelerator_name,
                                                       " devices requested, but ", visible, hint));
      }
      for (int i = 0; i < selection->count; ++i) indices.push_back(i);
      return indices;
    case DeviceSelection::Kind::kIndices:
      break;
  }
  std::set<int> seen;
  for (int index : selection->indices) {
    if (!seen.insert(index).second) {
      return absl::InvalidArgumentError(absl::StrCat("device index ", index, " appears twice in devices=",
                                                     devices.ToString(), "; list each device once"));
    }
    if (index >= visible_count) {
      return absl::InvalidArgumentError(absl::StrCat(accelerator_name, " device ", index, " requested, but ",
                                                     visible, hint));
    }
  }
  return selection->indices;
}

}  // namespace kiln
