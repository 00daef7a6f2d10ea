// The zip format's record signatures and fixed sizes that Kiln's zip reader (zip_checksums.cc) and writer
// (zip_writer.cc) share. Internal to //trainer/checkpoint.
#ifndef KILN_TRAINER_CHECKPOINT_FORMAT_ZIP_FORMAT_H_
#define KILN_TRAINER_CHECKPOINT_FORMAT_ZIP_FORMAT_H_

#include <cstddef>
#include <cstdint>

namespace kiln {

inline constexpr uint32_t kLocalHeader = 0x04034b50;
inline constexpr uint32_t kCentralHeader = 0x02014b50;
inline constexpr uint32_t kEndOfCentralDirectory = 0x06054b50;
inline constexpr uint32_t kZip64EndOfCentralDirectory = 0x06064b50;
inline constexpr uint32_t kZip64Locator = 0x07064b50;
inline constexpr uint16_t kZip64ExtraField = 0x0001;
inline constexpr size_t kLocalSize = 30;
inline constexpr size_t kCentralSize = 46;
inline constexpr size_t kEndSize = 22;
inline constexpr size_t kLocatorSize = 20;
inline constexpr size_t kZip64EndSize = 56;

}  // namespace kiln

#endif  // KILN_TRAINER_CHECKPOINT_FORMAT_ZIP_FORMAT_H_
