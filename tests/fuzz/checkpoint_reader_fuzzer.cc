// Fuzz target: reading a checkpoint, from the file's bytes to the trainer's restore of every record.
//
// A checkpoint is outside input: a file that a crash, a full disk, a copy or another program may have damaged.
// Reading one must end in a clear error or a correct restore, never a crash, hang or half-restored trainer.
//
// Input: the first byte chooses how the rest is used.
//   'r'    raw: the rest is the file's bytes (a zip archive: what torch.save writes, or format 1's LibTorch archive);
//   't'    lying tensors: a well-formed archive (right CRCs, unique records) whose pickle, spelt opcode by opcode as
//          torch.save writes one, describes the model's parameters with fuzzed storage types, storage keys, storage
//          sizes, offsets, sizes and strides over records of fuzzed lengths (see WriteLyingTensors). It goes through
//          Trainer::validate(..., ckpt_path), which restores the weights alone; when that succeeds, every restored
//          value must be the one the declared view reads from its record's bytes (no read past a record, no silent
//          wrong restore). The crafted files of issue #39 are of this kind (hostile_checkpoints.py);
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
#include <cstring>
#include <map>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "ATen/CPUGeneratorImpl.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "caffe2/serialize/inline_container.h"
#include "glog/logging.h"
#include "tests/fuzz/fuzz_support.h"
#include "torch/optim/adam.h"
#include "torch/optim/schedulers/step_lr.h"
#include "torch/utils.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/checkpoint/format/torch_file.h"
#include "trainer/checkpoint/lightning/optimizer_state_dict.h"
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

// The pickle opcodes torch.save's protocol 2 uses for a tensor (pickletools names them).
std::string PickleString(const std::string& text) {
  std::string out = "X";
  const uint32_t length = static_cast<uint32_t>(text.size());
  out.append(reinterpret_cast<const char*>(&length), 4);
  return out + text;
}
std::string PickleGlobal(const std::string& module, const std::string& name) {
  return "c" + module + "\n" + name + "\n";
}
std::string PickleLong(int64_t value) {
  std::string out = "\x8a\x08";
  out.append(reinterpret_cast<const char*>(&value), 8);
  return out;
}

// One declared tensor of a lying archive, and what a correct reader must make of it.
struct DeclaredTensor {
  std::string name;
  bool is_float = false;
  std::string key;
  int64_t offset = 0;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
};

struct LyingArchive {
  std::string bytes;
  std::vector<DeclaredTensor> tensors;
  std::map<std::string, std::string> records;  // Storage key -> the record's bytes.
};

// Two's-complement arithmetic without overflow's undefined behaviour: the declarations are meant to be absurd.
int64_t Wrap(uint64_t value) { return static_cast<int64_t>(value); }
int64_t Add(int64_t a, int64_t b) { return Wrap(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }
int64_t Multiply(int64_t a, int64_t b) { return Wrap(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); }

// A value near `right` most of the time, anything sometimes.
int64_t Lie(FuzzInput& input, int64_t right) {
  const uint8_t byte = input.Byte();
  if (byte < 150) return right;
  if (byte < 200) return Add(right, static_cast<int8_t>(input.Byte()));
  if (byte < 230) return static_cast<int64_t>(1) << (input.Byte() % 63);
  return input.Integer<int64_t>();
}

// {"state_dict": {name: tensor, ...}} for the model's parameters, each tensor's declaration fuzzed around the right
// one, over storage records whose lengths are fuzzed around what the declarations need.
LyingArchive WriteLyingTensors(FuzzInput& input, LightningModule& model) {
  static const char* kStorages[] = {"FloatStorage", "FloatStorage", "FloatStorage", "DoubleStorage",
                                    "HalfStorage",  "LongStorage",  "ByteStorage",  "BoolStorage"};
  static const int kElementBytes[] = {4, 4, 4, 8, 2, 8, 1, 1};
  LyingArchive archive;
  std::map<std::string, int64_t> wanted_bytes;  // Per key: what the first declaration using it needs.
  std::string pickle = "\x80\x02}(" + PickleString("state_dict") + "}(";
  int parameter = 0;
  for (const auto& item : model.named_parameters()) {
    DeclaredTensor tensor;
    tensor.name = input.Byte() < 240 ? item.key() : input.String(16);
    const int type = input.Byte() % 8;
    tensor.is_float = type < 3;
    tensor.key = std::to_string((parameter++ + input.Byte()) % 4);  // Distinct unless the input says otherwise.
    const std::vector<int64_t> shape = item.value().sizes().vec();
    int64_t numel = 1;
    for (int64_t size : shape) numel *= size;
    if (input.Byte() < 220) {
      for (size_t d = 0; d < shape.size(); ++d) tensor.sizes.push_back(Lie(input, shape[d]));
    } else {
      tensor.sizes.resize(input.Byte() % 5);
      for (int64_t& size : tensor.sizes) size = Lie(input, 2);
    }
    int64_t stride = 1;
    tensor.strides.resize(tensor.sizes.size());
    for (size_t d = tensor.sizes.size(); d-- > 0;) {
      tensor.strides[d] = Lie(input, stride);
      stride = Multiply(stride, std::max<int64_t>(tensor.sizes[d], 1));
    }
    tensor.offset = Lie(input, 0);
    const int64_t storage_numel = Lie(input, Add(numel, tensor.offset));
    wanted_bytes.emplace(tensor.key, numel * kElementBytes[type]);
    pickle += PickleString(tensor.name) + PickleGlobal("torch._utils", "_rebuild_tensor_v2") + "((" +
              PickleString("storage") + PickleGlobal("torch", kStorages[type]) + PickleString(tensor.key) +
              PickleString("cpu") + PickleLong(storage_numel) + "tQ" + PickleLong(tensor.offset) + "(";
    for (int64_t size : tensor.sizes) pickle += PickleLong(size);
    pickle += "t(";
    for (int64_t s : tensor.strides) pickle += PickleLong(s);
    pickle += "t\x89" + PickleGlobal("collections", "OrderedDict") + ")RtR";
    archive.tensors.push_back(std::move(tensor));
  }
  pickle += "uu.";
  for (const auto& [key, right] : wanted_bytes) {
    const int64_t length = std::clamp<int64_t>(Lie(input, right), 0, 1 << 16);
    std::string bytes(static_cast<size_t>(length), '\0');
    // Small floats (0.25 * (i % 8)): a correct restore gives finite weights, so validation runs to its end.
    for (int64_t i = 0; i + 4 <= length; i += 4) {
      const float value = 0.25f * static_cast<float>((i / 4) % 8);
      std::memcpy(bytes.data() + i, &value, 4);
    }
    archive.records[key] = std::move(bytes);
  }
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) -> size_t {
    archive.bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  for (const auto& [key, bytes] : archive.records) writer.writeRecord("data/" + key, bytes.data(), bytes.size());
  writer.writeEndOfFile();
  return archive;
}

// After a restore that succeeded: each parameter holds what its declaration reads from its record, element by
// element, computed here from the record's bytes without LibTorch.
void CheckRestoredValues(const LyingArchive& archive, LightningModule& model) {
  std::map<std::string, at::Tensor> parameters;
  for (const auto& item : model.named_parameters()) parameters[item.key()] = item.value().detach().contiguous();
  for (const DeclaredTensor& tensor : archive.tensors) {
    if (!tensor.is_float || parameters.count(tensor.name) == 0) continue;
    const at::Tensor restored = parameters[tensor.name];
    KILN_FUZZ_CHECK(restored.sizes().vec() == tensor.sizes, absl::StrCat("shape of ", tensor.name));
    const std::string& record = archive.records.at(tensor.key);
    const float* values = restored.data_ptr<float>();
    std::vector<int64_t> index(tensor.sizes.size(), 0);
    for (int64_t i = 0; i < restored.numel(); ++i) {
      int64_t element = tensor.offset;
      for (size_t d = 0; d < index.size(); ++d) element = Add(element, Multiply(index[d], tensor.strides[d]));
      KILN_FUZZ_CHECK(element >= 0 && element < static_cast<int64_t>(record.size() / 4),
                      absl::StrCat(tensor.name, " was restored from element ", element, " of a record of ",
                                   record.size(), " bytes"));
      float expected;
      std::memcpy(&expected, record.data() + element * 4, 4);
      KILN_FUZZ_CHECK(std::memcmp(&expected, &values[i], 4) == 0,
                      absl::StrCat(tensor.name, "[", i, "] is ", values[i], ", its record says ", expected));
      for (size_t d = index.size(); d-- > 0;) {
        if (++index[d] < tensor.sizes[d]) break;
        index[d] = 0;
      }
    }
  }
}

SyntheticOptions DataOptions() {
  SyntheticOptions data_options;
  data_options.num_train = 16;
  data_options.num_val = 8;
  data_options.num_features = 4;
  data_options.num_classes = 2;
  data_options.batch_size = 8;
  return data_options;
}

void ValidateAndCheck(FuzzInput& input, const std::string& path) {
  auto model = MakeModel();
  LyingArchive archive;
  try {
    archive = WriteLyingTensors(input, *model);
  } catch (const c10::Error&) {
    return;  // The writer refused a record name: nothing to read.
  }
  {
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file.write(archive.bytes.data(), static_cast<std::streamsize>(archive.bytes.size()));
  }
  if (const char* save = std::getenv("KILN_CHECKPOINT_FUZZER_SAVE"); save != nullptr) {
    std::ofstream copy(save, std::ios::binary | std::ios::trunc);
    copy << 'r' << archive.bytes;
  }
  SyntheticClusters data(DataOptions());
  Trainer trainer({.accelerator = "cpu", .devices = 1, .logger = false, .enable_progress_bar = false});
  const absl::StatusOr<MetricMap> metrics = trainer.validate(*model, data, path);
  if (std::getenv("KILN_FUZZ_VERBOSE") != nullptr) {
    for (const DeclaredTensor& tensor : archive.tensors) {
      std::fprintf(stderr, "  %s: %s storage data/%s (%zu bytes), offset %lld, sizes [%s], strides [%s]\n",
                   tensor.name.c_str(), tensor.is_float ? "float" : "other", tensor.key.c_str(),
                   archive.records.count(tensor.key) != 0 ? archive.records.at(tensor.key).size() : 0,
                   static_cast<long long>(tensor.offset), absl::StrJoin(tensor.sizes, ", ").c_str(),
                   absl::StrJoin(tensor.strides, ", ").c_str());
    }
    std::fprintf(stderr, "  validate: %s\n", metrics.status().ToString().c_str());
  }
  if (!metrics.ok()) {
    KILN_FUZZ_CHECK(metrics.status().code() == absl::StatusCode::kInvalidArgument, metrics.status().ToString());
    KILN_FUZZ_CHECK(absl::StrContains(metrics.status().message(), path), metrics.status().ToString());
    return;
  }
  CheckRestoredValues(archive, *model);
}

void RestoreAndCheck(const std::string& path) {
  // ReadCheckpoint alone, as FindLastCheckpoint uses it to skip damaged files.
  const auto archive = ReadCheckpoint(path);
  if (!archive.ok()) {
    KILN_FUZZ_CHECK(archive.status().code() == absl::StatusCode::kInvalidArgument, archive.status().ToString());
  }
  SyntheticClusters data(DataOptions());
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
  const uint8_t mode = input.Byte();
  if (mode == 't') {
    kiln::ValidateAndCheck(input, kiln::CheckpointPath());
    return 0;
  }
  const bool raw = mode == 'r';
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
