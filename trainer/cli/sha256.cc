#include "trainer/cli/sha256.h"

#include <openssl/evp.h>

#include <cstdlib>

#include "absl/strings/escaping.h"
#include "absl/strings/string_view.h"
#include "glog/logging.h"

namespace kiln {

struct Sha256::Context {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  ~Context() { EVP_MD_CTX_free(md); }
};

// libcrypto fails these calls only when it cannot allocate or the digest is unavailable (a broken OpenSSL
// installation), which no caller could recover from: stop with the reason.
Sha256::Sha256() : context_(std::make_unique<Context>()) {
  CHECK(context_->md != nullptr && EVP_DigestInit_ex(context_->md, EVP_sha256(), nullptr) == 1)
      << "OpenSSL: cannot start a SHA-256 digest";
}

Sha256::~Sha256() = default;

void Sha256::Update(const void* data, size_t size) {
  CHECK_EQ(EVP_DigestUpdate(context_->md, data, size), 1) << "OpenSSL: SHA-256 update failed";
}

std::string Sha256::HexDigest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  CHECK_EQ(EVP_DigestFinal_ex(context_->md, digest, &size), 1) << "OpenSSL: SHA-256 final failed";
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), size));
}

}  // namespace kiln
