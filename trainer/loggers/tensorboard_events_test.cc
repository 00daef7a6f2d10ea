// The bytes of the events, against the protocol-buffer encoding written out by hand from TensorBoard's field numbers
// (Event: wall_time 1, step 2, file_version 3, summary 5; Summary.Value: tag 1, simple_value 2), so that a change
// of Kiln's .proto that TensorBoard would misread fails here.
#include "trainer/loggers/tensorboard_events.h"

#include <string>

#include "gtest/gtest.h"

namespace kiln {
namespace {

const std::string kWallTimeOne("\x09\0\0\0\0\0\0\xf0\x3f", 9);  // Field 1, fixed64: 1.0.

TEST(TensorBoardEventsTest, FileVersion) {
  EXPECT_EQ(FileVersionEvent(1.0), kWallTimeOne +
                                       "\x1a\x0d"
                                       "brain.Event:2");
}

TEST(TensorBoardEventsTest, Scalar) {
  const std::string value(
      "\x0a\x01"
      "a"
      "\x15\0\0\0\x3f",
      8);  // tag "a", simple_value 0.5f.
  const std::string summary = "\x0a\x08" + value;
  EXPECT_EQ(ScalarEvent(1.0, 3, "a", 0.5f), kWallTimeOne + "\x10\x03" + "\x2a\x0a" + summary);
  // A simple_value of 0 is still written (it is one of a oneof), so that readers see a scalar.
  EXPECT_EQ(ScalarEvent(1.0, 3, "a", 0.0f).size(), ScalarEvent(1.0, 3, "a", 0.5f).size());
}

TEST(TensorBoardEventsTest, HParamsEventsNameThePlugin) {
  EXPECT_NE(HParamsStartEvent(1.0, {{"lr", "0.1"}}).find("hparams"), std::string::npos);
  EXPECT_NE(HParamsEndEvent(1.0, SessionStatus::kSuccess).find("_hparams_/session_end_info"), std::string::npos);
}

}  // namespace
}  // namespace kiln
