// JSON text for the plan (Plan::ToJson, //tools:resolve) and the reports built on it (fit's --summary_json).
#ifndef KILN_CONNECTOR_JSON_H_
#define KILN_CONNECTOR_JSON_H_

#include <string>

#include "absl/strings/string_view.h"

namespace kiln {

// A JSON string literal for `text`: quoted, with quotes, backslashes and control characters escaped. Other bytes
// are copied as they are (Kiln's strings are UTF-8).
std::string JsonString(absl::string_view text);

}  // namespace kiln

#endif  // KILN_CONNECTOR_JSON_H_
