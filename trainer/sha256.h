// SHA-256 (FIPS 180-4), for fingerprints of parameters that scripts compare between runs.
#ifndef KILN_TRAINER_SHA256_H_
#define KILN_TRAINER_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace kiln {

class Sha256 {
 public:
  Sha256();
  void Update(const void* data, size_t size);
  void Update(absl::string_view data) { Update(data.data(), data.size()); }
  // The digest as 64 lower-case hex digits. Ends the computation: call nothing else afterwards.
  std::string HexDigest();

 private:
  void Block(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_;
  size_t buffered_ = 0;
  uint64_t length_ = 0;  // Bytes hashed so far.
};

}  // namespace kiln

#endif  // KILN_TRAINER_SHA256_H_
