// The matcher: checks one rank's descriptor on its own, and that the i-th op
// of every rank is the same collective. Pure functions; the executor calls
// them in its prologue on every rank, so every rank reaches the same verdict.
#ifndef COLLECTIVED_RING_MATCHER_H_
#define COLLECTIVED_RING_MATCHER_H_

#include <cstdint>

#include "collectived/status.h"
#include "ring/segment_layout.h"

namespace collectived::ring {

// Checks kind, dtype, reduction and size of `desc` against the limits of a
// communicator (per-rank input at most `max_message_bytes`).
Status ValidateDescriptor(const OpDescriptor& desc, uint64_t max_message_bytes);

// The plan the poster puts in a descriptor: all-reduce up to
// `one_shot_max_bytes` is one-shot, above it two-shot; all-gather gathers.
Algorithm ChooseAlgorithm(CollectiveKind kind, uint64_t bytes, uint64_t one_shot_max_bytes);

// A host communicator's one-shot limit (its segment's one_shot_max_bytes,
// which every poster reads) from the daemon's --one-shot-max-bytes: that
// limit at two ranks, at most kHostWideOneShotMaxBytes at more. One-shot has
// every rank read every peer's whole input from other cores' caches, (n - 1)
// x S, where two-shot reads about 2 x S and meets once more: on 16 cores
// two-shot was 1.5-5x faster from 4 KiB up at 4 and 8 processes, and even
// at 2 (bench/RESULTS.md, "Host backend: one-shot or two-shot"). GPU
// communicators keep the configured limit.
// Daemon-executed at two ranks, one-shot at every size: the daemon maps
// every rank's buffers, so one-shot reads both inputs where they are and
// writes the output in one pass, with no shard slot, copy-out or mid
// barrier; on 16 cores 1.4-1.8x faster than two-shot from 1 to 16 MiB,
// where client-executed ops (inputs copied into slots first) lost 5-25 %
// with it (bench/RESULTS.md, "Host backend against Open MPI, now").
constexpr uint64_t kHostWideOneShotMaxBytes = 2048;
uint64_t HostOneShotMaxBytes(uint64_t configured, uint32_t world_size, bool daemon_executed);

// Whether a GPU two-shot push of `bytes` a rank, `blocks_per_rank` blocks on
// every rank, claims its work (DeviceOpArgs::claim_work) where the
// communicator can: where each block moves at least kClaimMinBlockTraffic
// (the op reads world x bytes and writes as much over world x blocks
// blocks). Claims even out the blocks' ends, which a static split leaves
// further apart the longer a block runs, at a cost that does not shrink
// with the op: on an H100 (132 SMs, one block a rank per SM: 16 / 33 / 66
// blocks at 8 / 4 / 2 ranks), 16 MiB at 8 ranks (2 MiB a block) and 64 MiB
// at 2, 4 and 8 ranks (2-8 MiB) got 2.4-4.5 % faster; 16 MiB at 4 ranks
// (1 MiB a block) and 2 (0.5 MiB) got 2.4-6.4 % slower (bench/RESULTS.md,
// "Claimed two-shot"). The bound lies between those cells.
constexpr uint64_t kClaimMinBlockTraffic = 1536 * 1024;
bool TwoShotClaimsPay(uint64_t bytes, uint32_t blocks_per_rank);

// INVALID_ARGUMENT naming the first rank whose op differs from rank 0's
// (kind, dtype, reduction, count, algorithm) when they disagree.
Status MatchDescriptors(uint64_t index, const OpDescriptor* const* descs, uint32_t world_size);

}  // namespace collectived::ring

#endif  // COLLECTIVED_RING_MATCHER_H_
