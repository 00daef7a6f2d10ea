#include "trainer/loggers/hparams_yaml.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "trainer/io/durable_file.h"
#include "yaml-cpp/yaml.h"

namespace kiln {
namespace {

// Plain scalars that YAML reads back as the same text: letters, digits and a few safe punctuation marks, not
// starting with one that means something, and not a word YAML gives another meaning.
bool IsPlainText(const std::string& text) {
  if (text.empty()) return false;
  for (const char* special : {"null", "Null", "NULL", "~", "yes", "no", "on", "off", "Yes", "No", "On", "Off", "true",
                              "false", "True", "False", "TRUE", "FALSE"}) {
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

// Which text is written bare: true/false and finite numbers (so that YAML reads them as a bool or a number), and
// plain text YAML reads back unchanged. Everything else is double-quoted, which yaml.safe_load reads as a string.
// The choice stays here: yaml-cpp's emitter quotes only what its own reader could not read back, not words such as
// "yes" or "on", which YAML 1.1 readers (PyYAML's safe_load) read as bools.
bool WrittenBare(const std::string& text) {
  double number = 0;
  if (text == "true" || text == "false") return true;
  if (absl::SimpleAtod(text, &number) && std::isfinite(number) && text.find_first_of(" \t") == std::string::npos) {
    return true;
  }
  return IsPlainText(text);
}

}  // namespace

void WriteYamlScalar(YAML::Emitter& out, const std::string& text) {
  if (!WrittenBare(text)) out << YAML::DoubleQuoted;
  out << text;
}

std::string HparamsYaml(const std::map<std::string, std::string>& hparams) {
  // yaml-cpp writes a block mapping, one `key: value` line each (double-quoted text is never folded), "{}" when it
  // is empty. It escapes what double quotes need and writes bytes that are not UTF-8 as U+FFFD.
  YAML::Emitter out;
  out << YAML::BeginMap;
  for (const auto& [key, value] : hparams) {
    out << YAML::Key;
    WriteYamlScalar(out, key);
    out << YAML::Value;
    WriteYamlScalar(out, value);
  }
  out << YAML::EndMap;
  return absl::StrCat(out.c_str(), "\n");
}

absl::Status WriteHparamsYaml(const std::string& path, const std::map<std::string, std::string>& hparams) {
  return WriteFileDurably(path, HparamsYaml(hparams));
}

}  // namespace kiln
