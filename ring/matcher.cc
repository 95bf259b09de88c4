#include "ring/matcher.h"

#include <string>

namespace collectived::ring {
namespace {

std::string Describe(const OpDescriptor& d) {
  std::string s = CollectiveKindName(d.kind);
  s += " ";
  s += DataTypeName(d.dtype);
  if (d.kind == CollectiveKind::kAllReduce) {
    s += " ";
    s += ReduceOpName(d.reduce_op);
  }
  s += " count=" + std::to_string(d.count) + " plan=" + AlgorithmName(d.algorithm);
  return s;
}

}  // namespace

Status ValidateDescriptor(const OpDescriptor& d, uint64_t max_message_bytes) {
  if (d.kind != CollectiveKind::kAllReduce && d.kind != CollectiveKind::kAllGather) {
    return Status::InvalidArgument("unknown collective kind " + std::to_string(static_cast<uint32_t>(d.kind)));
  }
  const size_t esize = DataTypeSize(d.dtype);
  if (esize == 0) return Status::InvalidArgument("unknown data type " + std::to_string(static_cast<uint32_t>(d.dtype)));
  if (d.kind == CollectiveKind::kAllReduce && !IsValidReduction(d.dtype, d.reduce_op)) {
    return Status::InvalidArgument(std::string("reduction ") + ReduceOpName(d.reduce_op) + " is not allowed on " +
                                   DataTypeName(d.dtype));
  }
  if (d.kind == CollectiveKind::kAllGather && d.reduce_op != ReduceOp::kUnspecified) {
    return Status::InvalidArgument("all_gather takes no reduction");
  }
  if (d.count == 0) return Status::InvalidArgument("count must be positive");
  if (d.count > max_message_bytes / esize) {
    return Status::InvalidArgument("message of " + std::to_string(d.count) + " x " + DataTypeName(d.dtype) +
                                   " exceeds the communicator's max of " + std::to_string(max_message_bytes) +
                                   " bytes per rank");
  }
  return Status::Ok();
}

Algorithm ChooseAlgorithm(CollectiveKind kind, uint64_t bytes, uint64_t one_shot_max_bytes) {
  if (kind == CollectiveKind::kAllGather) return Algorithm::kGather;
  return bytes <= one_shot_max_bytes ? Algorithm::kOneShot : Algorithm::kTwoShot;
}

uint64_t HostOneShotMaxBytes(uint64_t configured, uint32_t world_size, bool daemon_executed) {
  if (world_size == 2 && daemon_executed) return UINT64_MAX;
  if (world_size <= 2) return configured;
  return configured < kHostWideOneShotMaxBytes ? configured : kHostWideOneShotMaxBytes;
}

bool TwoShotClaimsPay(uint64_t bytes, uint32_t blocks_per_rank) {
  return blocks_per_rank != 0 && bytes / blocks_per_rank >= kClaimMinBlockTraffic / 2;
}

Status MatchDescriptors(uint64_t index, const OpDescriptor* const* descs, uint32_t world_size) {
  const OpDescriptor& a = *descs[0];
  for (uint32_t r = 1; r < world_size; ++r) {
    const OpDescriptor& b = *descs[r];
    if (a.kind != b.kind || a.dtype != b.dtype || a.count != b.count || a.algorithm != b.algorithm ||
        (a.kind == CollectiveKind::kAllReduce && a.reduce_op != b.reduce_op)) {
      return Status::InvalidArgument("op " + std::to_string(index) + " mismatch: rank 0 posted " + Describe(a) +
                                     ", rank " + std::to_string(r) + " posted " + Describe(b));
    }
  }
  return Status::Ok();
}

}  // namespace collectived::ring
