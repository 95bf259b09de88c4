// How the copy-engine all-reduce cuts an op into pieces that fit its scratch
// area, and each piece into one part per owner rank. Pure arithmetic, so it
// is tested without a GPU (copy_engine_plan_test.cc); GpuExecutor runs it.
#ifndef COLLECTIVED_DAEMON_COPY_ENGINE_PLAN_H_
#define COLLECTIVED_DAEMON_COPY_ENGINE_PLAN_H_

#include <cstdint>

#include "collectived/status.h"

namespace collectived::daemon {

// The scratch holds `world` slots of `chunk` elements per owner: slot (r, k)
// (rank k's part r) starts at element (r * world + k) * chunk.
class CopyEnginePlan {
 public:
  // INVALID_ARGUMENT unless 1 <= world <= 16, es > 0 and the scratch holds at
  // least one element per slot.
  static Status Make(uint32_t world, uint64_t count, uint64_t es, uint64_t scratch_bytes, CopyEnginePlan* out);

  struct Part {
    uint64_t begin = 0;  // first element of the op (owner r's part of this piece)
    uint64_t count = 0;  // elements; 0 when the piece has fewer elements than owners
  };
  uint64_t pieces() const { return count_ == 0 ? 0 : (count_ + piece_max_ - 1) / piece_max_; }
  // Elements per slot in piece i (parts are at most this long).
  uint64_t chunk(uint64_t i) const;
  Part part(uint64_t i, uint32_t owner) const;
  // Element offset of slot (owner, k) in the scratch, in piece i.
  uint64_t slot(uint64_t i, uint32_t owner, uint32_t k) const { return (uint64_t{owner} * world_ + k) * chunk(i); }

 private:
  uint32_t world_ = 1;
  uint64_t count_ = 0;
  uint64_t piece_max_ = 1;
};

}  // namespace collectived::daemon

#endif  // COLLECTIVED_DAEMON_COPY_ENGINE_PLAN_H_
