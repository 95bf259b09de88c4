// The version of the collectived.v1 API that this build speaks. A client and
// a daemon agree when the majors are equal; the minor names what was added.
#ifndef COLLECTIVED_API_VERSION_H_
#define COLLECTIVED_API_VERSION_H_

#include <cstdint>

namespace collectived {

constexpr uint32_t kApiMajor = 1;
// 1.1: GPU communicators; 1.2: cannot_join; 1.3: registered GPU buffers;
// 1.4: every call naming a session carries its token (kSessionTokenMetadata);
// 1.5: communicators across nodes (CreateCommunicatorResponse.segment_rank);
// 1.6: stats carry latency percentiles, stalls and the session list.
constexpr uint32_t kApiMinor = 6;

// gRPC metadata key of the session token (AttachResponse.session_token, in
// decimal) on every call that names a session: the daemon refuses a call
// without it with PERMISSION_DENIED.
constexpr char kSessionTokenMetadata[] = "collectived-session-token";

}  // namespace collectived

#endif  // COLLECTIVED_API_VERSION_H_
