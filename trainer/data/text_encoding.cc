#include "trainer/data/text_encoding.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace kiln {
namespace {

constexpr absl::string_view kUtf8Bom = "\xEF\xBB\xBF";

// The length of the UTF-8 sequence at `text[i]`, or 0 when it is not a valid one (overlong forms, surrogates and
// code points above U+10FFFF included, as RFC 3629 defines UTF-8).
size_t SequenceLength(absl::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t lead = byte(i);
  size_t length = 0;
  uint8_t min_second = 0x80, max_second = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) min_second = 0xA0;  // Overlong.
    if (lead == 0xED) max_second = 0x9F;  // Surrogates.
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) min_second = 0x90;  // Overlong.
    if (lead == 0xF4) max_second = 0x8F;  // Above U+10FFFF.
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  if (byte(i + 1) < min_second || byte(i + 1) > max_second) return 0;
  for (size_t k = 2; k < length; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return length;
}

std::string Convert(absl::string_view source, absl::string_view from) {
  return absl::StrCat("; save it as UTF-8, e.g. iconv -f ", from, " -t UTF-8 ", source, " > converted.csv");
}

}  // namespace

absl::StatusOr<absl::string_view> Utf8Text(absl::string_view text, absl::string_view source) {
  // Byte-order marks, longest first (UTF-32LE's starts with UTF-16LE's).
  if (absl::StartsWith(text, absl::string_view("\xFF\xFE\0\0", 4)) ||
      absl::StartsWith(text, absl::string_view("\0\0\xFE\xFF", 4))) {
    return absl::InvalidArgumentError(absl::StrCat(source, " is UTF-32 text (it starts with UTF-32's byte-order mark)",
                                                   Convert(source, "UTF-32")));
  }
  if (absl::StartsWith(text, "\xFF\xFE") || absl::StartsWith(text, "\xFE\xFF")) {
    return absl::InvalidArgumentError(absl::StrCat(source, " is UTF-16 text (it starts with UTF-16's byte-order mark)",
                                                   Convert(source, "UTF-16")));
  }
  absl::ConsumePrefix(&text, kUtf8Bom);
  int64_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < text.size();) {
    const uint8_t c = static_cast<uint8_t>(text[i]);
    if (c >= 0x01 && c < 0x80) {
      // Lines end as csv_table.h reads them: "\n", "\r\n" or a lone "\r".
      if (c == '\n' || (c == '\r' && (i + 1 >= text.size() || text[i + 1] != '\n'))) {
        ++line;
        line_start = i + 1;
      }
      ++i;
      continue;
    }
    const std::string where = absl::StrCat(source, ":", line, ": byte ", i - line_start + 1, " of the line");
    if (c == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " is a NUL byte: not a text file, or UTF-16 text without a byte-order mark", Convert(source, "UTF-16")));
    }
    const size_t length = SequenceLength(text, i);
    if (length == 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, " (0x", absl::StrFormat("%02X", c),
                                                     ") is not UTF-8: the file is in another encoding, such as "
                                                     "Latin-1 or Windows-1252",
                                                     Convert(source, "LATIN1")));
    }
    i += length;
  }
  return text;
}

}  // namespace kiln
