// JSON text for the plan (Plan::ToJson, //tools:resolve) and the reports built on it (fit's --summary_json). The
// documents are built as nlohmann::ordered_json values (nlohmann/json, Debian's nlohmann-json3-dev), which keep
// keys in the order they were added; this writes them out.
#ifndef KILN_CONNECTOR_JSON_H_
#define KILN_CONNECTOR_JSON_H_

#include <string>

#include "nlohmann/json.hpp"

namespace kiln {

// `value` as one line of JSON, in the layout Kiln's plans and summaries have always had and scripts grep: ", "
// between items, ": " after a key, no newline (`{"a": 1, "b": ["x", "y"]}`). Text is copied as UTF-8 with what JSON
// requires escaped (control characters as \u00XX); bytes that are not UTF-8 (user input may hold them) are written as
// U+FFFD, because nlohmann's dump would otherwise throw (it is given error_handler_t::replace). NaN and infinities
// are written as null. Never throws.
std::string JsonLine(const nlohmann::ordered_json& value);

}  // namespace kiln

#endif  // KILN_CONNECTOR_JSON_H_
