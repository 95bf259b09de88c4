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

// INVALID_ARGUMENT naming the first rank whose op differs from rank 0's
// (kind, dtype, reduction, count, algorithm) when they disagree.
Status MatchDescriptors(uint64_t index, const OpDescriptor* const* descs, uint32_t world_size);

}  // namespace collectived::ring

#endif  // COLLECTIVED_RING_MATCHER_H_
