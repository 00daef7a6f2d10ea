// The sample plugin through its C API alone, as a plugin author tests one: dlopen the real shared library, take its
// function table, and call it with args structs built from kiln_plugin_c_api.h. No Kiln code is involved.
#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

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
  EXPECT_STREQ(info.process_group_backend, "gloo");
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

}  // namespace
