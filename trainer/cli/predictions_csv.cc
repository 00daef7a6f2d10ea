#include "trainer/cli/predictions_csv.h"

#include <charconv>

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainer/loggers/csv_logger.h"

namespace kiln {
namespace {

// A CSV cell: quoted when it holds a comma, a quote or a line break.
std::string Cell(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string Shape(const at::Tensor& tensor) { return absl::StrCat("[", absl::StrJoin(tensor.sizes(), ", "), "]"); }

// Shortest text that reads back as the same value in the tensor's own precision (float32 stays short).
std::string Number(double value, bool single) {
  if (!single) return ShortestDouble(value);
  char buffer[64];
  const std::to_chars_result result = std::to_chars(buffer, buffer + sizeof(buffer), static_cast<float>(value));
  return std::string(buffer, result.ptr);
}

}  // namespace

absl::StatusOr<std::string> PredictionsCsv(const std::vector<at::Tensor>& batches, Task task,
                                           const std::vector<std::string>& class_names) {
  std::string out = "index,prediction";
  const int64_t classes = static_cast<int64_t>(class_names.size());
  if (task == Task::kClassification) {
    for (const std::string& name : class_names) absl::StrAppend(&out, ",", Cell("prob_" + name));
  }
  out += "\n";
  int64_t index = 0;
  for (const at::Tensor& batch : batches) {
    const bool single = batch.scalar_type() == at::kFloat;
    const at::Tensor values = batch.to(at::kCPU, at::kDouble).contiguous();
    if (task == Task::kClassification) {
      if (values.dim() != 2 || values.size(1) != classes) {
        return absl::InvalidArgumentError(absl::StrCat("a batch of predictions has shape ", Shape(values),
                                                       "; classification needs [N, ", classes, "]"));
      }
      const at::Tensor predicted = values.argmax(1);
      for (int64_t row = 0; row < values.size(0); ++row, ++index) {
        absl::StrAppend(&out, index, ",", Cell(class_names[predicted[row].item<int64_t>()]));
        const double* probabilities = values[row].data_ptr<double>();
        for (int64_t c = 0; c < classes; ++c) absl::StrAppend(&out, ",", Number(probabilities[c], single));
        out += "\n";
      }
    } else {
      if (values.dim() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("a batch of predictions has shape ", Shape(values), "; regression needs [N]"));
      }
      const double* data = values.data_ptr<double>();
      for (int64_t row = 0; row < values.size(0); ++row, ++index) {
        absl::StrAppend(&out, index, ",", Number(data[row], single), "\n");
      }
    }
  }
  return out;
}

}  // namespace kiln
