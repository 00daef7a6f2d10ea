// CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected), as TFRecord files checksum their lengths and payloads,
// and TensorFlow's "masked" form of it. Computed by Boost.CRC.
#ifndef KILN_TRAINER_LOGGERS_CRC32C_H_
#define KILN_TRAINER_LOGGERS_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace kiln {

// The CRC-32C of `size` bytes at `data`. Crc32c("123456789") == 0xE3069283. Thread-safe.
uint32_t Crc32c(const void* data, size_t size);

// TensorFlow's masked CRC: rotate right by 15 bits and add 0xa282ead8, so that a CRC over data that holds CRCs
// stays well distributed.
uint32_t MaskedCrc32c(const void* data, size_t size);

}  // namespace kiln

#endif  // KILN_TRAINER_LOGGERS_CRC32C_H_
