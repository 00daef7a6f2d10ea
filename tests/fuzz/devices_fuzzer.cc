// Fuzz target: the `devices` value (--devices, TrainerOptions::devices) through the HAL's syntax parser and both of
// Lightning's rule sets.
//
// Input: a mode byte, a byte giving the number of devices the accelerator sees (mod 17), then the value: 'i' an int
// (4 bytes, little-endian), 'l' a list of ints (4 bytes each, at most 64), anything else the rest as a string.
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "hal/devices.h"
#include "tests/fuzz/fuzz_support.h"

namespace kiln {
namespace {

Devices MakeDevices(fuzzing::FuzzInput& input, uint8_t mode) {
  if (mode == 'i') return Devices(input.Integer<int32_t>());
  if (mode == 'l') {
    std::vector<int> indices;
    while (!input.empty() && indices.size() < 64) indices.push_back(input.Integer<int32_t>());
    return Devices(std::move(indices));
  }
  return Devices(input.Rest());
}

void CheckSyntax(const Devices& devices) {
  const std::string shown = devices.ToString();
  KILN_FUZZ_CHECK(!shown.empty(), "ToString");
  const absl::StatusOr<DeviceSelection> selection = ParseDevicesSyntax(devices);
  if (const int* count = std::get_if<int>(&devices.value())) {
    // An int has exactly one meaning.
    KILN_FUZZ_CHECK(selection.ok() == (*count >= -1), shown);
    if (*count == -1) KILN_FUZZ_CHECK(selection->kind == DeviceSelection::Kind::kAll, shown);
    if (*count >= 0)
      KILN_FUZZ_CHECK(selection->kind == DeviceSelection::Kind::kCount && selection->count == *count, shown);
  }
  if (const auto* list = std::get_if<std::vector<int>>(&devices.value())) {
    bool all_non_negative = true;
    for (int index : *list) all_non_negative = all_non_negative && index >= 0;
    KILN_FUZZ_CHECK(selection.ok() == all_non_negative, shown);
    if (selection.ok()) KILN_FUZZ_CHECK(selection->indices == *list, shown);
  }
  if (!selection.ok()) {
    KILN_FUZZ_CHECK(selection.status().code() == absl::StatusCode::kInvalidArgument, selection.status().ToString());
    KILN_FUZZ_CHECK(!IsZeroDevices(devices), shown);
    return;
  }
  switch (selection->kind) {
    case DeviceSelection::Kind::kCount: {
      KILN_FUZZ_CHECK(selection->count >= 0, shown);
      // A count written back as text means the same count.
      const absl::StatusOr<DeviceSelection> again = ParseDevicesSyntax(Devices(absl::StrCat(selection->count)));
      KILN_FUZZ_CHECK(again.ok() && *again == *selection, shown);
      KILN_FUZZ_CHECK(IsZeroDevices(devices) == (selection->count == 0), shown);
      break;
    }
    case DeviceSelection::Kind::kIndices:
      for (int index : selection->indices) KILN_FUZZ_CHECK(index >= 0, shown);
      KILN_FUZZ_CHECK(IsZeroDevices(devices) == selection->indices.empty(), shown);
      break;
    case DeviceSelection::Kind::kAuto:
    case DeviceSelection::Kind::kAll:
      KILN_FUZZ_CHECK(!IsZeroDevices(devices), shown);
      break;
  }
}

void CheckDeviceCount(const Devices& devices, int auto_count) {
  const absl::StatusOr<std::vector<int>> indices = ParseDeviceCount(devices, auto_count, "cpu");
  if (!indices.ok()) {
    KILN_FUZZ_CHECK(indices.status().code() == absl::StatusCode::kInvalidArgument, indices.status().ToString());
    return;
  }
  KILN_FUZZ_CHECK(!indices->empty(), devices.ToString());
  for (size_t i = 0; i < indices->size(); ++i)
    KILN_FUZZ_CHECK((*indices)[i] == static_cast<int>(i), devices.ToString());
}

void CheckDeviceIndices(const Devices& devices, int visible_count) {
  const absl::StatusOr<std::vector<int>> indices =
      ParseDeviceIndices(devices, visible_count, "cuda", "CUDA_VISIBLE_DEVICES=0,1");
  if (!indices.ok()) {
    const absl::StatusCode code = indices.status().code();
    KILN_FUZZ_CHECK(code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kFailedPrecondition,
                    indices.status().ToString());
    return;
  }
  std::set<int> seen;
  for (int index : *indices) {
    KILN_FUZZ_CHECK(index >= 0 && index < visible_count, absl::StrCat(devices.ToString(), " gave ", index));
    KILN_FUZZ_CHECK(seen.insert(index).second, absl::StrCat(devices.ToString(), " gave ", index, " twice"));
  }
}

}  // namespace
}  // namespace kiln

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzzing::FuzzInput input(data, size);
  const uint8_t mode = input.Byte();
  const int visible_count = input.Byte() % 17;
  const kiln::Devices devices = kiln::MakeDevices(input, mode);
  kiln::CheckSyntax(devices);
  kiln::CheckDeviceCount(devices, visible_count);
  kiln::CheckDeviceIndices(devices, visible_count);
  return 0;
}
