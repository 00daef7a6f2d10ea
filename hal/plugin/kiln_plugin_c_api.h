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
 *   that introduced the last function Kiln requires, and its KILN_Plugin_Api is at least as large as the table of
 *   the minor version it reports (of Kiln's own, for a newer one). A plugin built against a newer minor version
 *   than Kiln's loads: Kiln ignores the fields it does not know. A plugin built against an older minor version
 *   loads too: Kiln reads no function pointer beyond its struct_size, so a later optional part (such as 1.1's
 *   collectives) is simply absent. Anything else is refused with an error naming the plugin's path and both
 *   versions.
 *   - Optional parts: a group of functions added as optional (1.1's Collectives_*, 1.2's Device_Register) is all or
 *     nothing. A plugin sets every pointer of the group, or none (NULL: the plugin does not offer it, and Kiln does
 *     what it did before); some set and some NULL fails the load with an error naming the missing ones. A group may
 *     be required of some plugins from its version on: 1.2's Device_Register of a PRIVATEUSE1 plugin that reports 1.2
 *     or later (without it, or without Plugin_Info's device_name, the load fails saying so).
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
 *   - Buffers passed in by the caller (KILN_Device_Stats_Args.stats, the tensors' memory given to the collectives)
 *     are owned by the caller; the plugin reads and writes them during the call only and keeps no pointer to them.
 *   - A KILN_Communicator is owned by the caller from Collectives_CommInit until it passes it to
 *     Collectives_CommDestroy.
 *
 * THREADS
 *   Kiln may call every function from any thread, several at once, except Device_Setup and Device_Teardown, which
 *   are called from one thread at a time for a given device, Device_Register, which is called at most once, and the
 *   collectives (see COLLECTIVES below).
 *   Plugin_Initialize is called once, before any other function but the KILN_Error_* ones.
 *
 * LOADING
 *   Kiln opens the library with dlopen(RTLD_NOW | RTLD_LOCAL) from exactly the path it was given: every symbol the
 *   plugin needs must resolve when it is opened, from its own dependencies or the process's libraries, and its own
 *   symbols are visible to no other library. Exporting KILN_GetPluginApi alone is recommended.
 *
 * DEVICES AND LIBTORCH
 *   Kiln computes with LibTorch on the device type a plugin reports (KILN_Device_Type). KILN_DEVICE_TYPE_CPU needs
 *   nothing from the plugin's side. A plugin with its own hardware reports KILN_DEVICE_TYPE_PRIVATEUSE1, LibTorch's
 *   slot for an out-of-tree device, of which a process has one.
 *   - Since 1.2 the plugin declares its device and Kiln registers it: Plugin_Info's device_name is the name LibTorch
 *     gives the device ("acme_npu": tensors on "acme_npu:0"), and Device_Register registers the device with LibTorch
 *     (allocator, device guard, kernels, runtime hooks, the name). Kiln calls Device_Register at most once per
 *     process, when the plugin's accelerator is first chosen (its devices parsed, listed or set up, or its
 *     collectives made; never to count devices, check availability or list accelerators), and only after checking
 *     that no other device holds PrivateUse1. A second PrivateUse1 device is refused before anything of it is
 *     registered, with an error that names both devices and where each came from, and Kiln reports the plugin
 *     unavailable for that reason (so "auto" skips it). Nothing registers from a static initialiser or in
 *     Plugin_Initialize: several device plugins may be loaded into one process, and a program that loads one still
 *     trains on CUDA when CUDA is chosen.
 *   - A plugin built with Kiln's device kit (hal/device_kit: a kiln::device_kit::Device with the device's count,
 *     memory and copies; the kit does the rest) calls kiln::device_kit::Register in Device_Register and gets all of
 *     this, bf16-mixed's autocast kernels included; examples/device_plugin is one, built outside Bazel from the kit's
 *     sources.
 *   - Deprecated (1.1 and older, still loaded for one release): the plugin registers its device itself when it is
 *     loaded. Kiln refuses such a plugin when another PrivateUse1 device was registered before it was loaded, but
 *     LibTorch may abort the process before Kiln can (it allows one set of PrivateUse1 runtime hooks).
 *   Either way the plugin links the same LibTorch shared libraries as the Kiln program that loads it (`fit
 *   --version` says which), so that its registrations reach the process's dispatcher; Kiln builds against LibTorch
 *   2.8 or later. Kiln's plans, statistics, logs and errors call the devices "acme_npu:N". LibTorch 2.x takes the
 *   named device for the process's accelerator, and CUDA's autograd fails in that process: Kiln's CUDA accelerator
 *   refuses to train beside a named PrivateUse1 device. A named device must also register
 *   at::PrivateUse1HooksInterface (at::RegisterPrivateUse1HooksInterface), which LibTorch asks for the device count
 *   and a default generator per device (at::manual_seed does); with autocast kernels registered for the
 *   AutocastPrivateUse1 key it can declare bf16-mixed (or 16-mixed). The trainer reads checkpoints onto the CPU, so
 *   that one written on the device loads on any machine.
 *
 * COLLECTIVES (1.1, optional)
 *   A plugin whose vendor has a collective communication library (CCL) offers it through the Collectives_*
 *   functions, and data-parallel training (`--strategy=ddp`) then exchanges the device's tensors through it. The
 *   shape is the one vendors' CCLs share:
 *   - Rank 0 calls Collectives_GetUniqueId; Kiln hands the bytes to every other rank through the job's own
 *     rendezvous (its c10d store); every rank then calls Collectives_CommInit with the same bytes, its rank, the
 *     world size and its device, and gets a KILN_Communicator.
 *   - AllReduce, Broadcast, AllGather, ReduceScatter and Barrier run on a communicator. Buffers are the tensors'
 *     memory on the plugin's device type (host memory for KILN_DEVICE_TYPE_CPU), dense and contiguous, `count`
 *     elements of `data_type`. Every call completes before it returns: the results are in the receive buffers.
 *   - Every call is bounded by the communicator's timeout (CommInit's by its own timeout_ms): a peer that does not
 *     arrive in time is a DEADLINE_EXCEEDED error whose message names the call and the missing rank; a peer that is
 *     gone (its connection closed) is UNAVAILABLE naming the rank. A data type or reduction the plugin does not
 *     support is UNIMPLEMENTED, naming it. After any error from a collective, the caller uses the communicator only
 *     to destroy it (the ranks may be out of step); a plugin fails later calls on a broken communicator at once
 *     rather than waiting.
 *   - Threads: the calls on one communicator come from one thread at a time, and every rank makes the same calls,
 *     with the same counts, types and roots, in the same order. Different communicators may be used at once.
 *   - 1.3: a CCL without some of them still offers all eight functions (the missing ones return UNIMPLEMENTED) and
 *     says which it lacks in Plugin_Info's collectives_lacking (KILN_COLLECTIVE_* flags): Kiln's conformance suite
 *     then skips their checks, saying so, and fsdp all-reduces where it would reduce-scatter, and refuses to start
 *     without an all-gather.
 *   - Plugin_Info's process_group_backend names the CCL ("acme_ccl"), not "gloo", which names Kiln's own host
 *     transport. Without these functions Kiln uses Gloo for a plugin whose device type is the CPU; for a PRIVATEUSE1
 *     plugin whose device Kiln registers (1.2, Device_Register), Gloo on copies of the tensors in host memory (slow
 *     and exact: what a device trains data-parallel on before its CCL is wired in), under the name
 *     process_group_backend gives, which is not "gloo" either ("acme_npu_staged": a process group files its backends
 *     by name, and "gloo" is its host transport for CPU values); and for another device type no data-parallel training
 *     (an error saying so).
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
#define KILN_PLUGIN_API_MINOR 3

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

/* 1.1: the element type of a collective's buffers (at::ScalarType's names). */
typedef enum KILN_Data_Type {
  KILN_DATA_TYPE_FLOAT32 = 1,
  KILN_DATA_TYPE_FLOAT64 = 2,
  KILN_DATA_TYPE_FLOAT16 = 3,  /* IEEE 754 binary16 */
  KILN_DATA_TYPE_BFLOAT16 = 4, /* the upper half of a float32 */
  KILN_DATA_TYPE_INT8 = 5,
  KILN_DATA_TYPE_UINT8 = 6,
  KILN_DATA_TYPE_INT32 = 7,
  KILN_DATA_TYPE_INT64 = 8,
  KILN_DATA_TYPE_BOOL = 9 /* one byte, 0 or 1 */
} KILN_Data_Type;

/* 1.1: how a collective combines the ranks' values, element by element. */
typedef enum KILN_Reduce_Op {
  KILN_REDUCE_OP_SUM = 1,
  KILN_REDUCE_OP_PRODUCT = 2,
  KILN_REDUCE_OP_MIN = 3,
  KILN_REDUCE_OP_MAX = 4
} KILN_Reduce_Op;

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
 * the load. Kiln reads strings of at most 4096 bytes (here, and a statistic's name) and at most 64 aliases; a longer
 * string or more aliases fails the load (or the Device_Stats call). */
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
  /* out: torch.distributed backend for data-parallel training: "gloo" for host memory; the plugin's own name, never
   * "gloo", with collectives or for a PRIVATEUSE1 device of 1.2 or later (see COLLECTIVES). */
  const char* process_group_backend;
  const KILN_Precision* precisions;       /* out: what it can train in, most preferred first; at least one. */
  size_t num_precisions;                  /* out */
  /* out, optional: appended to Kiln's errors about device indices, to say what decides which devices are visible
   * (for example "ACME_VISIBLE_DEVICES=0,1"). */
  bool visibility_hint_is_set;
  const char* visibility_hint;
  /* 1.2. out, required of a KILN_DEVICE_TYPE_PRIVATEUSE1 plugin that reports 1.2 or later (ignored for other device
   * types): the name LibTorch gives its device, which Device_Register registers ("acme_npu": tensors on
   * "acme_npu:0"). A lower-case letter, then lower-case letters, digits and '_'. Kiln reads it before anything is
   * registered, to refuse a second PrivateUse1 device by name. */
  const char* device_name;
  /* 1.3. out, optional: the collectives the plugin's Collectives_* cannot do, KILN_COLLECTIVE_* flags or'ed together
   * (0, the zero-filled default: none lacking). Only with collectives; any other bit fails the load. */
  uint32_t collectives_lacking;
} KILN_Plugin_Info_Args;
KILN_DEFINE_STRUCT_SIZE(KILN_Plugin_Info_Args, collectives_lacking);

/* 1.3: the flags of Plugin_Info's collectives_lacking. */
#define KILN_COLLECTIVE_ALL_GATHER 0x1u     /* Collectives_AllGather */
#define KILN_COLLECTIVE_REDUCE_SCATTER 0x2u /* Collectives_ReduceScatter */
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
  /* out: INDEXED: the devices visible to this process, at most 128 (LibTorch indexes a device type's devices with
   * c10::DeviceIndex, an int8_t; Kiln refuses a larger count). PROCESSES: how many processes "auto" means (usually
   * 1; at most 65536). */
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

/* 1.2, optional (required of a KILN_DEVICE_TYPE_PRIVATEUSE1 plugin that reports 1.2 or later; NULL for other device
 * types, for which Kiln never calls it): registers the plugin's device with LibTorch, named Plugin_Info's
 * device_name, with everything LibTorch needs of it (see DEVICES AND LIBTORCH at the top). A plugin built with Kiln's
 * device kit calls kiln::device_kit::Register here and turns a refusal into an error.
 *
 * Kiln calls it at most once per process, from one thread, when the plugin's accelerator is first chosen, and only
 * after checking that no other device holds PrivateUse1; it is the plugin's first and only registration with
 * LibTorch. NULL means that LibTorch's PrivateUse1 device is now device_name, with a device guard (Kiln checks both).
 * Otherwise an error saying why not: FAILED_PRECONDITION when LibTorch has another PrivateUse1 device (naming it), or
 * what the device's runtime said. Kiln keeps the outcome and does not call again. */
typedef struct KILN_Device_Register_Args {
  size_t struct_size;
} KILN_Device_Register_Args;
KILN_DEFINE_STRUCT_SIZE(KILN_Device_Register_Args, struct_size);
typedef KILN_Error* KILN_Device_Register(KILN_Device_Register_Args* args);

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
 * Collectives (1.1, optional; see COLLECTIVES at the top). KILN_Communicator is opaque: each plugin defines it.
 * ------------------------------------------------------------------------------------------------------------- */

typedef struct KILN_Communicator KILN_Communicator;

/* The most bytes a unique id may have. */
#define KILN_COLLECTIVES_UNIQUE_ID_MAX_BYTES 128

/* Called on rank 0 only, once per communicator to be made: the bytes that let the other ranks find rank 0 and
 * join it (an address and a nonce, say). Kiln copies them to the other ranks unchanged. The plugin may hold
 * resources for the id (a listening socket) until rank 0's Collectives_CommInit with it, or until the process
 * exits when that never comes. */
typedef struct KILN_Collectives_GetUniqueId_Args {
  size_t struct_size;
  uint8_t unique_id[KILN_COLLECTIVES_UNIQUE_ID_MAX_BYTES]; /* out: the first unique_id_size bytes. */
  size_t unique_id_size;                                   /* out: 1 to KILN_COLLECTIVES_UNIQUE_ID_MAX_BYTES. */
} KILN_Collectives_GetUniqueId_Args;
KILN_DEFINE_STRUCT_SIZE(KILN_Collectives_GetUniqueId_Args, unique_id_size);
typedef KILN_Error* KILN_Collectives_GetUniqueId(KILN_Collectives_GetUniqueId_Args* args);

/* Called on every rank with the same unique id: joins the communicator of world_size ranks as rank `rank`, on the
 * device device_index (as in the Device_* functions). Returns once every rank has joined, or fails within
 * timeout_ms (DEADLINE_EXCEEDED naming the ranks that did not join). timeout_ms also bounds every later call on the
 * communicator. */
typedef struct KILN_Collectives_CommInit_Args {
  size_t struct_size;
  uint8_t unique_id[KILN_COLLECTIVES_UNIQUE_ID_MAX_BYTES]; /* in: the first unique_id_size bytes. */
  size_t unique_id_size;                                   /* in */
  int32_t rank;                                            /* in: 0 to world_size - 1. */
  int32_t world_size;                                      /* in: 1 or more. */
  int32_t device_index;                                    /* in */
  int64_t timeout_ms;                                      /* in: more than 0. */
  KILN_Communicator* communicator;                         /* out: owned by the caller (Collectives_CommDestroy). */
} KILN_Collectives_CommInit_Args;
KILN_DEFINE_STRUCT_SIZE(KILN_Collectives_CommInit_Args, communicator);
typedef KILN_Error* KILN_Collectives_CommInit(KILN_Collectives_CommInit_Args* args);

/* Releases a communicator (not NULL), which the caller owned; also a broken one. It is invalid afterwards, even
 * when this returns an error. Does not wait for the other ranks. */
typedef struct KILN_Collectives_CommDestroy_Args {
  size_t struct_size;
  KILN_Communicator* communicator; /* in: taken by this call. */
} KILN_Collectives_CommDestroy_Args;
KILN_DEFINE_STRUCT_SIZE(KILN_Collectives_CommDestroy_Args, communicator);
typedef KILN_Error* KILN_Collectives_CommDestroy(KILN_Collectives_CommDestroy_Args* args);

/* recv[i] = op over the ranks of send[i], for i < count, on every rank. send and recv may be the same buffer. */
typedef struct KILN_Collectives_AllReduce_Args {
  size_t struct_size;
  KILN_Communicator* communicator; /* in: borrowed. */
  const void* send_buffer;         /* in: count elements. */
  void* recv_buffer;               /* in: count elements, written by the call. */
  size_t count;                    /* in */
  KILN_Data_Type data_type;        /* in */
  KILN_Reduce_Op op;               /* in */
} KILN_Collectives_AllReduce_Args;
KILN_DEFINE_STRUCT_SIZE(KILN_Collectives_AllReduce_Args, op);
typedef KILN_Error* KILN_Collectives_AllReduce(KILN_Collectives_AllReduce_Args* args);

/* Every rank's buffer becomes root's. */
typedef struct KILN_Collectives_Broadcast_Args {
  size_t struct_size;
  KILN_Communicator* communicator; /* in: borrowed. */
  void* buffer;                    /* in: count elements; read on root, written on the others. */
  size_t count;                    /* in */
  KILN_Data_Type data_type;        /* in */
  int32_t root;                    /* in: the rank whose buffer is sent. */
} KILN_Collectives_Broadcast_Args;
KILN_DEFINE_STRUCT_SIZE(KILN_Collectives_Broadcast_Args, root);
typedef KILN_Error* KILN_Collectives_Broadcast(KILN_Collectives_Broadcast_Args* args);

/* recv holds every rank's send, in rank order: rank r's count elements at recv + r * count. */
typedef struct KILN_Collectives_AllGather_Args {
  size_t struct_size;
  KILN_Communicator* communicator; /* in: borrowed. */
  const void* send_buffer;         /* in: count elements. */
  void* recv_buffer;               /* in: count * world_size elements, written by the call; not send_buffer. */
  size_t count;                    /* in: per rank. */
  KILN_Data_Type data_type;        /* in */
} KILN_Collectives_AllGather_Args;
KILN_DEFINE_STRUCT_SIZE(KILN_Collectives_AllGather_Args, data_type);
typedef KILN_Error* KILN_Collectives_AllGather(KILN_Collectives_AllGather_Args* args);

/* Rank r's recv[i] = op over the ranks of send[r * count + i], for i < count. */
typedef struct KILN_Collectives_ReduceScatter_Args {
  size_t struct_size;
  KILN_Communicator* communicator; /* in: borrowed. */
  const void* send_buffer;         /* in: count * world_size elements. */
  void* recv_buffer;               /* in: count elements, written by the call; not within send_buffer. */
  size_t count;                    /* in: per rank. */
  KILN_Data_Type data_type;        /* in */
  KILN_Reduce_Op op;               /* in */
} KILN_Collectives_ReduceScatter_Args;
KILN_DEFINE_STRUCT_SIZE(KILN_Collectives_ReduceScatter_Args, op);
typedef KILN_Error* KILN_Collectives_ReduceScatter(KILN_Collectives_ReduceScatter_Args* args);

/* Returns once every rank has called it. */
typedef struct KILN_Collectives_Barrier_Args {
  size_t struct_size;
  KILN_Communicator* communicator; /* in: borrowed. */
} KILN_Collectives_Barrier_Args;
KILN_DEFINE_STRUCT_SIZE(KILN_Collectives_Barrier_Args, communicator);
typedef KILN_Error* KILN_Collectives_Barrier(KILN_Collectives_Barrier_Args* args);

/* ---------------------------------------------------------------------------------------------------------------
 * The function table and the entry point.
 * ------------------------------------------------------------------------------------------------------------- */

/* Every 1.0 function is required (non-NULL). The 1.1 collectives are optional, all eight or none. 1.2's Device_Register
 * is a group of its own: required of a PRIVATEUSE1 plugin that reports 1.2 or later, NULL otherwise. New functions
 * are only ever added at the end. */
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

  /* 1.1, optional: collectives */
  KILN_Collectives_GetUniqueId* Collectives_GetUniqueId;
  KILN_Collectives_CommInit* Collectives_CommInit;
  KILN_Collectives_CommDestroy* Collectives_CommDestroy;
  KILN_Collectives_AllReduce* Collectives_AllReduce;
  KILN_Collectives_Broadcast* Collectives_Broadcast;
  KILN_Collectives_AllGather* Collectives_AllGather;
  KILN_Collectives_ReduceScatter* Collectives_ReduceScatter;
  KILN_Collectives_Barrier* Collectives_Barrier;

  /* 1.2, optional: the device's registration with LibTorch (see Device_Register) */
  KILN_Device_Register* Device_Register;
} KILN_Plugin_Api;
KILN_DEFINE_STRUCT_SIZE(KILN_Plugin_Api, Device_Register);

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
