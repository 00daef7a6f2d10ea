// The "did you mean" of Kiln's errors: the known name closest to a mistyped one (a flag, a config key, a monitored
// metric). Below the trainer's rooms, so that fit's command line and the trainer's own checks suggest alike.
//
// Thread-safety: pure.
#ifndef KILN_TRAINER_CORE_CLOSEST_NAME_H_
#define KILN_TRAINER_CORE_CLOSEST_NAME_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kiln {

// The candidate closest to `name` within three edits (the alphabetically first of equally close ones), or "" when
// none is that close.
std::string ClosestName(absl::string_view name, const std::vector<std::string>& candidates);

}  // namespace kiln

#endif  // KILN_TRAINER_CORE_CLOSEST_NAME_H_
