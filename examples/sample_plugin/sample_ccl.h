// sample_ccl: the sample plugin's collective communication library, the plugin C API's optional collectives (1.1)
// over TCP sockets on the host. It is the shape a vendor's CCL has (a unique id from rank 0, a communicator per
// rank, all-reduce, broadcast, all-gather, reduce-scatter, barrier), written to be read rather than to be fast:
//
//   - Collectives_GetUniqueId (rank 0) opens a listening socket on an ephemeral port and returns
//     "sample_ccl/1 <host> <port> <nonce>": the host is 127.0.0.1, or SAMPLE_CCL_HOST when set (then it listens on
//     every interface, for ranks on other hosts); the nonce is 128 random bits.
//   - Collectives_CommInit connects every other rank to rank 0 (a star), each saying the nonce and its rank; rank 0
//     confirms once all have joined. Within the timeout, or DEADLINE_EXCEEDED naming the ranks that did not join.
//   - Every collective goes through rank 0: each rank sends a header (which call, type, count) and its data; rank 0
//     checks that the calls agree, combines the data in rank order (so results are the same on every run), and
//     sends each rank its result, or the error it met, so that every rank reports the same cause.
//   - All socket I/O is non-blocking and waits with poll() for what is left of the call's deadline (the
//     communicator's timeout; ranks other than 0 give rank 0 one more second to report what went wrong). A peer that
//     does not answer in time is DEADLINE_EXCEEDED naming it and the call; a peer whose connection closed is
//     UNAVAILABLE naming it. After such an error the communicator is broken: rank 0 closes every connection so that
//     the other ranks fail at once, and later calls fail. INVALID_ARGUMENT and UNIMPLEMENTED about a call's own
//     arguments are found before any data moves, identically on every rank, and leave the communicator usable
//     (more than the header promises); ranks whose calls differ are an INVALID_ARGUMENT that breaks it.
//
// Types: FLOAT32, FLOAT64, BFLOAT16 (combined in float, rounded to bfloat16 after each rank, as bfloat16 arithmetic
// does), INT8, UINT8, INT32, INT64 (sums and products wrap), BOOL (SUM and MAX are "or", PRODUCT and MIN "and"), with
// SUM, PRODUCT, MIN and MAX. FLOAT16 is UNIMPLEMENTED.
//
// Thread-safety: as the header says: one call at a time per communicator; different communicators are independent.
#ifndef KILN_EXAMPLES_SAMPLE_PLUGIN_SAMPLE_CCL_H_
#define KILN_EXAMPLES_SAMPLE_PLUGIN_SAMPLE_CCL_H_

#include "hal/plugin/kiln_plugin_c_api.h"

namespace sample_plugin {

// Plugin_Info's process_group_backend.
inline constexpr char kCclName[] = "sample_ccl";

KILN_Error* CollectivesGetUniqueId(KILN_Collectives_GetUniqueId_Args* args);
KILN_Error* CollectivesCommInit(KILN_Collectives_CommInit_Args* args);
KILN_Error* CollectivesCommDestroy(KILN_Collectives_CommDestroy_Args* args);
KILN_Error* CollectivesAllReduce(KILN_Collectives_AllReduce_Args* args);
KILN_Error* CollectivesBroadcast(KILN_Collectives_Broadcast_Args* args);
KILN_Error* CollectivesAllGather(KILN_Collectives_AllGather_Args* args);
KILN_Error* CollectivesReduceScatter(KILN_Collectives_ReduceScatter_Args* args);
KILN_Error* CollectivesBarrier(KILN_Collectives_Barrier_Args* args);

}  // namespace sample_plugin

#endif  // KILN_EXAMPLES_SAMPLE_PLUGIN_SAMPLE_CCL_H_
