// Reading a whole data file into memory, whether it is plain text or gzip-compressed (`.gz`, or any file that
// starts with gzip's magic bytes): zlib tells the two apart by content, not by name.
#ifndef KILN_TRAINER_DATA_TEXT_FILE_H_
#define KILN_TRAINER_DATA_TEXT_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace kiln {

// The file's (decompressed) bytes. NotFound when it does not exist, InvalidArgument when it is not a regular file
// or its gzip stream is damaged (the message names the path and zlib's reason), ResourceExhausted when the file, or
// what it inflates to, is larger than `max_bytes` (by default InputMemoryBudget, memory_budget.h). Reads at most that
// many bytes. Thread-safe.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);
absl::StatusOr<std::string> ReadTextFile(const std::string& path, uint64_t max_bytes);

}  // namespace kiln

#endif  // KILN_TRAINER_DATA_TEXT_FILE_H_
