// Fuzz target: reading a checkpoint, from the file's bytes to the trainer's restore of every record.
//
// A checkpoint is outside input: a file that a crash, a full disk, a copy or another program may have damaged.
// Reading one must end in a clear error or a correct restore, never a crash, hang or half-restored trainer.
//
// Input: the first byte chooses how the rest is used.
//   'r'    raw: the rest is the file's bytes (LibTorch's zip archive format, as torch::save writes it);
//   other  structured: the rest chooses, record by record, what a checkpoint holds: the right value, nothing, or a
//          value of another type or shape (see WriteStructured). LibTorch's archive checks every record's CRC, so
//          byte-level mutations of a real checkpoint rarely get past the zip layer; this mode reaches the trainer's
//          own record checks with well-formed archives.
// The file goes through ReadCheckpoint and then Trainer::fit(..., ckpt_path) on a small MLP with an Adam optimizer
// and a StepLR scheduler (so every record has something to restore into). With KILN_CHECKPOINT_FUZZER_SAVE=<path>
// set, each structured checkpoint is also copied there (how corpus/checkpoint_reader/raw-* were made); with
// KILN_FUZZ_VERBOSE set, what ReadCheckpoint and fit answered is printed.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "ATen/CPUGeneratorImpl.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "tests/fuzz/fuzz_support.h"
#include "torch/optim/adam.h"
#include "torch/optim/schedulers/step_lr.h"
#include "torch/serialize/output-archive.h"
#include "torch/utils.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/synthetic_data.h"
#include "trainer/testing/test_support.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

using fuzzing::FuzzInput;
using torch::serialize::OutputArchive;

std::string& CheckpointPath() {
  static std::string* path = new std::string;
  return *path;
}

MlpOptions ModelOptions() {
  MlpOptions options;
  options.input_size = 4;
  options.hidden_sizes = {8};
  options.num_classes = 2;
  return options;
}

std::unique_ptr<testing::RecordingClassifier> MakeModel() {
  torch::manual_seed(0);
  auto model = std::make_unique<testing::RecordingClassifier>(ModelOptions());
  model->make_scheduler = [](torch::optim::Optimizer& optimizer) {
    return std::vector<SchedulerConfig>{{.scheduler = std::make_shared<torch::optim::StepLR>(optimizer, 1, 0.5),
                                         .interval = SchedulerConfig::Interval::kStep}};
  };
  return model;
}

// A tensor of a fuzzed type and shape (at most 4 x 16 x 16 x 16 elements), filled from the input.
at::Tensor FuzzTensor(FuzzInput& input) {
  static const at::ScalarType kTypes[] = {at::kFloat, at::kDouble, at::kLong, at::kByte, at::kBool, at::kHalf};
  const at::ScalarType type = kTypes[input.Byte() % 6];
  std::vector<int64_t> shape(input.Byte() % 5);
  for (int64_t& size : shape) size = input.Byte() % 17;
  at::Tensor tensor = at::zeros(shape, at::TensorOptions().dtype(type));
  const std::string bytes = input.String(64);
  if (tensor.numel() > 0 && !bytes.empty()) {
    at::Tensor raw = tensor.view({-1}).view(at::kByte);
    for (int64_t i = 0; i < raw.numel(); ++i) raw[i] = static_cast<uint8_t>(bytes[i % bytes.size()]);
  }
  return tensor;
}

// Any value of one of the types a checkpoint's records have, or not.
c10::IValue FuzzValue(FuzzInput& input) {
  switch (input.Byte() % 7) {
    case 0:
      return c10::IValue(input.Integer<int64_t>());
    case 1:
      return c10::IValue(static_cast<int64_t>(input.Byte()) - 128);
    case 2:
      return c10::IValue(input.String(32));
    case 3:
      return c10::IValue(FuzzTensor(input));
    case 4: {
      c10::List<int64_t> list;
      for (int n = input.Byte() % 6; n > 0; --n) list.push_back(input.Integer<int64_t>());
      return c10::IValue(list);
    }
    case 5: {
      c10::Dict<std::string, std::string> dict;
      for (int n = input.Byte() % 4; n > 0; --n) dict.insert_or_assign(input.String(16), input.String(16));
      return c10::IValue(dict);
    }
    default: {
      c10::Dict<std::string, double> dict;
      for (int n = input.Byte() % 4; n > 0; --n)
        dict.insert_or_assign(input.String(16), input.Integer<int64_t>() * 0.5);
      return c10::IValue(dict);
    }
  }
}

enum Choice { kRight = 0, kMissing = 1, kOther = 2 };

Choice Choose(FuzzInput& input) {
  // Mostly right, so that most checkpoints get far: a zero byte (the end of the input too) means "right".
  const uint8_t byte = input.Byte();
  return byte < 160 ? kRight : byte < 200 ? kMissing : kOther;
}

// Writes a record: its right value, nothing, or another value.
void Record(OutputArchive& archive, FuzzInput& input, const std::string& key, const c10::IValue& right) {
  switch (Choose(input)) {
    case kRight:
      archive.write(key, right);
      break;
    case kMissing:
      break;
    case kOther:
      archive.write(key, FuzzValue(input));
      break;
  }
}

void TensorRecord(OutputArchive& archive, FuzzInput& input, const std::string& key, const at::Tensor& right) {
  switch (Choose(input)) {
    case kRight:
      archive.write(key, right, /*is_buffer=*/true);
      break;
    case kMissing:
      break;
    case kOther:
      if (input.Byte() % 2 == 0) {
        archive.write(key, FuzzTensor(input), /*is_buffer=*/true);
      } else {
        archive.write(key, FuzzValue(input));
      }
      break;
  }
}

// A small counter: usually plausible, sometimes any int64.
int64_t Counter(FuzzInput& input) {
  const uint8_t byte = input.Byte();
  return byte < 200 ? byte % 4 : input.Integer<int64_t>();
}

// What Trainer::save_checkpoint writes (trainer_checkpoint.cc), record by record, each as `input` chooses.
std::string WriteStructured(FuzzInput& input) {
  auto model = MakeModel();
  OutputArchive archive;
  Record(archive, input, "kiln_format", c10::IValue(std::string("kiln.checkpoint")));
  Record(archive, input, "kiln_format_version", c10::IValue(kCheckpointFormatVersion));
  const int64_t epoch = Counter(input);
  const int64_t global_step = Counter(input);
  Record(archive, input, "loop_epoch", c10::IValue(epoch));
  Record(archive, input, "loop_batch_in_epoch", c10::IValue(Counter(input)));
  Record(archive, input, "loop_global_step", c10::IValue(global_step));

  OutputArchive state;
  c10::List<std::string> names;
  int64_t index = 0;
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& item : model->named_parameters()) named.emplace_back(item.key(), item.value().detach());
  for (const auto& [name, tensor] : named) {
    names.push_back(Choose(input) == kOther ? input.String(16) : name);
    TensorRecord(state, input, absl::StrCat("t", index++), tensor);
  }
  if (Choose(input) == kOther) names.push_back(input.String(16));  // One more than the model has.
  Record(state, input, "names", c10::IValue(names));
  if (Choose(input) != kMissing) archive.write("model", state);

  auto adam = std::make_shared<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-3));
  for (at::Tensor& parameter : model->parameters()) parameter.mutable_grad() = at::ones_like(parameter);
  adam->step();
  Record(archive, input, "num_optimizers", c10::IValue(int64_t{1}));
  switch (Choose(input)) {
    case kRight: {
      OutputArchive optimizer;
      adam->save(optimizer);
      archive.write("optimizer_0", optimizer);
      break;
    }
    case kMissing:
      break;
    case kOther: {
      OutputArchive optimizer;
      for (int n = input.Byte() % 4; n > 0; --n) optimizer.write(input.String(24), FuzzValue(input));
      archive.write("optimizer_0", optimizer);
      break;
    }
  }
  Record(archive, input, "scheduler_steps", c10::IValue(c10::List<int64_t>({std::min(epoch, global_step)})));
  const int64_t callbacks = input.Byte() % 3;
  c10::List<std::string> callback_keys;
  for (int64_t i = 0; i < callbacks; ++i) {
    callback_keys.push_back(input.String(24));
    c10::Dict<std::string, std::string> callback_state;
    callback_state.insert(input.String(16), input.String(16));
    Record(archive, input, absl::StrCat("callback_", i), c10::IValue(callback_state));
  }
  Record(archive, input, "callback_keys", c10::IValue(callback_keys));
  TensorRecord(archive, input, "rng_cpu", at::detail::getDefaultCPUGenerator().get_state());
  Record(archive, input, "hparams", c10::IValue(c10::Dict<std::string, std::string>()));
  Record(archive, input, "precision_plugin", c10::IValue(c10::Dict<std::string, double>()));

  std::string bytes;
  archive.save_to([&bytes](const void* data, size_t size) -> size_t {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  return bytes;
}

void RestoreAndCheck(const std::string& path) {
  // ReadCheckpoint alone, as FindLastCheckpoint uses it to skip damaged files.
  const auto archive = ReadCheckpoint(path);
  if (!archive.ok()) {
    KILN_FUZZ_CHECK(archive.status().code() == absl::StatusCode::kInvalidArgument, archive.status().ToString());
  }
  SyntheticOptions data_options;
  data_options.num_train = 16;
  data_options.num_val = 8;
  data_options.num_features = 4;
  data_options.num_classes = 2;
  data_options.batch_size = 8;
  SyntheticClusters data(data_options);
  auto model = MakeModel();
  Trainer trainer({.accelerator = "cpu",
                   .devices = 1,
                   .max_epochs = 1,
                   .num_sanity_val_steps = 0,
                   .log_every_n_steps = 0,
                   .enable_checkpointing = false,
                   .enable_progress_bar = false});
  const absl::Status status = trainer.fit(*model, data, path);
  if (std::getenv("KILN_FUZZ_VERBOSE") != nullptr) {
    std::fprintf(stderr, "  read: %s\n  fit: %s\n", archive.status().ToString().c_str(), status.ToString().c_str());
  }
  if (!archive.ok()) KILN_FUZZ_CHECK(!status.ok(), "fit restored from a file that ReadCheckpoint refuses");
  if (!status.ok()) {
    // A damaged checkpoint is refused naming the file; a well-formed one may still hold parameters that make the
    // loss non-finite, which training then refuses (FailedPrecondition, naming the batch).
    if (status.code() == absl::StatusCode::kFailedPrecondition) {
      KILN_FUZZ_CHECK(absl::StrContains(status.message(), "training loss"), status.ToString());
    } else {
      KILN_FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument, status.ToString());
      KILN_FUZZ_CHECK(absl::StrContains(status.message(), path), status.ToString());
    }
    return;
  }
  KILN_FUZZ_CHECK(trainer.global_step() >= 0 && trainer.current_epoch() >= 0,
                  absl::StrCat("epoch ", trainer.current_epoch(), ", step ", trainer.global_step()));
}

}  // namespace
}  // namespace kiln

// Sanitizer defaults for this target alone (ASAN_OPTIONS and LSAN_OPTIONS still override them).
//
// LibTorch 1.13 leaks miniz's zip-reader state (152 bytes plus the central directory) each time a damaged archive
// makes caffe2::serialize::PyTorchStreamReader's constructor throw after mz_zip_reader_init succeeded: the
// constructor calls init(), init() throws, and the destructor that would call mz_zip_reader_end never runs. Stack of
// the leak, found by this fuzzer (tests/fuzz/corpus/checkpoint_reader/finding-libtorch-leak-*), every frame above
// Kiln's ReadCheckpoint inside Debian's libtorch_cpu.so.1.13:
//   malloc <- (miniz, static) <- mz_zip_reader_init <- caffe2::serialize::PyTorchStreamReader::init()
//   <- PyTorchStreamReader::PyTorchStreamReader(std::string const&) <- torch::jit::import_ir_module
//   <- torch::jit::load <- torch::serialize::InputArchive::load_from <- kiln::ReadCheckpoint
// Kiln cannot free it (the reader object was never constructed), so it is suppressed by that LibTorch function.
// LibTorch is built without frame pointers, so LSan's fast unwinder stops at the first LibTorch frame and the
// suppression could not see PyTorchStreamReader::init: this target unwinds the slow, exact way instead.
extern "C" const char* __asan_default_options() { return "fast_unwind_on_malloc=0"; }
extern "C" const char* __lsan_default_suppressions() { return "leak:caffe2::serialize::PyTorchStreamReader::init\n"; }

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  FLAGS_minloglevel = 3;  // The restore's INFO and WARNING lines would drown the fuzzer's output.
  torch::set_num_threads(1);
  const char* root = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(root != nullptr ? root : "/tmp", "/kiln-checkpoint-fuzzer-", ::getpid());
  std::filesystem::create_directories(dir);
  kiln::CheckpointPath() = dir + "/input.ckpt";
  std::atexit([] { std::filesystem::remove_all(std::filesystem::path(kiln::CheckpointPath()).parent_path()); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 1 << 20) return 0;
  kiln::fuzzing::FuzzInput input(data, size);
  const bool raw = input.Byte() == 'r';
  std::string bytes;
  try {
    bytes = raw ? input.Rest() : kiln::WriteStructured(input);
  } catch (const c10::Error&) {
    return 0;  // The archive refused what the input asked to write (one key with two types): nothing to read.
  }
  const std::string& path = kiln::CheckpointPath();
  {
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  if (const char* save = std::getenv("KILN_CHECKPOINT_FUZZER_SAVE"); save != nullptr && !raw) {
    std::ofstream copy(save, std::ios::binary | std::ios::trunc);
    copy << 'r' << bytes;
  }
  kiln::RestoreAndCheck(path);
  return 0;
}
