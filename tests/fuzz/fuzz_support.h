// Helpers shared by Kiln's fuzz targets: a check that fails loudly, and a reader that turns the fuzzer's bytes into
// values. Header-only and free of LibTorch, so that each target links no more than the parser it fuzzes.
//
// A target checks more than "no crash": it states what must hold of every answer the parser gives (KILN_FUZZ_CHECK),
// so that the fuzzer also finds wrong answers. A failed check prints the condition and aborts, which libFuzzer and
// the corpus replay (replay_main.cc) both report as a failure of the input.
#ifndef KILN_TESTS_FUZZ_FUZZ_SUPPORT_H_
#define KILN_TESTS_FUZZ_FUZZ_SUPPORT_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#define KILN_FUZZ_CHECK(condition, detail)                                                        \
  do {                                                                                            \
    if (!(condition)) {                                                                           \
      std::fprintf(stderr, "%s:%d: fuzz check failed: %s (%s)\n", __FILE__, __LINE__, #condition, \
                   std::string(detail).c_str());                                                  \
      std::abort();                                                                               \
    }                                                                                             \
  } while (false)

namespace kiln::fuzzing {

// The label column a CSV target reads, from one byte: the default "-1", the first column "0", the header name
// "label", "-2", or "7" (out of range for most inputs).
inline const char* CsvLabelColumn(uint8_t choice) {
  switch (choice % 5) {
    case 0:
      return "-1";
    case 1:
      return "0";
    case 2:
      return "label";
    case 3:
      return "-2";
    default:
      return "7";
  }
}

// Reads values from the front of the fuzzer's input; past its end every read gives zeros or an empty string, so a
// target never needs to check the length.
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  uint8_t Byte() { return position_ < size_ ? data_[position_++] : 0; }

  template <typename T>
  T Integer() {
    T value = 0;
    const size_t n = std::min(sizeof(T), size_ - position_);
    std::memcpy(&value, data_ + position_, n);
    position_ += n;
    return value;
  }

  // Up to `max_length` bytes, ending early at a 0 byte (which is consumed).
  std::string String(size_t max_length) {
    std::string text;
    while (position_ < size_ && text.size() < max_length) {
      const char c = static_cast<char>(data_[position_++]);
      if (c == '\0') break;
      text.push_back(c);
    }
    return text;
  }

  // Everything not read yet.
  std::string Rest() {
    std::string text(reinterpret_cast<const char*>(data_ + position_), size_ - position_);
    position_ = size_;
    return text;
  }

  bool empty() const { return position_ >= size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t position_ = 0;
};

}  // namespace kiln::fuzzing

#endif  // KILN_TESTS_FUZZ_FUZZ_SUPPORT_H_
