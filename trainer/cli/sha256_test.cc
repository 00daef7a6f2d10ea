#include "trainer/cli/sha256.h"

#include <string>

#include "gtest/gtest.h"

namespace kiln {
namespace {

std::string Hash(const std::string& text) {
  Sha256 sha;
  sha.Update(text);
  return sha.HexDigest();
}

// The examples published with FIPS 180-2 (appendix B) and NIST's SHA-256 example values (the 896-bit message), and
// the empty string.
TEST(Sha256Test, StandardVectors) {
  EXPECT_EQ(Hash(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hash("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hash("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(
      Hash("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrst"
           "nopqrstu"),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(Hash(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, PiecewiseUpdatesEqualOneUpdate) {
  const std::string text(300, 'x');
  Sha256 pieces;
  for (size_t i = 0; i < text.size(); i += 7) pieces.Update(text.substr(i, 7));
  EXPECT_EQ(pieces.HexDigest(), Hash(text));
  Sha256 abc;
  abc.Update("a");
  abc.Update("");
  abc.Update("bc", 2);
  EXPECT_EQ(abc.HexDigest(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace kiln
