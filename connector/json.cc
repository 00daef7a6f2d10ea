#include "connector/json.h"

namespace kiln {

std::string JsonLine(const nlohmann::ordered_json& value) {
  // With an indent of 0, dump puts every member and element on a line of its own. A newline never occurs inside a
  // string (it is escaped), so each one is layout: after a comma it becomes a space, after an opening bracket or
  // before a closing one it goes.
  const std::string text =
      value.dump(/*indent=*/0, /*indent_char=*/' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
  std::string line;
  line.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\n') {
      line += text[i];
    } else if (i > 0 && text[i - 1] == ',') {
      line += ' ';
    }
  }
  return line;
}

}  // namespace kiln
