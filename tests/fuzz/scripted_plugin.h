/* The script of the scripted plugin (scripted_plugin.c), a FAKE accelerator plugin made for the plugin_tables fuzz
 * target: every answer it gives Kiln comes from a KILN_FUZZ_Script that the fuzzer sets before each input. Pure C and
 * free of Kiln, shared by the fake (which answers from the script) and the fuzzer (which derives from the same script
 * what Kiln must make of the answers).
 *
 * Any bytes are a script: KILN_FUZZ_SetScript copies min(size, sizeof(KILN_FUZZ_Script)) bytes over a zeroed script,
 * and every field means something for every value. Flags are "odd means yes". A zeroed script is a plugin whose
 * every call succeeds with empty strings and zero numbers (so Plugin_Info's answers are invalid: no precision).
 *
 * The answers may break the plugin header's rules on VALUES (NULL or empty strings, unknown enum values, negative
 * counts, an error code out of range, more statistics than a buffer holds): those are what Kiln must check. They
 * never break its rules on MEMORY, so that a sanitizer report is Kiln's fault: every array has exactly the length
 * the plugin states (each in a heap block of that size, so AddressSanitizer sees a read past its end), every string
 * is NUL-terminated, an error message has exactly message_size bytes (followed by a NUL only when the script says
 * so), and every error is a heap block that only Error_Destroy frees (LeakSanitizer sees an error Kiln forgets).
 * Unlike a real plugin, the fake frees the strings and arrays of one script when the next script is set: Kiln copies
 * every answer, so a pointer it kept would be a use after free.
 *
 * Thread-safety: none; the fuzzer calls one function at a time. */
#ifndef KILN_TESTS_FUZZ_SCRIPTED_PLUGIN_H_
#define KILN_TESTS_FUZZ_SCRIPTED_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_FUZZ_TEXT_SIZE 15
#define KILN_FUZZ_MESSAGE_SIZE 16
#define KILN_FUZZ_MAX_ALIASES 4
#define KILN_FUZZ_MAX_PRECISIONS 8
#define KILN_FUZZ_STAT_ENTRIES 8

/* A string answer: NULL when is_null is odd; otherwise the bytes of `text` up to its first 0 byte (all of them when
 * there is none), as a NUL-terminated string the plugin owns. */
typedef struct KILN_FUZZ_Text {
  uint8_t is_null;
  char text[KILN_FUZZ_TEXT_SIZE];
} KILN_FUZZ_Text;

/* Whether a function fails, and with what. An error's message is the first message_size % (KILN_FUZZ_MESSAGE_SIZE +
 * 1) bytes of `message` (0 bytes included; Kiln keeps what precedes the first of them), followed by a NUL only when
 * nul_terminated is odd. `code` is any int: the header's codes are 1 to 16. */
typedef struct KILN_FUZZ_Error {
  uint8_t fails;
  uint8_t message_size;
  uint8_t nul_terminated;
  uint8_t unused;
  int32_t code;
  char message[KILN_FUZZ_MESSAGE_SIZE];
} KILN_FUZZ_Error;

/* One statistic Device_Stats may report: its name (NULL breaks the header's rule) and value (any double). */
typedef struct KILN_FUZZ_Stat {
  KILN_FUZZ_Text name;
  double value;
} KILN_FUZZ_Stat;

typedef struct KILN_FUZZ_Script {
  /* Device_Stats reports num_stats[0] statistics on its first call after the script was set and num_stats[1] on
   * every later one (statistics may come and go), any size_t; statistic i is entry i % KILN_FUZZ_STAT_ENTRIES. It
   * writes the first min(num_stats, stats_capacity) of them into the caller's buffer, as the header asks. */
  uint64_t num_stats[2];
  KILN_FUZZ_Stat stats[KILN_FUZZ_STAT_ENTRIES];
  /* Plugin_Info's num_aliases and aliases: when aliases_null is odd, aliases is NULL and num_aliases is this value
   * as it is; otherwise num_aliases is this value % (KILN_FUZZ_MAX_ALIASES + 1) and aliases holds that many entries,
   * the first ones of `aliases` below (each may be NULL). */
  uint64_t num_aliases;
  /* Plugin_Info's num_precisions and precisions, in the same way (at most KILN_FUZZ_MAX_PRECISIONS entries, each
   * any int). */
  uint64_t num_precisions;
  int32_t precisions[KILN_FUZZ_MAX_PRECISIONS];

  /* Plugin_Info's numbers: any int each (the header's device types are 1 to 3, numberings 1 and 2). */
  int32_t priority;
  int32_t device_type;
  int32_t device_numbering;
  /* Devices_Count's answers: any int each; auto_count_is_set when auto_count_is_set below is odd. */
  int32_t count;
  int32_t auto_count;
  /* Precision_Substitute's substitute, any int, set when substitute_is_set below is odd. */
  int32_t substitute;

  /* Each function's error. Plugin_Initialize's matters only for the first open (the loader never initialises a
   * library twice). */
  KILN_FUZZ_Error initialize_error;
  KILN_FUZZ_Error info_error;
  KILN_FUZZ_Error count_error;
  KILN_FUZZ_Error check_available_error;
  KILN_FUZZ_Error setup_error;
  KILN_FUZZ_Error teardown_error;
  KILN_FUZZ_Error stats_error;
  KILN_FUZZ_Error substitute_error;

  /* Plugin_Info's strings. */
  KILN_FUZZ_Text name;
  KILN_FUZZ_Text description;
  KILN_FUZZ_Text process_group_backend;
  KILN_FUZZ_Text visibility_hint;
  KILN_FUZZ_Text aliases[KILN_FUZZ_MAX_ALIASES];
  KILN_FUZZ_Text warning; /* Precision_Substitute's warning. */

  uint8_t aliases_null;
  uint8_t precisions_null;
  uint8_t visibility_hint_is_set;
  uint8_t auto_count_is_set;
  uint8_t substitute_is_set;
  uint8_t unused[3];
} KILN_FUZZ_Script;

/* What the plugin was asked since the script was last set. */
typedef struct KILN_FUZZ_Calls {
  int32_t setup_calls;
  int32_t teardown_calls;
  int32_t stats_calls;
  /* The device_index of the last Device_Setup, Device_Teardown or Device_Stats call. */
  int32_t last_device_index;
} KILN_FUZZ_Calls;

/* The fake's two extra exports, found with dlsym on the handle of the same library Kiln loads. */
#define KILN_FUZZ_SET_SCRIPT_SYMBOL "KILN_FUZZ_SetScript"
typedef void KILN_FUZZ_SetScript_Fn(const uint8_t* data, size_t size);
#define KILN_FUZZ_GET_CALLS_SYMBOL "KILN_FUZZ_GetCalls"
typedef void KILN_FUZZ_GetCalls_Fn(KILN_FUZZ_Calls* calls);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KILN_TESTS_FUZZ_SCRIPTED_PLUGIN_H_ */
