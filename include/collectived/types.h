// Element types, reductions and collective kinds. Values match the proto enums
// of collectived.v1 so they cross the wire and the shared rings unchanged.
#ifndef COLLECTIVED_TYPES_H_
#define COLLECTIVED_TYPES_H_

#include <cstddef>
#include <cstdint>

namespace collectived {

enum class DataType : uint32_t {
  kUnspecified = 0,
  kFloat32 = 1,
  kFloat64 = 2,
  kFloat16 = 3,
  kBFloat16 = 4,
  kInt32 = 5,
  kInt64 = 6,
  kUint32 = 7,
};

enum class ReduceOp : uint32_t {
  kUnspecified = 0,
  kSum = 1,
  kProd = 2,
  kMin = 3,
  kMax = 4,
  kAvg = 5,  // floating types only
};

enum class CollectiveKind : uint32_t {
  kUnspecified = 0,
  kAllReduce = 1,
  kAllGather = 2,
};

enum class ExecutionMode : uint32_t {
  kDefault = 0,  // the backend's default (client-executed on host and GPU)
  kClient = 1,   // each client process runs its own rank's part
  kDaemon = 2,   // daemon worker threads run every rank's part
};

// Bytes per element; 0 for an unknown type.
size_t DataTypeSize(DataType dtype);
const char* DataTypeName(DataType dtype);
const char* ReduceOpName(ReduceOp op);
const char* CollectiveKindName(CollectiveKind kind);
const char* ExecutionModeName(ExecutionMode mode);
bool IsFloatingType(DataType dtype);
// True when `op` may be applied to `dtype` (avg needs a floating type).
bool IsValidReduction(DataType dtype, ReduceOp op);

}  // namespace collectived

#endif  // COLLECTIVED_TYPES_H_
