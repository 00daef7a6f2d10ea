/* Accelerator plugins for the loader's tests, written in C against kiln_plugin_c_api.h alone (which also shows the
 * header is plain C). One source, built into one shared library per variant (hal/plugin/BUILD); the variant is
 * chosen by a TEST_PLUGIN_* define:
 *
 *   TEST_PLUGIN_INDEXED         a well-formed plugin built against header 1.1, "test_indexed": 3 PrivateUse1
 *                               devices, indexed, "auto" = 1, 40 statistics (more than the loader's first buffer);
 *                               as a 1.1 plugin it would register its device when loaded, which this one (in C)
 *                               cannot, so its device is never available
 *   TEST_PLUGIN_WRONG_MAJOR     reports major version KILN_PLUGIN_API_MAJOR + 1
 *   TEST_PLUGIN_MISSING_SYMBOL  exports its table under another name than KILN_GetPluginApi
 *   TEST_PLUGIN_NULL_ENTRY      KILN_GetPluginApi returns NULL
 *   TEST_PLUGIN_SHORT_API       struct_size stops after Device_Teardown while claiming the current version
 *   TEST_PLUGIN_NULL_FUNCTION   Device_Stats is NULL
 *   TEST_PLUGIN_INIT_ERROR      Plugin_Initialize fails
 *   TEST_PLUGIN_INFO_ERROR      Plugin_Info fails
 *   TEST_PLUGIN_BAD_INFO        Plugin_Info leaves device_type unset (0)
 *   TEST_PLUGIN_FAILING         "test_failing": 1.2, device "test_failing_npu"; loads, but counting, availability,
 *                               registration, set-up, tear-down, statistics and substitutes all fail
 *   TEST_PLUGIN_V1_0            "test_v1_0": a plugin built against header 1.0: minor version 0, and a function
 *                               table that ends after Precision_Substitute (what a 1.0 build's struct_size says)
 *   TEST_PLUGIN_COLLECTIVES     "test_ccl": 1.1 with all eight collectives, process group backend "test_ccl";
 *                               its unique id is "test-id", and Collectives_CommInit fails with UNAVAILABLE
 *                               (no fabric), so that Kiln's handling of a plugin's CCL error can be seen
 *   TEST_PLUGIN_PARTIAL_COLLECTIVES  1.1 with collectives but Collectives_ReduceScatter and Collectives_Barrier NULL
 *   TEST_PLUGIN_V1_2            "test_v1_2": 1.2, device "test_npu", whose Device_Register counts its calls (the
 *                               statistic "register_calls") and returns success, though a plugin in C registers
 *                               nothing with LibTorch: how Kiln's check after Device_Register, and its calling it at
 *                               most once, are seen (examples/device_plugin registers for real)
 *   TEST_PLUGIN_NO_DEVICE_NAME      1.2 and PrivateUse1, with Device_Register but no device_name
 *   TEST_PLUGIN_BAD_DEVICE_NAME     1.2 and PrivateUse1, device_name "Test NPU"
 *   TEST_PLUGIN_NO_DEVICE_REGISTER  1.2 and PrivateUse1, with device_name "test_npu" but Device_Register NULL
 *   TEST_PLUGIN_GLOO_WITHOUT_COLLECTIVES  1.2 and PrivateUse1, without collectives, process group backend "gloo"
 *   TEST_PLUGIN_LACKING_COLLECTIVES  "test_ccl" of TEST_PLUGIN_COLLECTIVES at the header's own version (1.3 or later),
 *                               a PrivateUse1 device "test_npu", declaring that its CCL has no reduce-scatter
 *                               (collectives_lacking)
 *   TEST_PLUGIN_LARGE_TABLES    "test_large_tables" (as TEST_PLUGIN_LACKING_COLLECTIVES, without collectives), whose
 *                               tables are as large as the environment variable TEST_PLUGIN_TABLES says, read at
 *                               each call: "aliases", 4096 aliases that all point to one 64 KiB string; "long_names",
 *                               4096 statistics whose names are distinct suffixes of one 68 KiB string (each over
 *                               64 KiB); "names", 4096 statistics with distinct names of 1 to 4096 bytes (suffixes of
 *                               one 8 KiB string); anything else, the tables of TEST_PLUGIN_INDEXED
 *
 * Variants not named 1.0, 1.1 or 1.2 above report the header's own version.
 *
 * Every function checks the caller's struct_size first, as the header asks of plugins. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/plugin/kiln_plugin_c_api.h"

/* Some variants leave a definition unused. */
#define MAYBE_UNUSED __attribute__((unused))

/* The minor version the variant reports, and the size of its function table: that of the header it was built
 * against. */
#if defined(TEST_PLUGIN_V1_0)
#define TEST_PLUGIN_MINOR 0
#define TEST_PLUGIN_API_SIZE KILN_STRUCT_SIZE(KILN_Plugin_Api, Precision_Substitute)
#elif defined(TEST_PLUGIN_INDEXED) || defined(TEST_PLUGIN_COLLECTIVES) || defined(TEST_PLUGIN_PARTIAL_COLLECTIVES)
#define TEST_PLUGIN_MINOR 1
#define TEST_PLUGIN_API_SIZE KILN_STRUCT_SIZE(KILN_Plugin_Api, Collectives_Barrier)
#elif defined(TEST_PLUGIN_V1_2) || defined(TEST_PLUGIN_NO_DEVICE_NAME) || defined(TEST_PLUGIN_BAD_DEVICE_NAME) || \
    defined(TEST_PLUGIN_NO_DEVICE_REGISTER) || defined(TEST_PLUGIN_GLOO_WITHOUT_COLLECTIVES) ||         \
    defined(TEST_PLUGIN_FAILING)
#define TEST_PLUGIN_MINOR 2
#define TEST_PLUGIN_API_SIZE KILN_STRUCT_SIZE(KILN_Plugin_Api, Device_Register)
#elif defined(TEST_PLUGIN_SHORT_API)
#define TEST_PLUGIN_MINOR KILN_PLUGIN_API_MINOR
#define TEST_PLUGIN_API_SIZE KILN_STRUCT_SIZE(KILN_Plugin_Api, Device_Teardown)
#else
#define TEST_PLUGIN_MINOR KILN_PLUGIN_API_MINOR
#define TEST_PLUGIN_API_SIZE KILN_Plugin_Api_STRUCT_SIZE
#endif
#ifdef TEST_PLUGIN_LACKING_COLLECTIVES
#define TEST_PLUGIN_COLLECTIVES  /* Everything else as that variant's. */
#endif

struct KILN_Error {
  KILN_Error_Code code;
  char message[256];
};

static KILN_Error* MakeError(KILN_Error_Code code, const char* message) {
  KILN_Error* error = (KILN_Error*)malloc(sizeof(KILN_Error));
  if (error == NULL) return NULL; /* Out of memory: nothing better to report. */
  error->code = code;
  snprintf(error->message, sizeof(error->message), "%s", message);
  return error;
}

/* INVALID_ARGUMENT when the caller's struct is smaller than the fields this plugin uses. */
#define CHECK_ARGS(args, type)                                                                         \
  do {                                                                                                 \
    if ((args)->struct_size < type##_STRUCT_SIZE) {                                                    \
      char message[200];                                                                               \
      snprintf(message, sizeof(message), "test plugin: " #type " is %zu bytes, expected at least %zu", \
               (args)->struct_size, (size_t)type##_STRUCT_SIZE);                                       \
      return MakeError(KILN_ERROR_CODE_INVALID_ARGUMENT, message);                                     \
    }                                                                                                  \
  } while (0)

static void ErrorDestroy(KILN_Error_Destroy_Args* args) { free(args->error); }

static void ErrorMessage(KILN_Error_Message_Args* args) {
  args->message = args->error->message;
  args->message_size = strlen(args->error->message);
}

static void ErrorGetCode(KILN_Error_GetCode_Args* args) { args->code = args->error->code; }

enum { kDevices = 3, kStats = 40 };
static char stat_names[kStats][16];

#ifdef TEST_PLUGIN_LARGE_TABLES
enum { kLargeCount = 4096, kLargeString = 64 << 10 };
static char* large_string; /* kLargeString + kLargeCount bytes of 'a', then a NUL. */
static const char** large_aliases;

static int TablesAre(const char* mode) {
  const char* tables = getenv("TEST_PLUGIN_TABLES");
  return tables != NULL && strcmp(tables, mode) == 0;
}
#endif

static KILN_Error* PluginInitialize(KILN_Plugin_Initialize_Args* args) {
  CHECK_ARGS(args, KILN_Plugin_Initialize_Args);
#ifdef TEST_PLUGIN_INIT_ERROR
  return MakeError(KILN_ERROR_CODE_FAILED_PRECONDITION,
                   "the test driver libtestdriver.so.1 is not installed; install it and try again");
#else
  for (int i = 0; i < kStats; ++i) snprintf(stat_names[i], sizeof(stat_names[i]), "stat_%02d", i);
#ifdef TEST_PLUGIN_LARGE_TABLES
  large_string = (char*)malloc(kLargeString + kLargeCount + 1);
  large_aliases = (const char**)malloc(kLargeCount * sizeof(const char*));
  if (large_string == NULL || large_aliases == NULL) return MakeError(KILN_ERROR_CODE_RESOURCE_EXHAUSTED, "no memory");
  memset(large_string, 'a', kLargeString + kLargeCount);
  large_string[kLargeString + kLargeCount] = '\0';
  for (int i = 0; i < kLargeCount; ++i) large_aliases[i] = large_string + kLargeCount; /* One 64 KiB string. */
#endif
  return NULL;
#endif
}

MAYBE_UNUSED static const char* const kAliases[] = {"test_alias"};
MAYBE_UNUSED static const KILN_Precision kPrecisions[] = {KILN_PRECISION_32_TRUE};

static KILN_Error* PluginInfo(KILN_Plugin_Info_Args* args) {
  CHECK_ARGS(args, KILN_Plugin_Info_Args);
#ifdef TEST_PLUGIN_INFO_ERROR
  return MakeError(KILN_ERROR_CODE_INTERNAL, "the test plugin's configuration file is corrupt");
#else
#if defined(TEST_PLUGIN_FAILING)
  args->name = "test_failing";
#elif defined(TEST_PLUGIN_V1_0)
  args->name = "test_v1_0";
#elif defined(TEST_PLUGIN_COLLECTIVES)
  args->name = "test_ccl";
#elif defined(TEST_PLUGIN_V1_2)
  args->name = "test_v1_2";
#elif defined(TEST_PLUGIN_LARGE_TABLES)
  args->name = "test_large_tables";
  if (TablesAre("aliases")) {
    args->aliases = large_aliases;
    args->num_aliases = kLargeCount;
  }
#else
  args->name = "test_indexed";
  args->aliases = kAliases;
  args->num_aliases = 1;
#endif
  args->description = "A test plugin from hal/plugin/testing/test_plugin.c.";
  args->priority = 7;
#ifndef TEST_PLUGIN_BAD_INFO
  args->device_type = KILN_DEVICE_TYPE_PRIVATEUSE1;
#endif
  args->device_numbering = KILN_DEVICE_NUMBERING_INDEXED;
#if defined(TEST_PLUGIN_COLLECTIVES)
  args->process_group_backend = "test_ccl";
#elif TEST_PLUGIN_MINOR >= 2 && !defined(TEST_PLUGIN_GLOO_WITHOUT_COLLECTIVES)
  args->process_group_backend = "test_staged"; /* A 1.2 PRIVATEUSE1 plugin's staged collectives, not "gloo". */
#else
  args->process_group_backend = "gloo";
#endif
  args->precisions = kPrecisions;
  args->num_precisions = 1;
  args->visibility_hint_is_set = true;
  args->visibility_hint = "TEST_PLUGIN_DEVICES=3";
#if defined(TEST_PLUGIN_FAILING)
  args->device_name = "test_failing_npu";
#elif defined(TEST_PLUGIN_BAD_DEVICE_NAME)
  args->device_name = "Test NPU";
#elif TEST_PLUGIN_MINOR >= 2 && !defined(TEST_PLUGIN_NO_DEVICE_NAME)
  args->device_name = "test_npu";
#endif
#ifdef TEST_PLUGIN_LACKING_COLLECTIVES
  args->collectives_lacking = KILN_COLLECTIVE_REDUCE_SCATTER;
#endif
  return NULL;
#endif
}

#ifdef TEST_PLUGIN_FAILING
#define FAIL_HERE(what) return MakeError(KILN_ERROR_CODE_UNAVAILABLE, "the test device is on fire (" what ")")
#else
#define FAIL_HERE(what) (void)0
#endif

static KILN_Error* CheckIndex(int32_t index) {
  if (index < 0 || index >= kDevices) {
    char message[120];
    snprintf(message, sizeof(message), "test plugin has no device %d; it has devices 0 to %d", index, kDevices - 1);
    return MakeError(KILN_ERROR_CODE_INVALID_ARGUMENT, message);
  }
  return NULL;
}

static KILN_Error* DevicesCount(KILN_Devices_Count_Args* args) {
  CHECK_ARGS(args, KILN_Devices_Count_Args);
  FAIL_HERE("Devices_Count");
  args->count = kDevices;
  args->auto_count_is_set = true;
  args->auto_count = 1;
  return NULL;
}

static KILN_Error* DevicesCheckAvailable(KILN_Devices_CheckAvailable_Args* args) {
  CHECK_ARGS(args, KILN_Devices_CheckAvailable_Args);
  FAIL_HERE("Devices_CheckAvailable");
  return NULL;
}

static KILN_Error* DeviceSetup(KILN_Device_Setup_Args* args) {
  CHECK_ARGS(args, KILN_Device_Setup_Args);
  FAIL_HERE("Device_Setup");
  return CheckIndex(args->device_index);
}

static KILN_Error* DeviceTeardown(KILN_Device_Teardown_Args* args) {
  CHECK_ARGS(args, KILN_Device_Teardown_Args);
  FAIL_HERE("Device_Teardown");
  return CheckIndex(args->device_index);
}

static int register_calls = 0;

MAYBE_UNUSED static KILN_Error* DeviceRegister(KILN_Device_Register_Args* args) {
  CHECK_ARGS(args, KILN_Device_Register_Args);
  FAIL_HERE("Device_Register");
  ++register_calls;
  return NULL;
}

MAYBE_UNUSED static KILN_Error* DeviceStats(KILN_Device_Stats_Args* args) {
  CHECK_ARGS(args, KILN_Device_Stats_Args);
  FAIL_HERE("Device_Stats");
  KILN_Error* error = CheckIndex(args->device_index);
  if (error != NULL) return error;
#ifdef TEST_PLUGIN_V1_2
  args->num_stats = 1;
  if (args->stats_capacity >= 1) {
    args->stats[0].name = "register_calls";
    args->stats[0].value = (double)register_calls;
  }
#else
#ifdef TEST_PLUGIN_LARGE_TABLES
  if (TablesAre("long_names") || TablesAre("names")) {
    /* Suffixes of one string: distinct names, each over 64 KiB ("long_names") or of 1 to 4096 bytes ("names"). */
    const char* end = large_string + kLargeString + kLargeCount;
    args->num_stats = kLargeCount;
    for (size_t i = 0; i < kLargeCount && i < args->stats_capacity; ++i) {
      args->stats[i].name = TablesAre("names") ? end - kLargeCount + i : large_string + i;
      args->stats[i].value = (double)i;
    }
    return NULL;
  }
#endif
  args->num_stats = kStats;
  for (size_t i = 0; i < kStats && i < args->stats_capacity; ++i) {
    args->stats[i].name = stat_names[i];
    args->stats[i].value = (double)(args->device_index * 100 + (int)i);
  }
#endif
  return NULL;
}

static KILN_Error* PrecisionSubstitute(KILN_Precision_Substitute_Args* args) {
  CHECK_ARGS(args, KILN_Precision_Substitute_Args);
  FAIL_HERE("Precision_Substitute");
  if (args->requested == KILN_PRECISION_64_TRUE) {
    args->substitute_is_set = true;
    args->substitute = KILN_PRECISION_32_TRUE;
    args->warning = "test plugin: 64-true runs as 32-true";
  }
  return NULL;
}

/* The collectives (1.1): just enough for the loader's tests; a working CCL is examples/sample_plugin's. */
static const char kUniqueId[] = "test-id";

MAYBE_UNUSED static KILN_Error* GetUniqueId(KILN_Collectives_GetUniqueId_Args* args) {
  CHECK_ARGS(args, KILN_Collectives_GetUniqueId_Args);
  memcpy(args->unique_id, kUniqueId, sizeof(kUniqueId));
  args->unique_id_size = sizeof(kUniqueId);
  return NULL;
}

MAYBE_UNUSED static KILN_Error* CommInit(KILN_Collectives_CommInit_Args* args) {
  CHECK_ARGS(args, KILN_Collectives_CommInit_Args);
  if (args->unique_id_size != sizeof(kUniqueId) || memcmp(args->unique_id, kUniqueId, sizeof(kUniqueId)) != 0) {
    return MakeError(KILN_ERROR_CODE_INVALID_ARGUMENT, "test plugin: not the unique id it gave");
  }
  char message[160];
  snprintf(message, sizeof(message), "test plugin: rank %d of %d cannot join: the test fabric is down", args->rank,
           args->world_size);
  return MakeError(KILN_ERROR_CODE_UNAVAILABLE, message);
}

/* Never reached: no communicator is ever made. */
#define NO_COMMUNICATOR(name, type)                                                                         \
  MAYBE_UNUSED static KILN_Error* name(type* args) {                                                        \
    CHECK_ARGS(args, type);                                                                                 \
    return MakeError(KILN_ERROR_CODE_FAILED_PRECONDITION, "test plugin: " #name " without a communicator"); \
  }
NO_COMMUNICATOR(CommDestroy, KILN_Collectives_CommDestroy_Args)
NO_COMMUNICATOR(AllReduce, KILN_Collectives_AllReduce_Args)
NO_COMMUNICATOR(Broadcast, KILN_Collectives_Broadcast_Args)
NO_COMMUNICATOR(AllGather, KILN_Collectives_AllGather_Args)
NO_COMMUNICATOR(ReduceScatter, KILN_Collectives_ReduceScatter_Args)
NO_COMMUNICATOR(Barrier, KILN_Collectives_Barrier_Args)

MAYBE_UNUSED static const KILN_Plugin_Api kApi = {
    .struct_size = TEST_PLUGIN_API_SIZE,
#ifdef TEST_PLUGIN_WRONG_MAJOR
    .major_version = KILN_PLUGIN_API_MAJOR + 1,
#else
    .major_version = KILN_PLUGIN_API_MAJOR,
#endif
    .minor_version = TEST_PLUGIN_MINOR,
    .Error_Destroy = ErrorDestroy,
    .Error_Message = ErrorMessage,
    .Error_GetCode = ErrorGetCode,
    .Plugin_Initialize = PluginInitialize,
    .Plugin_Info = PluginInfo,
    .Devices_Count = DevicesCount,
    .Devices_CheckAvailable = DevicesCheckAvailable,
    .Device_Setup = DeviceSetup,
    .Device_Teardown = DeviceTeardown,
#ifdef TEST_PLUGIN_NULL_FUNCTION
    .Device_Stats = NULL,
#else
    .Device_Stats = DeviceStats,
#endif
    .Precision_Substitute = PrecisionSubstitute,
#if defined(TEST_PLUGIN_COLLECTIVES) || defined(TEST_PLUGIN_PARTIAL_COLLECTIVES)
    .Collectives_GetUniqueId = GetUniqueId,
    .Collectives_CommInit = CommInit,
    .Collectives_CommDestroy = CommDestroy,
    .Collectives_AllReduce = AllReduce,
    .Collectives_Broadcast = Broadcast,
    .Collectives_AllGather = AllGather,
#endif
#ifdef TEST_PLUGIN_COLLECTIVES
    .Collectives_ReduceScatter = ReduceScatter,
    .Collectives_Barrier = Barrier,
#endif
#if TEST_PLUGIN_MINOR >= 2 && !defined(TEST_PLUGIN_SHORT_API) && !defined(TEST_PLUGIN_NO_DEVICE_REGISTER)
    .Device_Register = DeviceRegister,
#endif
};

#if defined(TEST_PLUGIN_MISSING_SYMBOL)
KILN_PLUGIN_EXPORT const KILN_Plugin_Api* KILN_GetPluginApiV2(void) { return &kApi; }
#elif defined(TEST_PLUGIN_NULL_ENTRY)
KILN_PLUGIN_EXPORT const KILN_Plugin_Api* KILN_GetPluginApi(void) { return NULL; }
#else
KILN_PLUGIN_EXPORT const KILN_Plugin_Api* KILN_GetPluginApi(void) { return &kApi; }
#endif
