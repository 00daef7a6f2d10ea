// The sample plugin through its C API alone, as a plugin author tests one: dlopen the real shared library, take its
// function table, and call it with args structs built from kiln_plugin_c_api.h. No Kiln code is involved.
#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/plugin/kiln_plugin_c_api.h"

namespace {

constexpr char kPluginPath[] = "examples/sample_plugin/libkiln_sample_plugin.so";

const KILN_Plugin_Api& Api() {
  static const KILN_Plugin_Api* const api = [] {
    void* handle = dlopen(kPluginPath, RTLD_NOW | RTLD_LOCAL);
    EXPECT_NE(handle, nullptr) << dlerror();
    auto* entry = reinterpret_cast<KILN_GetPluginApi_Fn*>(dlsym(handle, KILN_PLUGIN_ENTRY_SYMBOL));
    EXPECT_NE(entry, nullptr) << "no " << KILN_PLUGIN_ENTRY_SYMBOL;
    return entry();
  }();
  return *api;
}

// Takes `error` (not null): its code and message, then destroys it through the plugin.
struct ErrorText {
  KILN_Error_Code code;
  std::string message;
};
ErrorText Consume(KILN_Error* error) {
  KILN_Error_Message_Args message{};
  message.struct_size = KILN_Error_Message_Args_STRUCT_SIZE;
  message.error = error;
  Api().Error_Message(&message);
  KILN_Error_GetCode_Args code{};
  code.struct_size = KILN_Error_GetCode_Args_STRUCT_SIZE;
  code.error = error;
  Api().Error_GetCode(&code);
  ErrorText text{code.code, std::string(message.message, message.message_size)};
  KILN_Error_Destroy_Args destroy{};
  destroy.struct_size = KILN_Error_Destroy_Args_STRUCT_SIZE;
  destroy.error = error;
  Api().Error_Destroy(&destroy);
  return text;
}

void Initialize() {
  KILN_Plugin_Initialize_Args args{};
  args.struct_size = KILN_Plugin_Initialize_Args_STRUCT_SIZE;
  KILN_Error* error = Api().Plugin_Initialize(&args);
  ASSERT_EQ(error, nullptr) << Consume(error).message;
}

KILN_Plugin_Info_Args Info() {
  KILN_Plugin_Info_Args args{};
  args.struct_size = KILN_Plugin_Info_Args_STRUCT_SIZE;
  KILN_Error* error = Api().Plugin_Info(&args);
  EXPECT_EQ(error, nullptr) << Consume(error).message;
  return args;
}

std::map<std::string, double> Stats() {
  KILN_Device_Stat buffer[8] = {};
  KILN_Device_Stats_Args args{};
  args.struct_size = KILN_Device_Stats_Args_STRUCT_SIZE;
  args.device_index = 0;
  args.stats = buffer;
  args.stats_capacity = 8;
  KILN_Error* error = Api().Device_Stats(&args);
  EXPECT_EQ(error, nullptr) << Consume(error).message;
  std::map<std::string, double> stats;
  for (size_t i = 0; i < args.num_stats && i < 8; ++i) stats[buffer[i].name] = buffer[i].value;
  return stats;
}

TEST(SamplePluginTest, ReportsTheVersionItWasBuiltAgainst) {
  EXPECT_EQ(Api().struct_size, static_cast<size_t>(KILN_Plugin_Api_STRUCT_SIZE));
  EXPECT_EQ(Api().major_version, KILN_PLUGIN_API_MAJOR);
  EXPECT_EQ(Api().minor_version, KILN_PLUGIN_API_MINOR);
}

TEST(SamplePluginTest, DescribesItselfAsAProcessesOnTheCpuAccelerator) {
  ASSERT_EQ(::unsetenv("SAMPLE_PLUGIN_PRIORITY"), 0);
  Initialize();
  const KILN_Plugin_Info_Args info = Info();
  EXPECT_STREQ(info.name, "sample_plugin");
  ASSERT_EQ(info.num_aliases, 1u);
  EXPECT_STREQ(info.aliases[0], "sample");
  EXPECT_EQ(info.priority, -20);
  EXPECT_EQ(info.device_type, KILN_DEVICE_TYPE_CPU);
  EXPECT_EQ(info.device_numbering, KILN_DEVICE_NUMBERING_PROCESSES);
  EXPECT_STREQ(info.process_group_backend, "sample_ccl");
  const std::vector<KILN_Precision> precisions(info.precisions, info.precisions + info.num_precisions);
  EXPECT_EQ(precisions, (std::vector<KILN_Precision>{KILN_PRECISION_32_TRUE, KILN_PRECISION_64_TRUE,
                                                     KILN_PRECISION_BF16_MIXED, KILN_PRECISION_BF16_TRUE}));
  EXPECT_FALSE(info.visibility_hint_is_set);
}

TEST(SamplePluginTest, ItsPriorityComesFromTheEnvironmentAndABadValueFailsInitialisation) {
  ASSERT_EQ(::setenv("SAMPLE_PLUGIN_PRIORITY", "high", 1), 0);
  KILN_Plugin_Initialize_Args args{};
  args.struct_size = KILN_Plugin_Initialize_Args_STRUCT_SIZE;
  KILN_Error* error = Api().Plugin_Initialize(&args);
  ASSERT_NE(error, nullptr);
  const ErrorText text = Consume(error);
  EXPECT_EQ(text.code, KILN_ERROR_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(text.message,
            "sample_plugin: SAMPLE_PLUGIN_PRIORITY='high' is not an integer; set it to a priority such as 100 (above "
            "every built-in accelerator), or unset it for -20");

  ASSERT_EQ(::setenv("SAMPLE_PLUGIN_PRIORITY", "100", 1), 0);
  Initialize();
  EXPECT_EQ(Info().priority, 100);
  ASSERT_EQ(::unsetenv("SAMPLE_PLUGIN_PRIORITY"), 0);
}

TEST(SamplePluginTest, RefusesAnArgsStructShorterThanItsFields) {
  // A caller built against a header whose KILN_Device_Setup_Args ends before device_index.
  KILN_Device_Setup_Args args{};
  args.struct_size = offsetof(KILN_Device_Setup_Args, device_index);
  KILN_Error* error = Api().Device_Setup(&args);
  ASSERT_NE(error, nullptr);
  const ErrorText text = Consume(error);
  EXPECT_EQ(text.code, KILN_ERROR_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(text.message,
            "sample_plugin: KILN_Device_Setup_Args is 8 bytes, but plugin API 1.0 defines 12: the "
            "caller was built against a modified header");
  // A larger struct, from a caller built against a newer minor version, is fine: the plugin ignores the rest.
  struct Larger {
    KILN_Device_Setup_Args args;
    int64_t added_later;
  } larger{};
  larger.args.struct_size = sizeof(Larger);
  larger.args.device_index = 0;
  EXPECT_EQ(Api().Device_Setup(&larger.args), nullptr);
  KILN_Device_Teardown_Args teardown{};
  teardown.struct_size = KILN_Device_Teardown_Args_STRUCT_SIZE;
  EXPECT_EQ(Api().Device_Teardown(&teardown), nullptr);
}

TEST(SamplePluginTest, StatisticsCountSetUpAndTearDown) {
  Initialize();
  const std::map<std::string, double> before = Stats();
  ASSERT_EQ(before.count("setup_calls"), 1u);
  ASSERT_EQ(before.count("devices_set_up"), 1u);
  ASSERT_GT(before.count("process_rss_bytes"), 0u) << "/proc/self/statm is readable here";
  EXPECT_GT(before.at("process_rss_bytes"), 1 << 20);

  KILN_Device_Setup_Args setup{};
  setup.struct_size = KILN_Device_Setup_Args_STRUCT_SIZE;
  ASSERT_EQ(Api().Device_Setup(&setup), nullptr);
  std::map<std::string, double> during = Stats();
  EXPECT_EQ(during.at("setup_calls"), before.at("setup_calls") + 1);
  EXPECT_EQ(during.at("devices_set_up"), before.at("devices_set_up") + 1);

  KILN_Device_Teardown_Args teardown{};
  teardown.struct_size = KILN_Device_Teardown_Args_STRUCT_SIZE;
  ASSERT_EQ(Api().Device_Teardown(&teardown), nullptr);
  std::map<std::string, double> after = Stats();
  EXPECT_EQ(after.at("teardown_calls"), before.at("teardown_calls") + 1);
  EXPECT_EQ(after.at("devices_set_up"), before.at("devices_set_up"));
}

TEST(SamplePluginTest, StatisticsFillOnlyTheCallersBuffer) {
  KILN_Device_Stat one[1] = {};
  KILN_Device_Stats_Args args{};
  args.struct_size = KILN_Device_Stats_Args_STRUCT_SIZE;
  args.stats = one;
  args.stats_capacity = 1;
  ASSERT_EQ(Api().Device_Stats(&args), nullptr);
  EXPECT_GE(args.num_stats, 3u);  // It has more than fit: the caller asks again with room for num_stats.
  EXPECT_STREQ(one[0].name, "setup_calls");

  KILN_Device_Stats_Args count_only{};
  count_only.struct_size = KILN_Device_Stats_Args_STRUCT_SIZE;
  ASSERT_EQ(Api().Device_Stats(&count_only), nullptr);
  EXPECT_EQ(count_only.num_stats, args.num_stats);
}

TEST(SamplePluginTest, EachProcessHasOneDeviceIndexZero) {
  KILN_Device_Stats_Args args{};
  args.struct_size = KILN_Device_Stats_Args_STRUCT_SIZE;
  args.device_index = 1;
  KILN_Error* error = Api().Device_Stats(&args);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(Consume(error).message, "sample_plugin: has no device 1; each process has one device, index 0");

  KILN_Devices_Count_Args count{};
  count.struct_size = KILN_Devices_Count_Args_STRUCT_SIZE;
  ASSERT_EQ(Api().Devices_Count(&count), nullptr);
  EXPECT_EQ(count.count, 1);
  EXPECT_FALSE(count.auto_count_is_set);
  KILN_Devices_CheckAvailable_Args available{};
  available.struct_size = KILN_Devices_CheckAvailable_Args_STRUCT_SIZE;
  EXPECT_EQ(Api().Devices_CheckAvailable(&available), nullptr);
}

TEST(SamplePluginTest, SubstitutesBf16MixedFor16Mixed) {
  KILN_Precision_Substitute_Args args{};
  args.struct_size = KILN_Precision_Substitute_Args_STRUCT_SIZE;
  args.requested = KILN_PRECISION_16_MIXED;
  ASSERT_EQ(Api().Precision_Substitute(&args), nullptr);
  ASSERT_TRUE(args.substitute_is_set);
  EXPECT_EQ(args.substitute, KILN_PRECISION_BF16_MIXED);
  EXPECT_NE(std::string(args.warning).find("Using `precision='bf16-mixed'` instead."), std::string::npos);

  args.requested = KILN_PRECISION_16_TRUE;
  ASSERT_EQ(Api().Precision_Substitute(&args), nullptr);
  EXPECT_FALSE(args.substitute_is_set);
}

// ---- sample_ccl, the plugin's collectives (plugin API 1.1), with each rank a thread of this process.

using ::testing::HasSubstr;

TEST(SamplePluginTest, OffersAllEightCollectives) {
  const KILN_Plugin_Api& api = Api();
  ASSERT_GE(api.minor_version, 1);
  EXPECT_NE(api.Collectives_GetUniqueId, nullptr);
  EXPECT_NE(api.Collectives_CommInit, nullptr);
  EXPECT_NE(api.Collectives_CommDestroy, nullptr);
  EXPECT_NE(api.Collectives_AllReduce, nullptr);
  EXPECT_NE(api.Collectives_Broadcast, nullptr);
  EXPECT_NE(api.Collectives_AllGather, nullptr);
  EXPECT_NE(api.Collectives_ReduceScatter, nullptr);
  EXPECT_NE(api.Collectives_Barrier, nullptr);
}

// Runs `body(rank)` on `world` threads at once and waits for them.
void OnEveryRank(int world, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) threads.emplace_back(body, rank);
  for (std::thread& thread : threads) thread.join();
}

KILN_Collectives_GetUniqueId_Args UniqueId() {
  KILN_Collectives_GetUniqueId_Args id{};
  id.struct_size = KILN_Collectives_GetUniqueId_Args_STRUCT_SIZE;
  KILN_Error* error = Api().Collectives_GetUniqueId(&id);
  EXPECT_EQ(error, nullptr) << Consume(error).message;
  return id;
}

// CommInit for `rank` of `world` with `id`; the error, or NULL with the communicator in `*comm`.
KILN_Error* Join(const KILN_Collectives_GetUniqueId_Args& id, int rank, int world, int64_t timeout_ms,
                 KILN_Communicator** comm) {
  KILN_Collectives_CommInit_Args init{};
  init.struct_size = KILN_Collectives_CommInit_Args_STRUCT_SIZE;
  std::memcpy(init.unique_id, id.unique_id, id.unique_id_size);
  init.unique_id_size = id.unique_id_size;
  init.rank = rank;
  init.world_size = world;
  init.device_index = 0;
  init.timeout_ms = timeout_ms;
  KILN_Error* error = Api().Collectives_CommInit(&init);
  *comm = init.communicator;
  return error;
}

// A communicator for every rank of `world`, joined on threads.
std::vector<KILN_Communicator*> Communicators(int world, int64_t timeout_ms = 20000) {
  const KILN_Collectives_GetUniqueId_Args id = UniqueId();
  std::vector<KILN_Communicator*> comms(world, nullptr);
  OnEveryRank(world, [&](int rank) {
    KILN_Error* error = Join(id, rank, world, timeout_ms, &comms[rank]);
    EXPECT_EQ(error, nullptr) << Consume(error).message;
  });
  return comms;
}

void Destroy(KILN_Communicator* comm) {
  KILN_Collectives_CommDestroy_Args args{};
  args.struct_size = KILN_Collectives_CommDestroy_Args_STRUCT_SIZE;
  args.communicator = comm;
  EXPECT_EQ(Api().Collectives_CommDestroy(&args), nullptr);
}

KILN_Error* AllReduce(KILN_Communicator* comm, const void* send, void* recv, size_t count, KILN_Data_Type type,
                      KILN_Reduce_Op op) {
  KILN_Collectives_AllReduce_Args args{};
  args.struct_size = KILN_Collectives_AllReduce_Args_STRUCT_SIZE;
  args.communicator = comm;
  args.send_buffer = send;
  args.recv_buffer = recv;
  args.count = count;
  args.data_type = type;
  args.op = op;
  return Api().Collectives_AllReduce(&args);
}

// Every collective, every supported type's arithmetic, on `world` ranks.
void CheckCollectivesOn(int world) {
  std::vector<KILN_Communicator*> comms = Communicators(world);
  OnEveryRank(world, [&](int rank) {
    KILN_Communicator* comm = comms[rank];
    SCOPED_TRACE(rank);
    const auto ok = [](KILN_Error* error) { EXPECT_EQ(error, nullptr) << Consume(error).message; };
    // Sums in place (send and receive alias), over rank order.
    std::vector<float> sums = {static_cast<float>(rank + 1), 0.5f};
    ok(AllReduce(comm, sums.data(), sums.data(), 2, KILN_DATA_TYPE_FLOAT32, KILN_REDUCE_OP_SUM));
    EXPECT_EQ(sums, (std::vector<float>{world * (world + 1) / 2.0f, 0.5f * world}));
    const double factor = rank + 2.0;
    double product = 0;
    ok(AllReduce(comm, &factor, &product, 1, KILN_DATA_TYPE_FLOAT64, KILN_REDUCE_OP_PRODUCT));
    double expected_product = 1;
    for (int r = 0; r < world; ++r) expected_product *= r + 2.0;
    EXPECT_EQ(product, expected_product);
    const int32_t mine = rank == 1 ? 7 : -rank;
    int32_t max = 0;
    ok(AllReduce(comm, &mine, &max, 1, KILN_DATA_TYPE_INT32, KILN_REDUCE_OP_MAX));
    EXPECT_EQ(max, world > 1 ? 7 : 0);
    const int64_t big = (int64_t{1} << 40) * (rank + 1);
    int64_t min = 0;
    ok(AllReduce(comm, &big, &min, 1, KILN_DATA_TYPE_INT64, KILN_REDUCE_OP_MIN));
    EXPECT_EQ(min, int64_t{1} << 40);
    const int8_t hundred = 100;  // Sums wrap, as int8 does.
    int8_t wrapped = 0;
    ok(AllReduce(comm, &hundred, &wrapped, 1, KILN_DATA_TYPE_INT8, KILN_REDUCE_OP_SUM));
    EXPECT_EQ(wrapped, static_cast<int8_t>(static_cast<uint8_t>(100 * world)));
    const uint8_t byte = static_cast<uint8_t>(200 + rank);
    uint8_t byte_max = 0;
    ok(AllReduce(comm, &byte, &byte_max, 1, KILN_DATA_TYPE_UINT8, KILN_REDUCE_OP_MAX));
    EXPECT_EQ(byte_max, 200 + world - 1);
    const bool only_last = rank == world - 1;
    bool any = false;
    bool all = true;
    ok(AllReduce(comm, &only_last, &any, 1, KILN_DATA_TYPE_BOOL, KILN_REDUCE_OP_SUM));
    ok(AllReduce(comm, &only_last, &all, 1, KILN_DATA_TYPE_BOOL, KILN_REDUCE_OP_MIN));
    EXPECT_TRUE(any);
    EXPECT_EQ(all, world == 1);
    const uint16_t one_and_a_half = 0x3fc0;  // bfloat16 1.5; world * 1.5 is exact in bfloat16 for small worlds.
    uint16_t bf16_sum = 0;
    ok(AllReduce(comm, &one_and_a_half, &bf16_sum, 1, KILN_DATA_TYPE_BFLOAT16, KILN_REDUCE_OP_SUM));
    float as_float;
    const uint32_t bits = static_cast<uint32_t>(bf16_sum) << 16;
    std::memcpy(&as_float, &bits, sizeof(as_float));
    EXPECT_EQ(as_float, 1.5f * world);

    // Broadcast from the last rank.
    std::vector<int64_t> values = {rank == world - 1 ? 42 : -1, rank == world - 1 ? 43 : -1};
    KILN_Collectives_Broadcast_Args broadcast{};
    broadcast.struct_size = KILN_Collectives_Broadcast_Args_STRUCT_SIZE;
    broadcast.communicator = comm;
    broadcast.buffer = values.data();
    broadcast.count = 2;
    broadcast.data_type = KILN_DATA_TYPE_INT64;
    broadcast.root = world - 1;
    ok(Api().Collectives_Broadcast(&broadcast));
    EXPECT_EQ(values, (std::vector<int64_t>{42, 43}));

    // All-gather in rank order.
    const std::vector<int32_t> two = {rank, 10 * rank};
    std::vector<int32_t> gathered(2 * world, -1);
    KILN_Collectives_AllGather_Args gather{};
    gather.struct_size = KILN_Collectives_AllGather_Args_STRUCT_SIZE;
    gather.communicator = comm;
    gather.send_buffer = two.data();
    gather.recv_buffer = gathered.data();
    gather.count = 2;
    gather.data_type = KILN_DATA_TYPE_INT32;
    ok(Api().Collectives_AllGather(&gather));
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(gathered[2 * r], r);
      EXPECT_EQ(gathered[2 * r + 1], 10 * r);
    }

    // Reduce-scatter: rank q sends i + q for i < 2 * world; rank r keeps the sums of elements 2r and 2r + 1.
    std::vector<double> contributions(2 * world);
    for (int i = 0; i < 2 * world; ++i) contributions[i] = i + rank;
    std::vector<double> scattered(2, -1);
    KILN_Collectives_ReduceScatter_Args scatter{};
    scatter.struct_size = KILN_Collectives_ReduceScatter_Args_STRUCT_SIZE;
    scatter.communicator = comm;
    scatter.send_buffer = contributions.data();
    scatter.recv_buffer = scattered.data();
    scatter.count = 2;
    scatter.data_type = KILN_DATA_TYPE_FLOAT64;
    scatter.op = KILN_REDUCE_OP_SUM;
    ok(Api().Collectives_ReduceScatter(&scatter));
    const double offsets = world * (world - 1) / 2.0;
    EXPECT_EQ(scattered, (std::vector<double>{2.0 * rank * world + offsets, (2.0 * rank + 1) * world + offsets}));

    KILN_Collectives_Barrier_Args barrier{};
    barrier.struct_size = KILN_Collectives_Barrier_Args_STRUCT_SIZE;
    barrier.communicator = comm;
    ok(Api().Collectives_Barrier(&barrier));
  });
  for (KILN_Communicator* comm : comms) Destroy(comm);
}

TEST(SamplePluginTest, CollectivesGiveTheRightResultsOnOneTwoAndFourRanks) {
  for (int world : {1, 2, 4}) {
    SCOPED_TRACE(world);
    CheckCollectivesOn(world);
  }
}

TEST(SamplePluginTest, AnUnsupportedTypeIsUnimplementedNamingItAndTheCommunicatorStillWorks) {
  std::vector<KILN_Communicator*> comms = Communicators(1);
  const uint16_t half = 0x3c00;
  uint16_t out = 0;
  KILN_Error* error = AllReduce(comms[0], &half, &out, 1, KILN_DATA_TYPE_FLOAT16, KILN_REDUCE_OP_SUM);
  ASSERT_NE(error, nullptr);
  const ErrorText text = Consume(error);
  EXPECT_EQ(text.code, KILN_ERROR_CODE_UNIMPLEMENTED);
  EXPECT_THAT(text.message, HasSubstr("sample_ccl AllReduce: data type FLOAT16 is not supported"));
  const float one = 1;
  float sum = 0;
  EXPECT_EQ(AllReduce(comms[0], &one, &sum, 1, KILN_DATA_TYPE_FLOAT32, KILN_REDUCE_OP_SUM), nullptr);
  EXPECT_EQ(sum, 1);
  Destroy(comms[0]);
}

TEST(SamplePluginTest, ARankThatNeverJoinsIsDeadlineExceededNamingIt) {
  const KILN_Collectives_GetUniqueId_Args id = UniqueId();
  KILN_Communicator* comm = nullptr;
  const auto start = std::chrono::steady_clock::now();
  KILN_Error* error = Join(id, /*rank=*/0, /*world=*/3, /*timeout_ms=*/300, &comm);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(comm, nullptr);
  const ErrorText text = Consume(error);
  EXPECT_EQ(text.code, KILN_ERROR_CODE_DEADLINE_EXCEEDED);
  EXPECT_THAT(text.message, HasSubstr("sample_ccl CommInit: rank(s) 1, 2 of 3 did not join rank 0 within the "
                                      "timeout of 300 ms"));
  EXPECT_LT(seconds, 5);
}

TEST(SamplePluginTest, ARankThatStopsCallingIsDeadlineExceededOnEveryRankNamingItAndTheCall) {
  // Ranks 0 and 1 all-reduce; rank 2 joined but never calls. Rank 0 names rank 2; rank 1 reports rank 0's verdict.
  std::vector<KILN_Communicator*> comms = Communicators(3, /*timeout_ms=*/500);
  std::vector<ErrorText> errors(2);
  const auto start = std::chrono::steady_clock::now();
  OnEveryRank(2, [&](int rank) {
    const float one = 1;
    float sum = 0;
    KILN_Error* error = AllReduce(comms[rank], &one, &sum, 1, KILN_DATA_TYPE_FLOAT32, KILN_REDUCE_OP_SUM);
    ASSERT_NE(error, nullptr);
    errors[rank] = Consume(error);
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5);
  for (const ErrorText& error : errors) {
    EXPECT_EQ(error.code, KILN_ERROR_CODE_DEADLINE_EXCEEDED);
    EXPECT_THAT(error.message, HasSubstr("sample_ccl AllReduce: rank 2 did not arrive within the timeout of 500 ms"));
  }
  EXPECT_THAT(errors[1].message, HasSubstr("rank 0 reports: "));
  // The communicator is broken now: a later call fails at once, saying why.
  const float one = 1;
  float sum = 0;
  KILN_Error* again = AllReduce(comms[0], &one, &sum, 1, KILN_DATA_TYPE_FLOAT32, KILN_REDUCE_OP_SUM);
  ASSERT_NE(again, nullptr);
  EXPECT_THAT(Consume(again).message, HasSubstr("the communicator is broken by an earlier error"));
  for (KILN_Communicator* comm : comms) Destroy(comm);
}

TEST(SamplePluginTest, ARankThatIsGoneIsUnavailableAtOnce) {
  std::vector<KILN_Communicator*> comms = Communicators(2, /*timeout_ms=*/20000);
  Destroy(comms[1]);  // Its connection closes, as when its process dies.
  const float one = 1;
  float sum = 0;
  const auto start = std::chrono::steady_clock::now();
  KILN_Error* error = AllReduce(comms[0], &one, &sum, 1, KILN_DATA_TYPE_FLOAT32, KILN_REDUCE_OP_SUM);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_NE(error, nullptr);
  const ErrorText text = Consume(error);
  EXPECT_EQ(text.code, KILN_ERROR_CODE_UNAVAILABLE);
  EXPECT_THAT(text.message, HasSubstr("sample_ccl AllReduce: the connection to rank 1 was closed"));
  EXPECT_LT(seconds, 5) << "not the 20 s timeout";
  Destroy(comms[0]);
}

TEST(SamplePluginTest, RanksThatMakeDifferentCallsAreAnError) {
  std::vector<KILN_Communicator*> comms = Communicators(2);
  std::vector<ErrorText> errors(2);
  OnEveryRank(2, [&](int rank) {
    const double values[2] = {1, 2};
    double sums[2] = {};
    KILN_Error* error = AllReduce(comms[rank], values, sums, rank + 1, KILN_DATA_TYPE_FLOAT64, KILN_REDUCE_OP_SUM);
    ASSERT_NE(error, nullptr);
    errors[rank] = Consume(error);
  });
  for (const ErrorText& error : errors) {
    EXPECT_EQ(error.code, KILN_ERROR_CODE_INVALID_ARGUMENT);
    EXPECT_THAT(error.message, HasSubstr("rank 1 made another call than rank 0"));
  }
  for (KILN_Communicator* comm : comms) Destroy(comm);
}

TEST(SamplePluginTest, CommInitRefusesAnIdThatIsNotSampleCcls) {
  KILN_Collectives_GetUniqueId_Args id{};
  std::memcpy(id.unique_id, "nccl-id", 7);
  id.unique_id_size = 7;
  KILN_Communicator* comm = nullptr;
  KILN_Error* error = Join(id, 1, 2, 1000, &comm);
  ASSERT_NE(error, nullptr);
  const ErrorText text = Consume(error);
  EXPECT_EQ(text.code, KILN_ERROR_CODE_INVALID_ARGUMENT);
  EXPECT_THAT(text.message, HasSubstr("the unique id is not one of sample_ccl's ('nccl-id')"));
}

}  // namespace
