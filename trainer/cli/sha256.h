// SHA-256 (FIPS 180-4), for fingerprints of parameters that scripts compare between runs (params_sha256). A thin
// wrapper over OpenSSL's libcrypto (EVP_sha256), so that callers need neither OpenSSL's headers nor its error
// handling.
//
// Thread-safety: one object per thread; separate objects may hash concurrently.
#ifndef KILN_TRAINER_CLI_SHA256_H_
#define KILN_TRAINER_CLI_SHA256_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace kiln {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(const void* data, size_t size);
  void Update(absl::string_view data) { Update(data.data(), data.size()); }
  // The digest as 64 lower-case hex digits. Ends the computation: call nothing else afterwards.
  std::string HexDigest();

 private:
  struct Context;  // OpenSSL's EVP_MD_CTX, kept out of this header.
  std::unique_ptr<Context> context_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_CLI_SHA256_H_
