#include "trainer/loggers/crc32c.h"

#include "boost/crc.hpp"

namespace kiln {
namespace {

// Boost.CRC with CRC-32C's parameters (RFC 3720): Debian 12 has no CRC-32C library of its own (no libcrc32c-dev;
// its Abseil 20220623 predates absl/crc). Measured with -O2 on 1 MiB buffers: ~270 MB/s, the same as the table loop
// it replaces; TFRecord headers and scalar events are tens of bytes, so the checksum is no cost either way.
using Crc32cComputer = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

constexpr uint32_t kMaskDelta = 0xa282ead8;

}  // namespace

uint32_t Crc32c(const void* data, size_t size) {
  Crc32cComputer crc;
  crc.process_bytes(data, size);
  return crc.checksum();
}

uint32_t MaskedCrc32c(const void* data, size_t size) {
  const uint32_t crc = Crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

}  // namespace kiln
