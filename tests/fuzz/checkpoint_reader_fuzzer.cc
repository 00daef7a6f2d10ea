// Fuzz target: reading a checkpoint, from the file's bytes to the trainer's restore of every record.
//
// A checkpoint is outside input: a file that a crash, a full disk, a copy or another program may have damaged.
// Reading one must end in a clear error or a correct restore, never a crash, hang or half-restored trainer.
//
// Input: the first byte chooses how the rest is used.
//   'r'    raw: the rest is the file's bytes (a zip archive: what torch.save writes, or format 1's LibTorch archive);
//   other  structured: the rest chooses, entry by entry, what a checkpoint holds: the right value, nothing, or a
//          value of another type or shape (see WriteStructured). ReadCheckpoint checks every record's CRC, so
//          byte-level mutations of a real checkpoint rarely get past the zip layer; this mode reaches the trainer's
//          own checks with well-formed files.
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
#include "torch/utils.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/checkpoint/optimizer_state_dict.h"
#include "trainer/checkpoint/torch_file.h"
#include "trainer/synthetic_data.h"
#include "trainer/testing/test_support.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

using fuzzing::FuzzInput;

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

using Dict = c10::impl::GenericDict;

Dict NewDict() { return Dict(c10::StringType::get(), c10::AnyType::get()); }

// Sets an entry: its right value, nothing, or another value.
void Record(Dict& dict, FuzzInput& input, const std::string& key, const c10::IValue& right) {
  switch (Choose(input)) {
    case kRight:
      dict.insert_or_assign(key, right);
      break;
    case kMissing:
      break;
    case kOther:
      dict.insert_or_assign(key, input.Byte() % 2 == 0 ? c10::IValue(FuzzTensor(input)) : FuzzValue(input));
      break;
  }
}

// A small counter: usually plausible, sometimes any int64.
int64_t Counter(FuzzInput& input) {
  const uint8_t byte = input.Byte();
  return byte < 200 ? byte % 4 : input.Integer<int64_t>();
}

// What Trainer::save_checkpoint writes (checkpoint_connector.cc), entry by entry, each as `input` chooses; the kiln
// section may be missing, which makes it a checkpoint in Lightning's layout that Kiln did not write.
std::string WriteStructured(FuzzInput& input) {
  auto model = MakeModel();
  Dict top = NewDict();
  const int64_t epoch = Counter(input);
  const int64_t global_step = Counter(input);
  Record(top, input, "epoch", epoch);
  Record(top, input, "global_step", global_step);
  Record(top, input, "pytorch-lightning_version", std::string("2.2.5"));

  Dict state = NewDict();
  for (const auto& item : model->named_parameters()) {
    Record(state, input, Choose(input) == kOther ? input.String(16) : item.key(), item.value().detach());
  }
  if (Choose(input) == kOther) state.insert_or_assign(input.String(16), FuzzTensor(input));  // One the model lacks.
  Record(top, input, "state_dict", state);

  Dict counts = NewDict();
  Record(counts, input, "completed", Counter(input));
  Dict batch_progress = NewDict();
  Record(batch_progress, input, "current", counts);
  Record(batch_progress, input, "is_last_batch", input.Byte() % 2 == 0);
  Dict fit_loop = NewDict();
  Record(fit_loop, input, "epoch_loop.batch_progress", batch_progress);
  Dict loops = NewDict();
  Record(loops, input, "fit_loop", fit_loop);
  Record(top, input, "loops", loops);

  auto adam = std::make_shared<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-3));
  for (at::Tensor& parameter : model->parameters()) parameter.mutable_grad() = at::ones_like(parameter);
  adam->step();
  c10::impl::GenericList optimizers(c10::AnyType::get());
  Dict optimizer = OptimizerStateDict(*adam).value().toGenericDict();
  Record(optimizer, input, "state", optimizer.at(std::string("state")));
  Record(optimizer, input, "param_groups", optimizer.at(std::string("param_groups")));
  if (Choose(input) != kMissing) optimizers.push_back(optimizer);
  if (Choose(input) == kOther) optimizers.push_back(FuzzValue(input));
  Record(top, input, "optimizer_states", optimizers);
  Dict scheduler = NewDict();
  Record(scheduler, input, "last_epoch", std::min(epoch, global_step));
  c10::impl::GenericList schedulers(c10::AnyType::get());
  schedulers.push_back(scheduler);
  Record(top, input, "lr_schedulers", schedulers);
  Dict callbacks = NewDict();
  for (int64_t i = input.Byte() % 3; i > 0; --i) {
    Dict callback_state = NewDict();
    Record(callback_state, input, input.String(16), input.String(16));
    Record(callbacks, input, input.String(24), callback_state);
  }
  Record(top, input, "callbacks", callbacks);
  Record(top, input, "hyper_parameters", NewDict());

  Dict kiln = NewDict();
  Record(kiln, input, "kiln_format", std::string("kiln.checkpoint"));
  Record(kiln, input, "kiln_format_version", kCheckpointFormatVersion);
  Dict loop = NewDict();
  Record(loop, input, "epoch", epoch);
  Record(loop, input, "batch_in_epoch", Counter(input));
  Record(loop, input, "global_step", global_step);
  Record(kiln, input, "loop", loop);
  Record(kiln, input, "rng_cpu", at::detail::getDefaultCPUGenerator().get_state());
  Record(kiln, input, "precision_plugin", NewDict());
  Record(top, input, "kiln", kiln);
  return SerializeTorchFile(top).value();
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
