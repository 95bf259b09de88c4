#include "nccl/src/type_map.h"

#include <string>

namespace collectived::nccl {

Status MapType(int datatype, TypeInfo* out) {
  *out = TypeInfo{};
  switch (datatype) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      out->size = 1;
      return Status::Ok();
    case ncclInt32:
      *out = {4, DataType::kInt32, false};
      return Status::Ok();
    case ncclUint32:
      *out = {4, DataType::kUint32, false};
      return Status::Ok();
    case ncclInt64:
      *out = {8, DataType::kInt64, false};
      return Status::Ok();
    case ncclUint64:
      *out = {8, DataType::kInt64, true};
      return Status::Ok();
    case ncclFloat16:
      *out = {2, DataType::kFloat16, false};
      return Status::Ok();
    case ncclFloat32:
      *out = {4, DataType::kFloat32, false};
      return Status::Ok();
    case ncclFloat64:
      *out = {8, DataType::kFloat64, false};
      return Status::Ok();
    case ncclBfloat16:
      *out = {2, DataType::kBFloat16, false};
      return Status::Ok();
    default:
      return Status::InvalidArgument("datatype " + std::to_string(datatype) + " is not an NCCL data type");
  }
}

Status MapReduction(int datatype, int op, DataType* dtype, ReduceOp* rop) {
  TypeInfo t;
  COLLECTIVED_RETURN_IF_ERROR(MapType(datatype, &t));
  switch (op) {
    case ncclSum: *rop = ReduceOp::kSum; break;
    case ncclProd: *rop = ReduceOp::kProd; break;
    case ncclMax: *rop = ReduceOp::kMax; break;
    case ncclMin: *rop = ReduceOp::kMin; break;
    case ncclAvg: *rop = ReduceOp::kAvg; break;
    default:
      return Status::InvalidArgument("op " + std::to_string(op) +
                                     " is not sum, prod, max, min or avg (custom PreMulSum ops are not supported)");
  }
  if (t.native == DataType::kUnspecified) {
    return Status::InvalidArgument("datatype " + std::to_string(datatype) +
                                   ": collectived reduces no 1-byte or fp8 type (all-gather and broadcast move them)");
  }
  // Two's-complement sums and products have the same bits signed or
  // unsigned; comparisons and division do not.
  if (t.unsigned64 && *rop != ReduceOp::kSum && *rop != ReduceOp::kProd) {
    return Status::InvalidArgument("op " + std::string(ReduceOpName(*rop)) +
                                   " on ncclUint64 is not supported (only sum and prod)");
  }
  if (!IsValidReduction(t.native, *rop)) {
    return Status::InvalidArgument("op avg needs a floating datatype, not " + std::string(DataTypeName(t.native)));
  }
  *dtype = t.native;
  return Status::Ok();
}

ncclResult_t ResultFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return ncclSuccess;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return ncclInvalidArgument;
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAlreadyExists:
    case StatusCode::kNotFound:
    case StatusCode::kPermissionDenied:
    case StatusCode::kUnauthenticated:
    case StatusCode::kUnimplemented:
      return ncclInvalidUsage;
    // A peer left, died or stalled, or a node (or the daemon) is gone.
    case StatusCode::kAborted:
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kCancelled:
      return ncclRemoteError;
    case StatusCode::kResourceExhausted:
      return ncclSystemError;
    default:
      return ncclInternalError;
  }
}

const char* ResultString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled CUDA error (ncclGetLastError says which call)";
    case ncclSystemError: return "system error: out of a resource (ncclGetLastError says which)";
    case ncclInternalError: return "internal error in collectived (ncclGetLastError says where)";
    case ncclInvalidArgument: return "invalid argument (ncclGetLastError names the field)";
    case ncclInvalidUsage: return "invalid usage, or a call collectived does not support (ncclGetLastError names it)";
    case ncclRemoteError: return "a peer left or died, a node or the daemon was lost, or an op timed out";
    case ncclInProgress: return "operation in progress";
    default: return "unknown result code";
  }
}

}  // namespace collectived::nccl
