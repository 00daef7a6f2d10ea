#include "trainer/loggers/hparams_yaml.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "trainer/loggers/atomic_file.h"

namespace kiln {
namespace {

// Plain scalars that YAML reads back as the same text: letters, digits and a few safe punctuation marks, not
// starting with one that means something, and not a word YAML gives another meaning.
bool IsPlainText(const std::string& text) {
  if (text.empty()) return false;
  for (const char* special : {"null", "Null", "NULL", "~", "yes", "no", "on", "off", "Yes", "No", "On", "Off",
                                     "true", "false", "True", "False", "TRUE", "FALSE"}) {
    if (text == special) return false;
  }
  if (text[0] == '-' || text[0] == '.') return false;
  for (char c : text) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.' && c != '/') {
      return false;
    }
  }
  double number = 0;
  return !absl::SimpleAtod(text, &number);  // Would read back as a number.
}

std::string Scalar(const std::string& text) {
  double number = 0;
  if (text == "true" || text == "false") return text;
  if (absl::SimpleAtod(text, &number) && std::isfinite(number) && text.find_first_of(" \t") == std::string::npos) {
    return text;
  }
  if (IsPlainText(text)) return text;
  std::string quoted = "\"";
  for (char c : text) {
    switch (c) {
      case '"':
        quoted += "\\\"";
        break;
      case '\\':
        quoted += "\\\\";
        break;
      case '\n':
        quoted += "\\n";
        break;
      case '\t':
        quoted += "\\t";
        break;
      default:
        quoted += c;
    }
  }
  return quoted + "\"";
}

}  // namespace

std::string HparamsYaml(const std::map<std::string, std::string>& hparams) {
  if (hparams.empty()) return "{}\n";
  std::string out;
  for (const auto& [key, value] : hparams)
    absl::StrAppend(&out, IsPlainText(key) ? key : Scalar(key), ": ", Scalar(value), "\n");
  return out;
}

absl::Status WriteHparamsYaml(const std::string& path, const std::map<std::string, std::string>& hparams) {
  return WriteFileAtomically(path, HparamsYaml(hparams));
}

}  // namespace kiln
