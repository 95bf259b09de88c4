// Private: how NCCL's types, reductions and statuses map to collectived's.
#ifndef COLLECTIVED_NCCL_SRC_TYPE_MAP_H_
#define COLLECTIVED_NCCL_SRC_TYPE_MAP_H_

#include <cstddef>

#include "collectived/status.h"
#include "collectived/types.h"
#include "nccl.h"

namespace collectived::nccl {

// What an NCCL data type is here. Data movement (all-gather, broadcast)
// never interprets elements, so it works for every type; reductions need a
// kernel type.
struct TypeInfo {
  size_t size = 0;                                 // bytes per element
  DataType native = DataType::kUnspecified;        // collectived's type of the same layout; none for 1-byte types
  bool unsigned64 = false;                         // ncclUint64: reduced as int64 where the bits agree
};

// INVALID_ARGUMENT naming `datatype` for a value outside NCCL's enum.
Status MapType(int datatype, TypeInfo* out);
// The kernel type and reduction for `op` on `datatype`; INVALID_ARGUMENT
// naming the field when collectived cannot reduce it exactly (1-byte and fp8
// types, custom PreMulSum ops, avg of integers, min/max of uint64).
Status MapReduction(int datatype, int op, DataType* dtype, ReduceOp* rop);

// The ncclResult_t a failed Status becomes (ncclSuccess for OK).
ncclResult_t ResultFor(const Status& s);
// NCCL's fixed text of a result.
const char* ResultString(ncclResult_t r);

}  // namespace collectived::nccl

#endif  // COLLECTIVED_NCCL_SRC_TYPE_MAP_H_
