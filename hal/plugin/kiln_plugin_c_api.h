/* Kiln accelerator plugin C API: the whole contract between Kiln and an accelerator shipped as a shared library.
 *
 * A plugin is a shared library that exports one symbol, KILN_GetPluginApi, returning a table of functions
 * (KILN_Plugin_Api). Kiln loads it at run time (`fit --accelerator_plugin=PATH`, or the KILN_ACCELERATOR_PLUGINS
 * variable) and registers it as an ordinary accelerator under the plugin's own name. Nothing but this header crosses
 * the boundary: no C++ type, no Kiln or LibTorch class, no allocation freed on the other side.
 *
 * VERSIONING
 *   KILN_PLUGIN_API_MAJOR.KILN_PLUGIN_API_MINOR is the version of this header. A plugin reports the version it was
 *   built against in KILN_Plugin_Api.major_version / minor_version. The rules (see CHANGELOG.md beside this file):
 *   - Within one major version, a change may only add: a new function pointer at the END of KILN_Plugin_Api, a new
 *     field at the END of an args struct, or a new value at the end of an enum. Each such release bumps the minor
 *     version. Nothing is removed, reordered, retyped or given a new meaning.
 *   - Any other change bumps the major version and resets the minor version to 0.
 *   - The first three fields of KILN_Plugin_Api (struct_size, major_version, minor_version) keep their place and
 *     type in every major version, so that any Kiln can read any plugin's version.
 *   Kiln loads a plugin when its major version equals Kiln's, its minor version is at least the minor version
 *   that introduced the last function Kiln calls, and its KILN_Plugin_Api is at least as large as that minor
 *   version's table. A plugin built against a newer minor version than Kiln's loads: Kiln ignores the fields it
 *   does not know. Anything else is refused with an error naming the plugin's path and both versions.
 *
 * CALLING CONVENTION
 *   - Every function takes one pointer to an args struct and (except the three KILN_Error_* functions, which cannot
 *     report an error about an error) returns a KILN_Error*: NULL on success, otherwise an error the caller owns
 *     and must release with the same plugin's Error_Destroy.
 *   - Every args struct starts with `size_t struct_size`. The caller zero-fills the whole struct, then sets
 *     struct_size to the <struct>_STRUCT_SIZE of the header it was built with, then sets the inputs.
 *     Zero-filling means that fields unknown to an older plugin read as zero / "not set" to a newer caller; for
 *     this reason no enum below uses 0 as a valid value.
 *   - The callee checks struct_size before touching a field: a plugin returns INVALID_ARGUMENT when struct_size is
 *     smaller than the size of the fields it needs (KILN_ARGS_HAS_FIELD), and never reads or writes a field that
 *     lies beyond struct_size.
 *   - Optional outputs come with a `<name>_is_set` flag; there are no magic values.
 *   - Strings are NUL-terminated UTF-8.
 *   - Plugin functions must not throw C++ exceptions, longjmp, abort or exit: every failure is an error object.
 *
 * OWNERSHIP AND LIFETIME
 *   - Kiln never unloads a plugin (it could have made tensors that are still alive, or registered kernels with
 *     LibTorch), so "while the plugin is loaded" means until the process exits.
 *   - The KILN_Plugin_Api table, and every string or array the plugin returns outside an error, is owned by the
 *     plugin and must stay valid and unchanged while the plugin is loaded (string literals and static data do).
 *   - A KILN_Error is owned by the caller from the moment it is returned until the caller passes it to
 *     Error_Destroy. Its message is owned by the error.
 *   - Buffers passed in by the caller (KILN_Device_Stats_Args.stats) are owned by the caller; the plugin writes
 *     into them during the call only and keeps no pointer to them.
 *
 * THREADS
 *   Kiln may call every function from any thread, several at once, except Device_Setup and Device_Teardown, which
 *   are called from one thread at a time for a given device. Plugin_Initialize is called once, before any other
 *   function but the KILN_Error_* ones.
 *
 * LOADING
 *   Kiln opens the library with dlopen(RTLD_NOW | RTLD_LOCAL) from exactly the path it was given: every symbol the
 *   plugin needs must resolve when it is opened, from its own dependencies or the process's libraries, and its own
 *   symbols are visible to no other library. Exporting KILN_GetPluginApi alone is recommended.
 *
 * DEVICES AND LIBTORCH
 *   Kiln computes with LibTorch on the device type a plugin reports (KILN_Device_Type). KILN_DEVICE_TYPE_CPU needs
 *   nothing from the plugin's side. A plugin with its own hardware reports KILN_DEVICE_TYPE_PRIVATEUSE1 and
 *   registers its device (allocator, device guard, kernels) with LibTorch when it is loaded; it must then link
 *   the same LibTorch shared libraries as the Kiln program that loads it, so that its registrations reach the
 *   process's dispatcher. LibTorch has one PrivateUse1 slot per process: Kiln refuses a PrivateUse1 plugin when
 *   something else already registered a PrivateUse1 device. What the plugin's device gets depends on the LibTorch
 *   version the Kiln program was built against (`fit --version` says which):
 *     LibTorch 1.13: devices print as "privateuseone:N"; no autocast (declare no *-mixed precision); checkpoints
 *       are read onto the CPU and moved to the device by the trainer.
 *     LibTorch 2.x: the plugin may name its device (c10::register_privateuse1_backend("acme") when it is loaded),
 *       and Kiln's plans, statistics, logs and errors then say "acme:N"; a named device must also register
 *       at::PrivateUse1HooksInterface (at::RegisterPrivateUse1HooksInterface), which LibTorch 2.x asks for the
 *       device count and a default generator per device (at::manual_seed does); with autocast kernels registered
 *       for the AutocastPrivateUse1 key it can declare bf16-mixed (or 16-mixed); the trainer still reads
 *       checkpoints onto the CPU, so that one written on the device loads on any machine. A plugin built with
 *       Kiln's own adapter (hal/compat/privateuse1.h) gets all of this for either version; the sample
 *       examples/virtual_npu shows it.
 */
#ifndef KILN_HAL_PLUGIN_KILN_PLUGIN_C_API_H_
#define KILN_HAL_PLUGIN_KILN_PLUGIN_C_API_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_PLUGIN_API_MAJOR 1
#define KILN_PLUGIN_API_MINOR 0

/* The size of `type` up to and including `last_field`: what a struct_size must be at least for that field. */
#define KILN_STRUCT_SIZE(type, last_field) (offsetof(type, last_field) + sizeof(((type*)0)->last_field))

/* Declares <type>_STRUCT_SIZE (KILN_Device_Setup_Args_STRUCT_SIZE, ...): the size of `type` as this header defines
 * it, up to its last field. */
#define KILN_DEFINE_STRUCT_SIZE(type, last_field) enum { type##_STRUCT_SIZE = KILN_STRUCT_SIZE(type, last_field) }

/* True when the args struct `args` (of type `type`) is large enough to hold `field`: the check a callee makes
 * before it reads or writes a field. */
#define KILN_ARGS_HAS_FIELD(args, type, field) ((args)->struct_size >= KILN_STRUCT_SIZE(type, field))

/* Marks the entry point for export from a library built with hidden visibility. */
#if defined(__GNUC__) || defined(__clang__)
#define KILN_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define KILN_PLUGIN_EXPORT
#endif

/* ---------------------------------------------------------------------------------------------------------------
 * Enumerations. 0 is never a valid value (a zero-filled field means "not set").
 * ------------------------------------------------------------------------------------------------------------- */

/* Error codes, with the numbering and meaning of absl::StatusCode (and gRPC). */
typedef enum KILN_Error_Code {
  KILN_ERROR_CODE_CANCELLED = 1,
  KILN_ERROR_CODE_UNKNOWN = 2,
  KILN_ERROR_CODE_INVALID_ARGUMENT = 3,
  KILN_ERROR_CODE_DEADLINE_EXCEEDED = 4,
  KILN_ERROR_CODE_NOT_FOUND = 5,
  KILN_ERROR_CODE_ALREADY_EXISTS = 6,
  KILN_ERROR_CODE_PERMISSION_DENIED = 7,
  KILN_ERROR_CODE_RESOURCE_EXHAUSTED = 8,
  KILN_ERROR_CODE_FAILED_PRECONDITION = 9,
  KILN_ERROR_CODE_ABORTED = 10,
  KILN_ERROR_CODE_OUT_OF_RANGE = 11,
  KILN_ERROR_CODE_UNIMPLEMENTED = 12,
  KILN_ERROR_CODE_INTERNAL = 13,
  KILN_ERROR_CODE_UNAVAILABLE = 14,
  KILN_ERROR_CODE_DATA_LOSS = 15,
  KILN_ERROR_CODE_UNAUTHENTICATED = 16
} KILN_Error_Code;

/* The LibTorch device type a plugin's tensors live on (c10::DeviceType), as data. */
typedef enum KILN_Device_Type {
  KILN_DEVICE_TYPE_CPU = 1,        /* c10::DeviceType::CPU: host tensors, LibTorch's own CPU kernels. */
  KILN_DEVICE_TYPE_CUDA = 2,       /* c10::DeviceType::CUDA: needs a CUDA-enabled LibTorch. */
  KILN_DEVICE_TYPE_PRIVATEUSE1 = 3 /* c10::DeviceType::PrivateUse1: the plugin's own device (see above). */
} KILN_Device_Type;

/* What a number in the user's `devices` value means for this plugin. Kiln parses `devices`; plugins never do. */
typedef enum KILN_Device_Numbering {
  /* Devices are numbered 0..count-1 (Lightning's GPU rules): N selects the first N, "0,2" selects those, -1 all.
   * Needs a device type whose devices carry an index (not KILN_DEVICE_TYPE_CPU). */
  KILN_DEVICE_NUMBERING_INDEXED = 1,
  /* Devices are processes on this host (Lightning's CPU rules): N means N processes, each on the same unindexed
   * device; device indices in calls are always 0, "the device of the calling process". */
  KILN_DEVICE_NUMBERING_PROCESSES = 2
} KILN_Device_Numbering;

/* Training precisions, as Lightning names them. */
typedef enum KILN_Precision {
  KILN_PRECISION_32_TRUE = 1,    /* "32-true" */
  KILN_PRECISION_64_TRUE = 2,    /* "64-true" */
  KILN_PRECISION_16_MIXED = 3,   /* "16-mixed" */
  KILN_PRECISION_BF16_MIXED = 4, /* "bf16-mixed" */
  KILN_PRECISION_16_TRUE = 5,    /* "16-true" */
  KILN_PRECISION_BF16_TRUE = 6   /* "bf16-true" */
} KILN_Precision;

/* ---------------------------------------------------------------------------------------------------------------
 * Errors. KILN_Error is opaque: each plugin defines it. These three functions never fail and return nothing.
 * ------------------------------------------------------------------------------------------------------------- */

typedef struct KILN_Error KILN_Error;

/* Releases `error` (not NULL), which the caller owned. The error and its message are invalid afterwards. */
typedef struct KILN_Error_Destroy_Args {
  size_t struct_size;
  KILN_Error* error; /* in: owned by the caller until this call, which takes it. */
} KILN_Error_Destroy_Args;
KILN_DEFINE_STRUCT_SIZE(KILN_Error_Destroy_Args, error);
typedef void KILN_Error_Destroy(KILN_Error_Destroy_Args* args);

/* The error's message: what failed, the bad value and what to do next, in words a user can act on. */
typedef struct KILN_Error_Message_Args {
  size_t struct_size;
  const KILN_Error* error; /* in: borrowed. */
  const char* message;     /* out: owned by the error; valid until Error_Destroy. Never NULL. */
  size_t message_size;     /* out: bytes in message, without the terminating NUL. */
} KILN_Error_Message_Args;
KILN_DEFINE_STRUCT_SIZE(KILN_Error_Message_Args, message_size);
typedef void KILN_Error_Message(KILN_Error_Message_Args* args);

typedef struct KILN_Error_GetCode_Args {
  size_t struct_size;
  const KILN_Error* error; /* in: borrowed. */
  KILN_Error_Code code;    /* out */
} KILN_Error_GetCode_Args;
KILN_DEFINE_STRUCT_SIZE(KILN_Error_GetCode_Args, code);
typedef void KILN_Error_GetCode(KILN_Error_GetCode_Args* args);

/* ---------------------------------------------------------------------------------------------------------------
 * The plugin.
 * ------------------------------------------------------------------------------------------------------------- */

/* Called once, after the version checks and before any other function but the KILN_Error_* ones. An error fails
 * the load (Kiln reports it with the plugin's path); the plugin is then never called again. Typical work: read
 * configuration, load a driver. It must not take long or touch devices in a way that changes later behaviour. */
typedef struct KILN_Plugin_Initialize_Args {
  size_t struct_size;
} KILN_Plugin_Initialize_Args;
KILN_DEFINE_STRUCT_SIZE(KILN_Plugin_Initialize_Args, struct_size);
typedef KILN_Error* KILN_Plugin_Initialize(KILN_Plugin_Initialize_Args* args);

/* What the accelerator is. Called after Plugin_Initialize, once per registration of the plugin (a program may
 * register it in more than one registry); the answers must not change while the plugin is loaded. Kiln copies
 * every output. Every string and array here is owned by the plugin and valid while it is loaded. An error fails
 * the load. */
typedef struct KILN_Plugin_Info_Args {
  size_t struct_size;
  /* out: the name the accelerator registers under: lower-case letters, digits, '_' and '-'; not "auto", and not
   * the name or alias of an accelerator already registered. */
  const char* name;
  const char* description;      /* out: one line for listings. */
  const char* const* aliases;   /* out: num_aliases more names, same rules as `name`. May be NULL when none. */
  size_t num_aliases;           /* out */
  int32_t priority;             /* out: "auto" picks the available accelerator with the highest (Kiln's cpu: 0). */
  KILN_Device_Type device_type; /* out: required. */
  KILN_Device_Numbering device_numbering; /* out: required. */
  const char* process_group_backend;      /* out: torch.distributed backend for data-parallel training ("gloo"). */
  const KILN_Precision* precisions;       /* out: what it can train in, most preferred first; at least one. */
  size_t num_precisions;                  /* out */
  /* out, optional: appended to Kiln's errors about device indices, to say what decides which devices are visible
   * (for example "ACME_VISIBLE_DEVICES=0,1"). */
  bool visibility_hint_is_set;
  const char* visibility_hint;
} KILN_Plugin_Info_Args;
KILN_DEFINE_STRUCT_SIZE(KILN_Plugin_Info_Args, visibility_hint);
typedef KILN_Error* KILN_Plugin_Info(KILN_Plugin_Info_Args* args);

/* ---------------------------------------------------------------------------------------------------------------
 * Devices. `device_index` is 0..count-1 for KILN_DEVICE_NUMBERING_INDEXED and always 0 for
 * KILN_DEVICE_NUMBERING_PROCESSES. An index the plugin does not have is an INVALID_ARGUMENT error naming it.
 * ------------------------------------------------------------------------------------------------------------- */

/* How many devices there are. May probe the hardware; must not initialise it in a way that changes later
 * behaviour, and must be cheap enough to call many times. An error means the probe failed: Kiln then counts no
 * device and shows the error's message when the user asks for devices. */
typedef struct KILN_Devices_Count_Args {
  size_t struct_size;
  /* out: INDEXED: the devices visible to this process, at most 128 (LibTorch 1.13 indexes a device type's devices
   * with an int8_t; Kiln refuses a larger count). PROCESSES: how many processes "auto" means (usually 1; at
   * most 65536). */
  int32_t count;
  /* out, optional, INDEXED only: "auto" uses the first auto_count devices instead of all of them. */
  bool auto_count_is_set;
  int32_t auto_count;
} KILN_Devices_Count_Args;
KILN_DEFINE_STRUCT_SIZE(KILN_Devices_Count_Args, auto_count);
typedef KILN_Error* KILN_Devices_Count(KILN_Devices_Count_Args* args);

/* NULL when the plugin's devices can be used by this process now. Otherwise an error with code
 * FAILED_PRECONDITION or UNAVAILABLE whose message says why, in words a user can act on ("no ACME device: the
 * acme kernel module is not loaded"). Called often (for "auto" and listings): cheap, no side effects. */
typedef struct KILN_Devices_CheckAvailable_Args {
  size_t struct_size;
} KILN_Devices_CheckAvailable_Args;
KILN_DEFINE_STRUCT_SIZE(KILN_Devices_CheckAvailable_Args, struct_size);
typedef KILN_Error* KILN_Devices_CheckAvailable(KILN_Devices_CheckAvailable_Args* args);

/* Prepares a device for this process before any tensor is moved there (select it, create contexts). May block
 * while the device initialises. Set-up followed by tear-down may repeat in one process. */
typedef struct KILN_Device_Setup_Args {
  size_t struct_size;
  int32_t device_index; /* in */
} KILN_Device_Setup_Args;
KILN_DEFINE_STRUCT_SIZE(KILN_Device_Setup_Args, device_index);
typedef KILN_Error* KILN_Device_Setup(KILN_Device_Setup_Args* args);

/* Releases what set-up and training left on a device. Called when training ends, also after a failed run. */
typedef struct KILN_Device_Teardown_Args {
  size_t struct_size;
  int32_t device_index; /* in */
} KILN_Device_Teardown_Args;
KILN_DEFINE_STRUCT_SIZE(KILN_Device_Teardown_Args, device_index);
typedef KILN_Error* KILN_Device_Teardown(KILN_Device_Teardown_Args* args);

/* One statistic. An array element, so its layout is fixed for the whole major version. */
typedef struct KILN_Device_Stat {
  /* lower_snake_case with the unit as a suffix where there is one ("memory_allocated_bytes"). Owned by the
   * plugin, valid while it is loaded (a string literal). */
  const char* name;
  double value; /* finite */
} KILN_Device_Stat;

/* Current statistics of a device, copied into the caller's buffer. The plugin sets num_stats to the number of
 * statistics it has and writes the first min(num_stats, stats_capacity) of them into `stats`; when num_stats is
 * larger than stats_capacity, the caller calls again with a larger buffer. A statistic that cannot be read is left
 * out; that is not an error. Cheap enough to call every few steps. Kiln takes at most 4096 statistics: a larger
 * num_stats is an error. */
typedef struct KILN_Device_Stats_Args {
  size_t struct_size;
  int32_t device_index;    /* in */
  KILN_Device_Stat* stats; /* in: the caller's buffer of stats_capacity elements; may be NULL when that is 0. */
  size_t stats_capacity;   /* in */
  size_t num_stats;        /* out */
} KILN_Device_Stats_Args;
KILN_DEFINE_STRUCT_SIZE(KILN_Device_Stats_Args, num_stats);
typedef KILN_Error* KILN_Device_Stats(KILN_Device_Stats_Args* args);

/* ---------------------------------------------------------------------------------------------------------------
 * Precisions.
 * ------------------------------------------------------------------------------------------------------------- */

/* Asked for a precision that Plugin_Info did not list: a close substitute the plugin can run instead, if any
 * (Lightning: "16-mixed" on a CPU runs as "bf16-mixed"). No substitute is not an error. */
typedef struct KILN_Precision_Substitute_Args {
  size_t struct_size;
  KILN_Precision requested;  /* in */
  bool substitute_is_set;    /* out */
  KILN_Precision substitute; /* out, when set: one of the precisions Plugin_Info listed. */
  /* out, when set: the warning shown to the user. Owned by the plugin, valid while it is loaded. Not NULL. */
  const char* warning;
} KILN_Precision_Substitute_Args;
KILN_DEFINE_STRUCT_SIZE(KILN_Precision_Substitute_Args, warning);
typedef KILN_Error* KILN_Precision_Substitute(KILN_Precision_Substitute_Args* args);

/* ---------------------------------------------------------------------------------------------------------------
 * The function table and the entry point.
 * ------------------------------------------------------------------------------------------------------------- */

/* Every function is required (non-NULL) in version 1.0. New functions are only ever added at the end. */
typedef struct KILN_Plugin_Api {
  size_t struct_size;    /* KILN_Plugin_Api_STRUCT_SIZE of the header the plugin was built with. */
  int32_t major_version; /* KILN_PLUGIN_API_MAJOR of that header. */
  int32_t minor_version; /* KILN_PLUGIN_API_MINOR of that header. */

  /* 1.0 */
  KILN_Error_Destroy* Error_Destroy;
  KILN_Error_Message* Error_Message;
  KILN_Error_GetCode* Error_GetCode;
  KILN_Plugin_Initialize* Plugin_Initialize;
  KILN_Plugin_Info* Plugin_Info;
  KILN_Devices_Count* Devices_Count;
  KILN_Devices_CheckAvailable* Devices_CheckAvailable;
  KILN_Device_Setup* Device_Setup;
  KILN_Device_Teardown* Device_Teardown;
  KILN_Device_Stats* Device_Stats;
  KILN_Precision_Substitute* Precision_Substitute;
} KILN_Plugin_Api;
KILN_DEFINE_STRUCT_SIZE(KILN_Plugin_Api, Precision_Substitute);

/* The one symbol a plugin exports, under exactly this (unmangled) name. It returns the plugin's function table,
 * which the plugin owns and keeps valid and unchanged while it is loaded. It may be called any number of times,
 * from any thread, before Plugin_Initialize; it does no work, cannot fail and never returns NULL. */
#define KILN_PLUGIN_ENTRY_SYMBOL "KILN_GetPluginApi"
typedef const KILN_Plugin_Api* KILN_GetPluginApi_Fn(void);
KILN_PLUGIN_EXPORT const KILN_Plugin_Api* KILN_GetPluginApi(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KILN_HAL_PLUGIN_KILN_PLUGIN_C_API_H_ */
