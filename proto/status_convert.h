// collectived::Status <-> grpc::Status. The codes share gRPC's numbering.
#ifndef COLLECTIVED_PROTO_STATUS_CONVERT_H_
#define COLLECTIVED_PROTO_STATUS_CONVERT_H_

#include <grpcpp/support/status.h>

#include "collectived/status.h"

namespace collectived {

inline grpc::Status ToGrpcStatus(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), s.message());
}

inline Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return Status::Ok();
  return Status(static_cast<StatusCode>(s.error_code()), s.error_message());
}

}  // namespace collectived

#endif  // COLLECTIVED_PROTO_STATUS_CONVERT_H_
