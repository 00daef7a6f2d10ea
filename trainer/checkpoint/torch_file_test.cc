// ReadTorchFile (through ReadCheckpoint, as fit reads a checkpoint) on real torch.save files whose tensors share
// storages, and on pickles that share containers: each storage is read once and shared by its tensors, as torch.load
// shares it, and the reader's peak memory stays within the bound docs/reliability.md states ("Memory": at most the
// file, plus what its deflated records inflate to together, plus 1024 times its data.pkl, plus 32 MiB). The files
// are testdata/make_shared_storage_checkpoints.py's, written by PyTorch 2.11.
#include "trainer/checkpoint/format/torch_file.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ATen/ATen.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/io/peak_memory.h"

namespace kiln {
namespace {

constexpr char kTestdata[] = "trainer/checkpoint/testdata/";
constexpr uint64_t kMiB = uint64_t{1} << 20;

// docs/reliability.md, "Memory", checkpoints: what a checkpoint of `file_bytes`, whose deflated records inflate to
// `inflated_bytes` together and whose data.pkl is `pickle_bytes`, may take at its peak.
uint64_t CheckpointBound(uint64_t file_bytes, uint64_t inflated_bytes, uint64_t pickle_bytes) {
  return SanitizerMemoryFactor() * (file_bytes + inflated_bytes + 1024 * pickle_bytes + 32 * kMiB);
}

at::Tensor StateTensor(const Checkpoint& checkpoint, const std::string& name) {
  const c10::impl::GenericDict state = checkpoint.contents.at(c10::IValue(std::string("state_dict"))).toGenericDict();
  return state.at(c10::IValue(name)).toTensor();
}

// The storage of `tensor`, as an identity: two tensors alias when it is the same.
const void* StorageOf(const at::Tensor& tensor) { return tensor.storage().unsafeGetStorageImpl(); }

TEST(TorchFileTest, TensorsThatShareAStorageShareItWhenRead) {
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(std::string(kTestdata) + "shared_views.ckpt");
  ASSERT_TRUE(read.ok()) << read.status();
  const at::Tensor weight = StateTensor(*read, "weight");
  const at::Tensor expected = at::arange(24, at::kFloat).reshape({4, 6});
  EXPECT_TRUE(weight.equal(expected));
  EXPECT_TRUE(StateTensor(*read, "weight_t").equal(expected.t()));
  EXPECT_TRUE(StateTensor(*read, "row").equal(expected[1]));
  EXPECT_TRUE(StateTensor(*read, "tail").equal(expected.view(-1).slice(0, 10)));
  // As torch.load gives them: one storage for the four views, another for the tensor saved apart.
  for (const char* view : {"weight_t", "row", "tail"}) {
    EXPECT_EQ(StorageOf(StateTensor(*read, view)), StorageOf(weight)) << view << " does not share weight's storage";
  }
  EXPECT_NE(StorageOf(StateTensor(*read, "other")), StorageOf(weight));
  // And so a write through one is seen through the others (tied weights stay tied).
  weight[1][2].fill_(-7.0);
  EXPECT_EQ(StateTensor(*read, "row")[2].item<float>(), -7.0f);
  EXPECT_EQ(StateTensor(*read, "weight_t")[2][1].item<float>(), -7.0f);
}

// Eight views and their base share one deflated 32 MiB record: it is inflated once (32 MiB), not once per view
// (288 MiB, what the reader took before storages were shared: seen failing then).
TEST(TorchFileTest, ADeflatedStorageSharedByViewsIsInflatedOnce) {
  const std::string path = std::string(kTestdata) + "shared_views_deflated.ckpt";
  absl::StatusOr<Checkpoint> read;
  absl::StatusOr<uint64_t> peak = PeakResidentGrowth([&] { read = ReadCheckpoint(path); });
  ASSERT_TRUE(peak.ok()) << peak.status();
  ASSERT_TRUE(read.ok()) << read.status();
  const at::Tensor base = StateTensor(*read, "base");
  EXPECT_EQ(base.numel(), 8 << 20);
  for (int i = 0; i < 8; ++i) {
    const at::Tensor view = StateTensor(*read, "view" + std::to_string(i));
    EXPECT_EQ(StorageOf(view), StorageOf(base));
    EXPECT_EQ(view.storage_offset(), i);
    EXPECT_EQ(view[(1 << 20) - i].item<float>(), 2.0f);
  }
  const uint64_t bound = CheckpointBound(std::filesystem::file_size(path), /*inflated_bytes=*/33555179,
                                         /*pickle_bytes=*/696);
  EXPECT_LE(*peak, bound) << "reading " << path << " took " << *peak / kMiB << " MiB at its peak; the bound is "
                          << bound / kMiB << " MiB";
}

// A tuple shared 2^22 times over 22 levels (a 2 KB file) is finished once per container: walked as a tree, it was
// 4 million tuples rebuilt (seen failing: 1.1 GiB, before containers were finished once).
TEST(TorchFileTest, ContainersThePickleSharesAreReadOnce) {
  const std::string path = std::string(kTestdata) + "shared_containers.ckpt";
  absl::StatusOr<Checkpoint> read;
  absl::StatusOr<uint64_t> peak = PeakResidentGrowth([&] { read = ReadCheckpoint(path); });
  ASSERT_TRUE(peak.ok()) << peak.status();
  ASSERT_TRUE(read.ok()) << read.status();
  c10::IValue nested = read->contents.at(c10::IValue(std::string("nested")));
  for (int level = 0; level < 22; ++level) {
    ASSERT_TRUE(nested.isTuple());
    EXPECT_TRUE(nested.toTupleRef().elements()[0].isSameIdentity(nested.toTupleRef().elements()[1]));
    nested = nested.toTupleRef().elements()[0];
  }
  // The parameter, unwrapped to its tensor, is the state_dict's.
  const at::Tensor leaf = nested.toTupleRef().elements()[0].toTensor();
  EXPECT_EQ(StorageOf(leaf), StorageOf(StateTensor(*read, "p")));
  const uint64_t bound = CheckpointBound(std::filesystem::file_size(path), 0, std::filesystem::file_size(path));
  EXPECT_LE(*peak, bound) << "reading " << path << " took " << *peak / kMiB << " MiB at its peak";
}

// The pickle's own cost: 200,000 empty dictionaries (the costliest construct per byte of data.pkl found: about 520
// bytes of memory per byte), within 1024 bytes of memory per byte of pickle.
TEST(TorchFileTest, APickleOfManyContainersStaysWithinItsBound) {
  c10::impl::GenericList many(c10::AnyType::get());
  for (int i = 0; i < 200000; ++i) many.push_back(c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get()));
  c10::impl::GenericDict contents(c10::StringType::get(), c10::AnyType::get());
  contents.insert("state_dict", c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()));
  contents.insert("many", many);
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/many.ckpt";
  ASSERT_TRUE(WriteCheckpoint(path, contents).ok());
  many = c10::impl::GenericList(c10::AnyType::get());
  contents = c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get());
  const uint64_t file_bytes = std::filesystem::file_size(path);
  absl::StatusOr<Checkpoint> read;
  absl::StatusOr<uint64_t> peak = PeakResidentGrowth([&] { read = ReadCheckpoint(path); });
  ASSERT_TRUE(peak.ok()) << peak.status();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->contents.at(c10::IValue(std::string("many"))).toListRef().size(), 200000u);
  // The file is almost all data.pkl.
  const uint64_t bound = CheckpointBound(file_bytes, 0, file_bytes);
  EXPECT_LE(*peak, bound) << "reading " << path << " (" << file_bytes << " bytes) took " << *peak / kMiB
                          << " MiB at its peak";
  std::printf("%s: %llu bytes, peak %llu bytes (%.1f per byte of file)\n", path.c_str(),
              static_cast<unsigned long long>(file_bytes), static_cast<unsigned long long>(*peak),
              static_cast<double>(*peak) / file_bytes);
}

}  // namespace
}  // namespace kiln
