#include "daemon/copy_engine_plan.h"

#include <algorithm>
#include <string>

namespace collectived::daemon {

Status CopyEnginePlan::Make(uint32_t world, uint64_t count, uint64_t es, uint64_t scratch_bytes,
                            CopyEnginePlan* out) {
  if (world == 0 || world > 16 || es == 0) {
    return Status::InvalidArgument("copy-engine plan: 1 to 16 ranks and a known element size");
  }
  const uint64_t chunk_max = scratch_bytes / es / (uint64_t{world} * world);  // elements per slot
  if (chunk_max == 0) {
    return Status::InvalidArgument("copy-engine scratch of " + std::to_string(scratch_bytes) + " bytes holds less "
                                   "than one element per slot for " + std::to_string(world) + " ranks");
  }
  out->world_ = world;
  out->count_ = count;
  out->piece_max_ = chunk_max * world;
  return Status::Ok();
}

uint64_t CopyEnginePlan::chunk(uint64_t i) const {
  const uint64_t piece = std::min(piece_max_, count_ - i * piece_max_);
  return (piece + world_ - 1) / world_;
}

CopyEnginePlan::Part CopyEnginePlan::part(uint64_t i, uint32_t owner) const {
  const uint64_t base = i * piece_max_;
  const uint64_t piece = std::min(piece_max_, count_ - base);
  const uint64_t c = (piece + world_ - 1) / world_;
  const uint64_t begin = std::min<uint64_t>(uint64_t{owner} * c, piece);
  return {base + begin, std::min(c, piece - begin)};
}

}  // namespace collectived::daemon
