// The seeded random op mix shared by the test client and collective-stress:
// the same sequence on every rank (all-reduce of every dtype x op and
// all-gather, odd sizes, in and out of place), posted with exact inputs and
// poisoned outputs, and checked element by element.
#ifndef COLLECTIVED_TESTS_SUPPORT_OP_MIX_H_
#define COLLECTIVED_TESTS_SUPPORT_OP_MIX_H_

#include <cstdint>
#include <random>

#include "collectived/client.h"

namespace collectived::testing {

struct MixedOp {
  bool gather = false;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;  // kUnspecified for all-gather
  uint64_t count = 0;
  bool in_place = false;
  uint64_t seed = 0;  // of the inputs
};

// Draws op number `k` of the mix; `rng` seeded the same on every rank.
MixedOp NextMixedOp(std::mt19937_64& rng, uint64_t max_count, uint64_t run_seed, uint64_t k);

// Fills this rank's inputs, poisons the output and posts the op (through the
// Submit RPC when `via_rpc`). send holds max_count x 8 bytes, recv world times that.
Status PostMixedOp(Communicator& comm, const MixedOp& op, Buffer& send, Buffer& recv, bool via_rpc, Handle* handle);

// Wrong elements of a completed op's output.
uint64_t CountWrongMixedOp(const MixedOp& op, uint32_t world, const Buffer& send, const Buffer& recv);

}  // namespace collectived::testing

#endif  // COLLECTIVED_TESTS_SUPPORT_OP_MIX_H_
