// What a text file must be before Kiln parses it: UTF-8. A file saved in another encoding is an error that says
// which encoding it looks like and how to convert it, never a misread: a UTF-8 byte-order mark (which spreadsheet
// programs write) is dropped rather than read as part of the first cell, and UTF-16 or UTF-32 (which they write
// too), NUL bytes and bytes that are not UTF-8 (Latin-1, Windows-1252) are refused with the line they are on.
#ifndef KILN_TRAINER_DATA_TEXT_ENCODING_H_
#define KILN_TRAINER_DATA_TEXT_ENCODING_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln {

// `text` without its UTF-8 byte-order mark, if it has one. InvalidArgument naming `source`, the line (1-based) and
// the byte when it is not UTF-8, with the iconv command that converts it.
absl::StatusOr<absl::string_view> Utf8Text(absl::string_view text, absl::string_view source);

}  // namespace kiln

#endif  // KILN_TRAINER_DATA_TEXT_ENCODING_H_
