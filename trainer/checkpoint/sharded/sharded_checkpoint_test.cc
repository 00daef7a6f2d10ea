// Sharded checkpoints written by three ranks (threads of this process, gathering through a barrier) and read back
// whole; damage, a missing rank file and a rank that fails are refused without a checkpoint under the name. Crafted
// indices that name one record many times are read within the memory bound docs/reliability.md states ("Memory").
#include "trainer/checkpoint/sharded/sharded_checkpoint.h"

#include <condition_variable>
#include <cstdio>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"
#include "caffe2/serialize/inline_container.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/checkpoint/format/snapshot_dict.h"
#include "trainer/checkpoint/format/torch_file.h"
#include "trainer/io/peak_memory.h"
#include "trainer/testing/test_support.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using c10::IValue;
using c10::impl::GenericDict;
using c10::impl::GenericList;
using ::testing::HasSubstr;

// Every rank's text, in rank order, once all have given theirs: the collective the ranks share.
class Gather {
 public:
  explicit Gather(int ranks) : slots_(ranks) {}
  std::vector<std::string> operator()(int rank, const std::string& mine) {
    std::unique_lock<std::mutex> lock(mutex_);
    const int generation = generation_;
    slots_[rank] = mine;
    if (++arrived_ == static_cast<int>(slots_.size())) {
      arrived_ = 0;
      ++generation_;
      result_ = slots_;
      changed_.notify_all();
    } else {
      changed_.wait(lock, [&] { return generation_ != generation; });
    }
    return result_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> slots_;
  std::vector<std::string> result_;
  int arrived_ = 0;
  int generation_ = 0;
};

// A checkpoint's optimizer_states: one optimizer with `state` (by parameter index) and one group of `settings` over
// parameters 0 and 1.
GenericList OptimizerStates(const GenericDict& state, GenericDict settings) {
  GenericList params = NewList();
  params.push_back(IValue(int64_t{0}));
  params.push_back(IValue(int64_t{1}));
  settings.insert(IValue(std::string("params")), IValue(params));
  GenericList groups = NewList();
  groups.push_back(IValue(settings));
  GenericDict optimizer = NewDict();
  optimizer.insert(IValue(std::string("state")), IValue(state));
  optimizer.insert(IValue(std::string("param_groups")), IValue(groups));
  GenericList optimizers = NewList();
  optimizers.push_back(IValue(optimizer));
  return optimizers;
}

// A checkpoint's dictionary: tensors of every kind of shape, an optimizer's state and groups, other values.
GenericDict Contents(float scale) {
  GenericDict state_dict = NewDict();
  state_dict.insert(IValue(std::string("net.0.weight")), IValue(at::arange(15, at::kFloat).reshape({5, 3}) * scale));
  state_dict.insert(IValue(std::string("net.0.bias")), IValue(at::arange(2, at::kFloat) * scale));  // Rows < ranks.
  state_dict.insert(IValue(std::string("count")), IValue(at::scalar_tensor(7, at::kLong)));
  state_dict.insert(IValue(std::string("empty")), IValue(at::empty({0, 2}, at::kDouble)));
  GenericDict momentum = NewDict();
  momentum.insert(IValue(std::string("momentum_buffer")), IValue(at::ones({5, 3}) * scale));
  momentum.insert(IValue(std::string("step")), IValue(at::scalar_tensor(4.0)));
  GenericDict state = NewDict();
  state.insert(IValue(int64_t{1}), IValue(momentum));  // Only the second parameter has state.
  GenericDict group = NewDict();
  group.insert(IValue(std::string("lr")), IValue(0.5));
  const GenericList optimizers = OptimizerStates(state, group);
  GenericDict contents = NewDict();
  contents.insert(IValue(std::string("epoch")), IValue(int64_t{3}));
  contents.insert(IValue(std::string("state_dict")), IValue(state_dict));
  contents.insert(IValue(std::string("optimizer_states")), IValue(optimizers));
  return contents;
}

// Writes `contents` as the sharded checkpoint `path` from `ranks` threads, each holding the parts `parts` gives it
// (none: every tensor whole); each rank's status.
std::vector<absl::Status> WriteFromRanks(
    const std::string& path, int ranks, const std::function<absl::StatusOr<GenericDict>(int)>& contents,
    const std::function<std::unordered_map<std::string, ShardedPart>(int)>& parts = nullptr) {
  Gather gather(ranks);
  std::vector<absl::Status> statuses(ranks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      ShardedCheckpointRanks context{.rank = rank,
                                     .world_size = ranks,
                                     .optimizer_parameter_names = {{"net.0.weight", "net.0.bias"}},
                                     .all_gather = [&](const std::string& mine) { return gather(rank, mine); },
                                     .parts = parts != nullptr ? parts(rank)
                                                               : std::unordered_map<std::string, ShardedPart>{}};
      statuses[rank] = WriteShardedCheckpoint(path, contents(rank), context);
    });
  }
  for (std::thread& thread : threads) thread.join();
  return statuses;
}

// WriteFromRanks with Contents(scale) on every rank, each of which must succeed.
void WriteAll(const std::string& path, int ranks, float scale) {
  for (const absl::Status& status : WriteFromRanks(path, ranks, [scale](int) { return Contents(scale); })) {
    ASSERT_TRUE(status.ok()) << status;
  }
}

std::vector<std::string> Listing(const std::string& folder) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(DistributedCheckpointTest, ThreeRanksWriteTheirPartsAndItReadsBackWhole) {
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/three.ckpt";
  ASSERT_NO_FATAL_FAILURE(WriteAll(path, 3, 1.0f));
  // Rows of a 5-row tensor in chunks of 2: every rank has a part.
  EXPECT_EQ(Listing(path), (std::vector<std::string>{".metadata", "__0_0.distcp", "__1_0.distcp", "__2_0.distcp",
                                                     "meta.pt"}));
  EXPECT_EQ(Listing(dir), (std::vector<std::string>{"three.ckpt"}));  // No temporary left.
  ASSERT_TRUE(IsShardedCheckpoint(path));
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(path);
  ASSERT_TRUE(read.ok()) << read.status();
  const GenericDict expected = Contents(1.0f);
  EXPECT_EQ(read->contents.at(IValue(std::string("epoch"))).toInt(), 3);
  const GenericDict state_dict = read->contents.at(IValue(std::string("state_dict"))).toGenericDict();
  const GenericDict expected_state = expected.at(IValue(std::string("state_dict"))).toGenericDict();
  ASSERT_EQ(state_dict.size(), expected_state.size());
  for (const auto& entry : expected_state) {
    const at::Tensor got = state_dict.at(entry.key()).toTensor();
    EXPECT_TRUE(got.equal(entry.value().toTensor()) && got.scalar_type() == entry.value().toTensor().scalar_type() &&
                got.sizes() == entry.value().toTensor().sizes())
        << entry.key().toStringRef();
  }
  const GenericDict optimizer =
      read->contents.at(IValue(std::string("optimizer_states"))).toListRef()[0].toGenericDict();
  const GenericDict state = optimizer.at(IValue(std::string("state"))).toGenericDict();
  ASSERT_EQ(state.size(), 1u);
  const GenericDict momentum = state.at(IValue(int64_t{1})).toGenericDict();  // By index again.
  EXPECT_TRUE(momentum.at(IValue(std::string("momentum_buffer"))).toTensor().equal(at::ones({5, 3})));
  EXPECT_EQ(momentum.at(IValue(std::string("step"))).toTensor().item<double>(), 4.0);
  const GenericDict group = optimizer.at(IValue(std::string("param_groups"))).toListRef()[0].toGenericDict();
  EXPECT_EQ(group.at(IValue(std::string("lr"))).toDouble(), 0.5);
  const auto params = group.at(IValue(std::string("params"))).toListRef();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].toInt(), 0);
  EXPECT_EQ(params[1].toInt(), 1);
  // Kiln's index is not left in what the trainer reads.
  EXPECT_FALSE(read->contents.at(IValue(std::string("kiln"))).toGenericDict().contains(IValue(std::string("sharded"))));
}

TEST(DistributedCheckpointTest, ASecondSaveReplacesTheFirstAndOneRankReadsWhatThreeWrote) {
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/again.ckpt";
  ASSERT_NO_FATAL_FAILURE(WriteAll(path, 3, 1.0f));
  ASSERT_NO_FATAL_FAILURE(WriteAll(path, 1, 2.0f));
  EXPECT_EQ(Listing(path), (std::vector<std::string>{".metadata", "__0_0.distcp", "meta.pt"}));
  EXPECT_EQ(Listing(dir), (std::vector<std::string>{"again.ckpt"}));
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->contents.at(IValue(std::string("state_dict")))
                  .toGenericDict()
                  .at(IValue(std::string("net.0.weight")))
                  .toTensor()
                  .equal(at::arange(15, at::kFloat).reshape({5, 3}) * 2.0f));
}

TEST(DistributedCheckpointTest, DamageAndAMissingRankFileAreRefused) {
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/damaged.ckpt";
  ASSERT_NO_FATAL_FAILURE(WriteAll(path, 3, 1.0f));
  const std::string file = path + "/__1_0.distcp";
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  // A byte of the first record's tensor data (its stored record lies before the zip's directory).
  std::string damaged = bytes;
  damaged[damaged.size() / 4] ^= 0x40;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << damaged;
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(path);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.status().message(), HasSubstr("is damaged or incomplete"));
  fs::remove(file);
  read = ReadCheckpoint(path);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.status().message(), HasSubstr("__1_0.distcp"));
  fs::create_directories(dir + "/folder.ckpt");
  read = ReadCheckpoint(dir + "/folder.ckpt");
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.status().message(), HasSubstr("is a folder without meta.pt, so not a sharded checkpoint"));
}

// Rewrites the index in `path`'s meta.pt through `edit` (its list of records), as a crafted folder would hold it.
void EditIndex(const std::string& path, const std::function<void(GenericList&)>& edit) {
  absl::StatusOr<TorchFileBytes> bytes = ReadVerifiedZip(path + "/meta.pt");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  caffe2::serialize::PyTorchStreamReader reader(MemoryReadAdapter(*bytes));
  absl::StatusOr<IValue> meta = ReadTorchFile(reader, &*bytes);
  ASSERT_TRUE(meta.ok()) << meta.status();
  const GenericDict kiln = meta->toGenericDict().at(IValue(std::string("kiln"))).toGenericDict();
  const GenericDict index = kiln.at(IValue(std::string("sharded"))).toGenericDict();
  GenericList records = index.at(IValue(std::string("records"))).toList();
  edit(records);
  ASSERT_TRUE(WriteCheckpoint(path + "/meta.pt", meta->toGenericDict()).ok());
}

TEST(DistributedCheckpointTest, AnIndexThatDeclaresMoreThanTheFilesHoldIsRefusedBeforeAllocating) {
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/huge.ckpt";
  ASSERT_NO_FATAL_FAILURE(WriteAll(path, 2, 1.0f));
  ASSERT_NO_FATAL_FAILURE(EditIndex(path, [](GenericList& records) {
    GenericDict first = records.get(0).toGenericDict();
    first.insert_or_assign(IValue(std::string("size")), IValue(std::vector<int64_t>{int64_t{1} << 40, 3}));
  }));
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(path);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.status().message(), HasSubstr("bytes its files store"));
}

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr int64_t kBigElements = int64_t{2} << 20;  // 8 MiB of float32.
constexpr int kCopies = 24;

// docs/reliability.md, "Memory", sharded checkpoints: what reading the folder `path` may take at its peak, its
// .distcp files holding `tensor_bytes` of tensor data and nothing deflated. meta.pt is read as a checkpoint file (its
// bound: the file, 1024 times its data.pkl, 32 MiB); the records' data.pkl files are at most what is not tensor data.
uint64_t ShardedBound(const std::string& path, uint64_t tensor_bytes) {
  uint64_t distcp_bytes = 0;
  for (const auto& entry : fs::directory_iterator(path)) {
    if (entry.path().extension() == ".distcp") distcp_bytes += entry.file_size();
  }
  const uint64_t meta_bytes = fs::file_size(fs::path(path) / "meta.pt");
  const uint64_t records_pickle_bytes = distcp_bytes - tensor_bytes;
  return SanitizerMemoryFactor() *
         (meta_bytes + 1024 * meta_bytes + 2 * distcp_bytes + 1024 * records_pickle_bytes + 32 * kMiB);
}

// A one-rank sharded checkpoint whose state_dict holds one 8 MiB tensor as "big": one record in __0_0.distcp, a
// tensor's piece, or with `in_a_list` a value (the list holding the tensor).
void WriteBig(const std::string& path, bool in_a_list = false) {
  const auto contents = [in_a_list](int) -> absl::StatusOr<GenericDict> {
    const at::Tensor big = at::full({kBigElements}, 2.0f);
    GenericList list = NewList();
    list.push_back(IValue(big));
    GenericDict state_dict = NewDict();
    state_dict.insert(IValue(std::string("big")), in_a_list ? IValue(list) : IValue(big));
    GenericDict contents = NewDict();
    contents.insert(IValue(std::string("state_dict")), IValue(state_dict));
    return contents;
  };
  for (const absl::Status& status : WriteFromRanks(path, 1, contents)) ASSERT_TRUE(status.ok()) << status;
}

// `kCopies` - 1 more entries like big's, for the keys model.copy<i>, naming the same range of __0_0.distcp.
void NameBigsRangeAgain(GenericList& records) {
  const GenericDict big = records.get(0).toGenericDict();
  ASSERT_EQ(big.at(IValue(std::string("key"))).toStringRef(), "model.big");
  for (int i = 0; i + 1 < kCopies; ++i) {
    GenericDict copy = big.copy();
    const std::string name = absl::StrCat("copy", i);
    copy.insert_or_assign(IValue(std::string("key")), IValue("model." + name));
    GenericList path = NewList();
    path.push_back(IValue(std::string("model")));
    path.push_back(IValue(name));
    copy.insert_or_assign(IValue(std::string("path")), IValue(path));
    records.push_back(IValue(copy));
  }
}

// A crafted index that names one 8 MiB record 24 times, as 24 values: the record is read once and what it holds
// shared by the 24 keys (seen failing before: every entry read its range again and kept it, 24 copies, 194 MiB).
TEST(DistributedCheckpointTest, EntriesThatNameOneRecordShareItAndItIsReadOnce) {
  const std::string path = testing::TempDir() + "/shared.ckpt";
  ASSERT_NO_FATAL_FAILURE(WriteBig(path, /*in_a_list=*/true));
  ASSERT_NO_FATAL_FAILURE(EditIndex(path, NameBigsRangeAgain));
  absl::StatusOr<Checkpoint> read;
  absl::StatusOr<uint64_t> peak = PeakResidentGrowth([&] { read = ReadCheckpoint(path); });
  ASSERT_TRUE(peak.ok()) << peak.status();
  ASSERT_TRUE(read.ok()) << read.status();
  const GenericDict state_dict = read->contents.at(IValue(std::string("state_dict"))).toGenericDict();
  ASSERT_EQ(state_dict.size(), static_cast<size_t>(kCopies));
  const at::Tensor big = state_dict.at(IValue(std::string("big"))).toListRef()[0].toTensor();
  EXPECT_TRUE(big.equal(at::full({kBigElements}, 2.0f)));
  for (int i = 0; i + 1 < kCopies; ++i) {
    const at::Tensor copy = state_dict.at(IValue(absl::StrCat("copy", i))).toListRef()[0].toTensor();
    EXPECT_EQ(copy.storage().unsafeGetStorageImpl(), big.storage().unsafeGetStorageImpl()) << i;
  }
  std::printf("%s: peak %llu MiB\n", path.c_str(), static_cast<unsigned long long>(*peak / kMiB));
  const uint64_t bound = ShardedBound(path, kBigElements * sizeof(float));
  EXPECT_LE(*peak, bound) << "reading " << path << " took " << *peak / kMiB << " MiB at its peak; the bound is "
                          << bound / kMiB << " MiB";
}

// The same record named as the whole of 24 tensors: each is 8 MiB, each within the folder's 8 MiB, but together
// 192 MiB: refused before any is allocated, naming the key that passes the folder's data (seen failing before: read,
// 24 tensors filled from one record, 200 MiB).
TEST(DistributedCheckpointTest, TensorsWhoseSizesTogetherPassTheFolderAreRefusedBeforeAllocating) {
  const std::string path = testing::TempDir() + "/wholes.ckpt";
  ASSERT_NO_FATAL_FAILURE(WriteBig(path));
  ASSERT_NO_FATAL_FAILURE(EditIndex(path, NameBigsRangeAgain));
  absl::StatusOr<Checkpoint> read;
  absl::StatusOr<uint64_t> peak = PeakResidentGrowth([&] { read = ReadCheckpoint(path); });
  ASSERT_TRUE(peak.ok()) << peak.status();
  const uint64_t bound = ShardedBound(path, kBigElements * sizeof(float));
  EXPECT_LE(*peak, bound) << "reading " << path << " took " << *peak / kMiB << " MiB at its peak; the bound is "
                          << bound / kMiB << " MiB";
  std::printf("%s: peak %llu MiB\n", path.c_str(), static_cast<unsigned long long>(*peak / kMiB));
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.status().message(), HasSubstr(absl::StrCat("sharded checkpoint ", path, " is damaged")));
  EXPECT_THAT(read.status().message(),
              HasSubstr(absl::StrCat("model.copy0's size [", kBigElements, "] (", kBigElements * 4,
                                     " bytes) brings its tensors to ", 2 * kBigElements * 4, " bytes, more than")));
  EXPECT_THAT(read.status().message(), HasSubstr("bytes its files store"));
}

// Records of one file that overlap are refused: read once each, they could hold more than the file.
TEST(DistributedCheckpointTest, RecordsThatOverlapAreRefused) {
  const std::string path = testing::TempDir() + "/overlap.ckpt";
  ASSERT_NO_FATAL_FAILURE(WriteBig(path));
  ASSERT_NO_FATAL_FAILURE(EditIndex(path, [](GenericList& records) {
    NameBigsRangeAgain(records);
    GenericDict last = records.get(records.size() - 1).toGenericDict();
    last.insert_or_assign(IValue(std::string("offset")), IValue(last.at(IValue(std::string("offset"))).toInt() + 64));
    last.insert_or_assign(IValue(std::string("length")), IValue(last.at(IValue(std::string("length"))).toInt() - 64));
  }));
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(path);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.status().message(), HasSubstr("of __0_0.distcp overlap"));
}

// Two pieces of one tensor that overlap count as many elements as the tensor has while leaving some unfilled: the
// tensor would load with memory no record wrote. Rows of a 5-row tensor in two pieces, [0, 3) and [3, 5), the second
// moved up a row.
TEST(DistributedCheckpointTest, PiecesOfOneTensorThatOverlapAreRefused) {
  const std::string path = testing::TempDir() + "/pieces.ckpt";
  ASSERT_NO_FATAL_FAILURE(WriteAll(path, 2, 1.0f));
  ASSERT_TRUE(ReadCheckpoint(path).ok());
  bool moved = false;
  ASSERT_NO_FATAL_FAILURE(EditIndex(path, [&moved](GenericList& records) {
    for (size_t i = 0; i < records.size() && !moved; ++i) {
      GenericDict record = records.get(i).toGenericDict();
      if (!record.contains(IValue(std::string("offsets")))) continue;  // A value's record.
      const IValue offsets = record.at(IValue(std::string("offsets")));
      if (!offsets.isList() && !offsets.isIntList()) continue;
      std::vector<int64_t> up;
      for (const IValue& start : offsets.toListRef()) up.push_back(start.toInt());
      if (up.empty() || up[0] == 0) continue;
      up[0] -= 1;
      record.insert_or_assign(IValue(std::string("offsets")), IValue(up));
      moved = true;
    }
  }));
  ASSERT_TRUE(moved) << "no piece of a tensor starts past its first row";
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(path);
  ASSERT_FALSE(read.ok()) << "a tensor with rows no record wrote was read";
  EXPECT_THAT(read.status().message(), HasSubstr("overlap (at ["));
}

TEST(DistributedCheckpointTest, ARankThatFailsFailsEveryRankAndNothingIsPublished) {
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/failed.ckpt";
  const std::vector<absl::Status> statuses = WriteFromRanks(path, 3, [](int rank) -> absl::StatusOr<GenericDict> {
    if (rank == 1) return absl::InternalError("rank one's snapshot failed");
    return Contents(1.0f);
  });
  for (const absl::Status& status : statuses) {
    ASSERT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("rank 1: rank one's snapshot failed"));
  }
  EXPECT_TRUE(Listing(dir).empty()) << Listing(dir)[0];
}

// A 2 x 2 mesh (data parallel x tensor parallel) as model_parallel holds it: rank r at (r / 2, r % 2). "net.0.weight"
// (a column-parallel layer's, 4 x 6) is split by rows between the two tensor-parallel ranks, "net.0.bias" (a
// row-parallel layer's weight, 4 x 6 here) by columns; each slice is held alike by the two ranks of a data-parallel
// group; the first has momentum of the slice's shape; "count" is whole everywhere.
at::Tensor ColumnWhole() { return at::arange(24, at::kFloat).reshape({4, 6}); }
at::Tensor RowWhole() { return at::arange(24, at::kFloat).reshape({4, 6}) * -1.0f; }

GenericDict MeshContents(int rank) {
  const int tp = rank % 2;
  GenericDict state_dict = NewDict();
  state_dict.insert(IValue(std::string("net.0.weight")), IValue(ColumnWhole().narrow(0, tp * 2, 2).clone()));
  state_dict.insert(IValue(std::string("net.0.bias")), IValue(RowWhole().narrow(1, tp * 3, 3).clone()));
  state_dict.insert(IValue(std::string("count")), IValue(at::arange(5, at::kLong)));
  GenericDict momentum = NewDict();
  momentum.insert(IValue(std::string("momentum_buffer")), IValue(ColumnWhole().narrow(0, tp * 2, 2) * 0.5f));
  momentum.insert(IValue(std::string("step")), IValue(at::scalar_tensor(4.0)));
  GenericDict state = NewDict();
  state.insert(IValue(int64_t{0}), IValue(momentum));
  GenericDict contents = NewDict();
  contents.insert(IValue(std::string("state_dict")), IValue(state_dict));
  contents.insert(IValue(std::string("optimizer_states")), IValue(OptimizerStates(state, NewDict())));
  return contents;
}

std::unordered_map<std::string, ShardedPart> MeshParts(int rank) {
  const int tp = rank % 2;
  const int dp = rank / 2;
  return {{"net.0.weight", ShardedPart{.whole_sizes = {4, 6}, .sizes = {2, 6}, .offsets = {tp * 2, 0},
                                       .replica = dp, .replicas = 2}},
          {"net.0.bias", ShardedPart{.whole_sizes = {4, 6}, .sizes = {4, 3}, .offsets = {0, tp * 3},
                                     .replica = dp, .replicas = 2}}};
}

TEST(DistributedCheckpointTest, SlicesAreWrittenWhereTheyLieInTheWholeTensorsAndReadBackWhole) {
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/mesh.ckpt";
  for (const absl::Status& status : WriteFromRanks(path, 4, MeshContents, MeshParts)) ASSERT_TRUE(status.ok()) << status;
  // One rank reads the whole tensors the four slices' pieces make: every element written once (the reader refuses
  // pieces that overlap or leave a hole).
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(path);
  ASSERT_TRUE(read.ok()) << read.status();
  const GenericDict state_dict = read->contents.at(IValue(std::string("state_dict"))).toGenericDict();
  EXPECT_TRUE(state_dict.at(IValue(std::string("net.0.weight"))).toTensor().equal(ColumnWhole()));
  EXPECT_TRUE(state_dict.at(IValue(std::string("net.0.bias"))).toTensor().equal(RowWhole()));
  EXPECT_TRUE(state_dict.at(IValue(std::string("count"))).toTensor().equal(at::arange(5, at::kLong)));
  const GenericDict momentum = read->contents.at(IValue(std::string("optimizer_states")))
                                   .toListRef()[0]
                                   .toGenericDict()
                                   .at(IValue(std::string("state")))
                                   .toGenericDict()
                                   .at(IValue(int64_t{0}))
                                   .toGenericDict();
  EXPECT_TRUE(momentum.at(IValue(std::string("momentum_buffer"))).toTensor().equal(ColumnWhole() * 0.5f));
  EXPECT_EQ(momentum.at(IValue(std::string("step"))).toTensor().item<double>(), 4.0);
  // Each rank wrote a file: the two ranks of a data-parallel group split the rows of the slice they share.
  EXPECT_EQ(Listing(path), (std::vector<std::string>{".metadata", "__0_0.distcp", "__1_0.distcp", "__2_0.distcp",
                                                     "__3_0.distcp", "meta.pt"}));
}

TEST(DistributedCheckpointTest, PartsThatDisagreeAreRefusedAndNothingIsPublished) {
  const std::string dir = testing::TempDir();
  // Rank 3 claims the first tensor-parallel slice, as rank 2 does: rows 0-1 are written twice, rows 2-3 never.
  const auto wrong = [](int rank) {
    std::unordered_map<std::string, ShardedPart> parts = MeshParts(rank);
    if (rank == 3) parts["net.0.weight"].offsets = {0, 0};
    return parts;
  };
  std::vector<absl::Status> statuses = WriteFromRanks(dir + "/wrong.ckpt", 4, MeshContents, wrong);
  ASSERT_FALSE(statuses[0].ok());
  EXPECT_THAT(statuses[0].message(), HasSubstr("model.net.0.weight"));
  EXPECT_TRUE(Listing(dir).empty()) << Listing(dir)[0];
  // A part that does not lie within its whole tensor is refused by the rank that holds it, and so by every rank.
  const auto outside = [](int rank) {
    std::unordered_map<std::string, ShardedPart> parts = MeshParts(rank);
    if (rank == 1) parts["net.0.bias"].offsets = {0, 4};
    return parts;
  };
  statuses = WriteFromRanks(dir + "/outside.ckpt", 4, MeshContents, outside);
  for (const absl::Status& status : statuses) {
    ASSERT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("does not lie within the whole tensor [4, 6]"));
  }
  EXPECT_TRUE(Listing(dir).empty()) << Listing(dir)[0];
}

}  // namespace
}  // namespace kiln
