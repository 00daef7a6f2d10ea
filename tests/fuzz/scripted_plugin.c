/* A FAKE accelerator plugin for the plugin_tables fuzz target (plugin_tables_fuzzer.cc): a real shared library,
 * written in C against kiln_plugin_c_api.h alone, whose every answer comes from a script (scripted_plugin.h) that
 * the fuzzer sets through the extra export KILN_FUZZ_SetScript. It computes nothing and drives no device; it exists
 * so that Kiln's loader reads fuzzed answers through the real dlopen'd C boundary.
 *
 * Its function table is a valid 1.1 table, without collectives (the table's own checks are fuzzed without a library):
 * of 1.1 because a PRIVATEUSE1 plugin of 1.2 has its device registered by Kiln, which a plugin in C cannot do (the
 * loader's tests check the rules of 1.2, and examples/device_plugin registers a device). Every function
 * checks the caller's struct_size first, as the header asks of plugins. It never crashes on its own: the script can
 * make it break the header's rules on values, never on memory (see scripted_plugin.h). */
#include "tests/fuzz/scripted_plugin.h"

#include <stdlib.h>
#include <string.h>

#include "hal/plugin/kiln_plugin_c_api.h"

struct KILN_Error {
  int32_t code;
  char* message; /* message_size bytes, in a heap block of exactly that size (plus the NUL when there is one). */
  size_t message_size;
};

/* The current script, and the answers made from it: each string and array in a heap block of its own, freed when
 * the next script is set. */
static KILN_FUZZ_Script script;
static struct {
  char* name;
  char* description;
  char* process_group_backend;
  char* visibility_hint;
  char* warning;
  char* alias_texts[KILN_FUZZ_MAX_ALIASES];
  const char** aliases; /* num_aliases entries, or NULL. */
  size_t num_aliases;
  KILN_Precision* precisions; /* num_precisions entries, or NULL. */
  size_t num_precisions;
  char* stat_names[KILN_FUZZ_STAT_ENTRIES];
} answers;
static KILN_FUZZ_Calls calls;

/* NULL, or a NUL-terminated copy of the text (see KILN_FUZZ_Text). Out of memory reads as NULL, which the fuzzer
 * would report as a wrong answer: with inputs this small it does not happen. */
static char* OwnText(const KILN_FUZZ_Text* text) {
  if (text->is_null & 1) return NULL;
  const char* const end = (const char*)memchr(text->text, '\0', KILN_FUZZ_TEXT_SIZE);
  const size_t length = end != NULL ? (size_t)(end - text->text) : KILN_FUZZ_TEXT_SIZE;
  char* copy = (char*)malloc(length + 1);
  if (copy == NULL) return NULL;
  memcpy(copy, text->text, length);
  copy[length] = '\0';
  return copy;
}

static void FreeAnswers(void) {
  free(answers.name);
  free(answers.description);
  free(answers.process_group_backend);
  free(answers.visibility_hint);
  free(answers.warning);
  for (int i = 0; i < KILN_FUZZ_MAX_ALIASES; ++i) free(answers.alias_texts[i]);
  free((void*)answers.aliases);
  free(answers.precisions);
  for (int i = 0; i < KILN_FUZZ_STAT_ENTRIES; ++i) free(answers.stat_names[i]);
  memset(&answers, 0, sizeof(answers));
}

KILN_PLUGIN_EXPORT void KILN_FUZZ_SetScript(const uint8_t* data, size_t size) {
  FreeAnswers();
  memset(&script, 0, sizeof(script));
  memcpy(&script, data, size < sizeof(script) ? size : sizeof(script));
  memset(&calls, 0, sizeof(calls));

  answers.name = OwnText(&script.name);
  answers.description = OwnText(&script.description);
  answers.process_group_backend = OwnText(&script.process_group_backend);
  answers.visibility_hint = OwnText(&script.visibility_hint);
  answers.warning = OwnText(&script.warning);
  for (int i = 0; i < KILN_FUZZ_MAX_ALIASES; ++i) answers.alias_texts[i] = OwnText(&script.aliases[i]);
  for (int i = 0; i < KILN_FUZZ_STAT_ENTRIES; ++i) answers.stat_names[i] = OwnText(&script.stats[i].name);

  if (script.aliases_null & 1) {
    answers.num_aliases = (size_t)script.num_aliases;
  } else {
    answers.num_aliases = (size_t)(script.num_aliases % (KILN_FUZZ_MAX_ALIASES + 1));
    /* malloc(0) gives a block of no bytes: a read of aliases[0] is then past its end. */
    answers.aliases = (const char**)malloc(answers.num_aliases * sizeof(const char*));
    for (size_t i = 0; answers.aliases != NULL && i < answers.num_aliases; ++i) {
      answers.aliases[i] = answers.alias_texts[i];
    }
  }
  if (script.precisions_null & 1) {
    answers.num_precisions = (size_t)script.num_precisions;
  } else {
    answers.num_precisions = (size_t)(script.num_precisions % (KILN_FUZZ_MAX_PRECISIONS + 1));
    answers.precisions = (KILN_Precision*)malloc(answers.num_precisions * sizeof(KILN_Precision));
    /* Any int in an enum field, as a C plugin may write one (the enum's type is an integer type in C). */
    for (size_t i = 0; answers.precisions != NULL && i < answers.num_precisions; ++i) {
      answers.precisions[i] = (KILN_Precision)script.precisions[i];
    }
  }
}

KILN_PLUGIN_EXPORT void KILN_FUZZ_GetCalls(KILN_FUZZ_Calls* out) { *out = calls; }

/* The scripted error, or NULL when the script says the function succeeds. */
static KILN_Error* ScriptedError(const KILN_FUZZ_Error* scripted) {
  if (!(scripted->fails & 1)) return NULL;
  KILN_Error* error = (KILN_Error*)malloc(sizeof(KILN_Error));
  if (error == NULL) return NULL;
  error->code = scripted->code;
  error->message_size = scripted->message_size % (KILN_FUZZ_MESSAGE_SIZE + 1);
  const size_t terminator = (scripted->nul_terminated & 1) ? 1 : 0;
  /* At least one byte, so that the message is never NULL even when empty and unterminated. */
  error->message = (char*)malloc(error->message_size + terminator > 0 ? error->message_size + terminator : 1);
  if (error->message == NULL) {
    free(error);
    return NULL;
  }
  memcpy(error->message, scripted->message, error->message_size);
  if (terminator) error->message[error->message_size] = '\0';
  return error;
}

/* A plugin's own error about the caller's struct: Kiln always passes the current sizes, so the fuzzer never expects
 * one. */
static KILN_Error* TooSmall(void) {
  static const char kMessage[] = "scripted plugin: an args struct is smaller than its fields";
  KILN_Error* error = (KILN_Error*)malloc(sizeof(KILN_Error));
  if (error == NULL) return NULL;
  error->code = KILN_ERROR_CODE_INVALID_ARGUMENT;
  error->message_size = sizeof(kMessage) - 1;
  error->message = (char*)malloc(sizeof(kMessage));
  if (error->message == NULL) {
    free(error);
    return NULL;
  }
  memcpy(error->message, kMessage, sizeof(kMessage));
  return error;
}

#define CHECK_ARGS(args, type) \
  if ((args)->struct_size < type##_STRUCT_SIZE) return TooSmall()

static void ErrorDestroy(KILN_Error_Destroy_Args* args) {
  free(args->error->message);
  free(args->error);
}

static void ErrorMessage(KILN_Error_Message_Args* args) {
  args->message = args->error->message;
  args->message_size = args->error->message_size;
}

static void ErrorGetCode(KILN_Error_GetCode_Args* args) { args->code = (KILN_Error_Code)args->error->code; }

static KILN_Error* PluginInitialize(KILN_Plugin_Initialize_Args* args) {
  CHECK_ARGS(args, KILN_Plugin_Initialize_Args);
  return ScriptedError(&script.initialize_error);
}

static KILN_Error* PluginInfo(KILN_Plugin_Info_Args* args) {
  CHECK_ARGS(args, KILN_Plugin_Info_Args);
  KILN_Error* error = ScriptedError(&script.info_error);
  if (error != NULL) return error;
  args->name = answers.name;
  args->description = answers.description;
  args->aliases = answers.aliases;
  args->num_aliases = answers.num_aliases;
  args->priority = script.priority;
  args->device_type = (KILN_Device_Type)script.device_type;
  args->device_numbering = (KILN_Device_Numbering)script.device_numbering;
  args->process_group_backend = answers.process_group_backend;
  args->precisions = answers.precisions;
  args->num_precisions = answers.num_precisions;
  args->visibility_hint_is_set = (script.visibility_hint_is_set & 1) != 0;
  args->visibility_hint = answers.visibility_hint;
  return NULL;
}

static KILN_Error* DevicesCount(KILN_Devices_Count_Args* args) {
  CHECK_ARGS(args, KILN_Devices_Count_Args);
  KILN_Error* error = ScriptedError(&script.count_error);
  if (error != NULL) return error;
  args->count = script.count;
  args->auto_count_is_set = (script.auto_count_is_set & 1) != 0;
  args->auto_count = script.auto_count;
  return NULL;
}

static KILN_Error* DevicesCheckAvailable(KILN_Devices_CheckAvailable_Args* args) {
  CHECK_ARGS(args, KILN_Devices_CheckAvailable_Args);
  return ScriptedError(&script.check_available_error);
}

static KILN_Error* DeviceSetup(KILN_Device_Setup_Args* args) {
  CHECK_ARGS(args, KILN_Device_Setup_Args);
  ++calls.setup_calls;
  calls.last_device_index = args->device_index;
  return ScriptedError(&script.setup_error);
}

static KILN_Error* DeviceTeardown(KILN_Device_Teardown_Args* args) {
  CHECK_ARGS(args, KILN_Device_Teardown_Args);
  ++calls.teardown_calls;
  calls.last_device_index = args->device_index;
  return ScriptedError(&script.teardown_error);
}

static KILN_Error* DeviceStats(KILN_Device_Stats_Args* args) {
  CHECK_ARGS(args, KILN_Device_Stats_Args);
  const int first_call = calls.stats_calls == 0;
  ++calls.stats_calls;
  calls.last_device_index = args->device_index;
  KILN_Error* error = ScriptedError(&script.stats_error);
  if (error != NULL) return error;
  const uint64_t num_stats = script.num_stats[first_call ? 0 : 1];
  args->num_stats = (size_t)num_stats;
  const size_t written = num_stats < args->stats_capacity ? (size_t)num_stats : args->stats_capacity;
  for (size_t i = 0; i < written; ++i) {
    args->stats[i].name = answers.stat_names[i % KILN_FUZZ_STAT_ENTRIES];
    args->stats[i].value = script.stats[i % KILN_FUZZ_STAT_ENTRIES].value;
  }
  return NULL;
}

static KILN_Error* PrecisionSubstitute(KILN_Precision_Substitute_Args* args) {
  CHECK_ARGS(args, KILN_Precision_Substitute_Args);
  KILN_Error* error = ScriptedError(&script.substitute_error);
  if (error != NULL) return error;
  args->substitute_is_set = (script.substitute_is_set & 1) != 0;
  args->substitute = (KILN_Precision)script.substitute;
  args->warning = answers.warning;
  return NULL;
}

static const KILN_Plugin_Api kApi = {
    .struct_size = KILN_STRUCT_SIZE(KILN_Plugin_Api, Collectives_Barrier),
    .major_version = KILN_PLUGIN_API_MAJOR,
    .minor_version = 1,
    .Error_Destroy = ErrorDestroy,
    .Error_Message = ErrorMessage,
    .Error_GetCode = ErrorGetCode,
    .Plugin_Initialize = PluginInitialize,
    .Plugin_Info = PluginInfo,
    .Devices_Count = DevicesCount,
    .Devices_CheckAvailable = DevicesCheckAvailable,
    .Device_Setup = DeviceSetup,
    .Device_Teardown = DeviceTeardown,
    .Device_Stats = DeviceStats,
    .Precision_Substitute = PrecisionSubstitute,
};

KILN_PLUGIN_EXPORT const KILN_Plugin_Api* KILN_GetPluginApi(void) { return &kApi; }
