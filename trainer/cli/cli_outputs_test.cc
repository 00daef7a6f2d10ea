// The files `fit` writes for scripts: predictions.csv and the JSON summary's pieces.
#include <cmath>

#include "ATen/ATen.h"
#include "gtest/gtest.h"
#include "torch/nn/modules/linear.h"
#include "trainer/cli/predictions_csv.h"
#include "trainer/cli/run_summary.h"
#include "trainer/cli/sha256.h"

namespace kiln {
namespace {

TEST(PredictionsCsvTest, ClassificationRowsContinueAcrossBatches) {
  const std::vector<at::Tensor> batches = {at::tensor({0.25, 0.75, 0.5, 0.5}).reshape({2, 2}),  // float64
                                           at::tensor({0.875, 0.125}).reshape({1, 2})};
  absl::StatusOr<std::string> csv = PredictionsCsv(batches, Task::kClassification, {"cat", "dog, big"});
  ASSERT_TRUE(csv.ok()) << csv.status();
  // Ties go to the first class, as argmax does.
  EXPECT_EQ(*csv,
            "index,prediction,prob_cat,\"prob_dog, big\"\n0,\"dog, big\",0.25,0.75\n1,cat,0.5,0.5\n"
            "2,cat,0.875,0.125\n");
  EXPECT_FALSE(PredictionsCsv({at::zeros({2, 3})}, Task::kClassification, {"a", "b"}).ok());
}

TEST(PredictionsCsvTest, Regression) {
  absl::StatusOr<std::string> csv = PredictionsCsv({at::tensor({1.5, -2.0})}, Task::kRegression, {});
  ASSERT_TRUE(csv.ok());
  EXPECT_EQ(*csv, "index,prediction\n0,1.5\n1,-2\n");
  EXPECT_FALSE(PredictionsCsv({at::zeros({2, 1})}, Task::kRegression, {}).ok());
  // float32 predictions are written as the shortest float32 text, not the double they widen to.
  absl::StatusOr<std::string> single = PredictionsCsv({at::tensor({0.1f})}, Task::kRegression, {});
  EXPECT_EQ(*single, "index,prediction\n0,0.1\n");
}

TEST(RunSummaryTest, ParamsSha256HashesEveryParameterInOrder) {
  torch::nn::Linear linear(3, 2);
  Sha256 expected;
  const at::Tensor weight = linear->weight.detach().contiguous();
  const at::Tensor bias = linear->bias.detach().contiguous();
  expected.Update(weight.data_ptr(), weight.numel() * 4);
  expected.Update(bias.data_ptr(), bias.numel() * 4);
  EXPECT_EQ(ParamsSha256(*linear), expected.HexDigest());
  const std::string before = ParamsSha256(*linear);
  {
    torch::NoGradGuard no_grad;
    linear->bias[0].add_(1e-7);
  }
  EXPECT_NE(ParamsSha256(*linear), before);
}

TEST(RunSummaryTest, JsonEscapesAndNulls) {
  EXPECT_EQ(JsonLine("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\u0001\"");
  EXPECT_EQ(JsonLine(JsonMetrics({{"a", 0.5}, {"b", NAN}})), "{\"a\": 0.5, \"b\": null}");
  EXPECT_EQ(JsonObject().Add("n", 1).AddString("s", "x").ToString(), "{\"n\": 1, \"s\": \"x\"}\n");
}

// One line, ", " and ": " as the summaries have always been written; nested values and empty containers too.
TEST(RunSummaryTest, JsonLineLayout) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  json["z"] = nlohmann::ordered_json::array({1, "a,\nb", nlohmann::ordered_json::object({{"k", nullptr}})});
  json["empty"] = nlohmann::ordered_json::object();
  json["none"] = nlohmann::ordered_json::array();
  json["x"] = 2.5;
  EXPECT_EQ(JsonLine(json), "{\"z\": [1, \"a,\\nb\", {\"k\": null}], \"empty\": {}, \"none\": [], \"x\": 2.5}");
}

// Bytes that are not UTF-8 (a path or flag value from the user) are written as U+FFFD, not thrown about.
TEST(RunSummaryTest, JsonReplacesInvalidUtf8) {
  EXPECT_EQ(JsonObject()
                .AddString("p",
                           "a\xff\xfe"
                           "b")
                .ToString(),
            "{\"p\": \"a\xef\xbf\xbd\xef\xbf\xbd"
            "b\"}\n");
}

}  // namespace
}  // namespace kiln
