// Checks on what clients send, applied where proto becomes domain types
// (daemon/service.cc), so that the registry only ever sees bounded, printable
// strings and numbers inside the daemon's own limits. Every failure is
// INVALID_ARGUMENT and names the field as the proto spells it.
#ifndef COLLECTIVED_DAEMON_VALIDATE_H_
#define COLLECTIVED_DAEMON_VALIDATE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "collectived/status.h"

namespace collectived::daemon::validate {

// Names and keys are stored, logged and echoed in stats: bounded so that
// stats stay far below the gRPC message limit.
inline constexpr size_t kMaxNameBytes = 256;        // client_name, key
inline constexpr size_t kMaxDeviceUuidBytes = 64;   // "GPU-" + 36 characters, with room
inline constexpr size_t kMaxReasonBytes = 1024;     // cannot_join
// The largest timeout any request may ask for; the same bound as the
// daemon's own --op-timeout-ms.
inline constexpr uint32_t kMaxTimeoutMs = 3600000;

// At most max_bytes, no control characters (bytes below 0x20 and 0x7f): they
// would forge log lines and break JSON.
Status String(std::string_view field, std::string_view value, size_t max_bytes);
// lo <= value <= hi.
Status Range(std::string_view field, uint64_t value, uint64_t lo, uint64_t hi);
// value is a multiple of alignment (alignment > 0).
Status Aligned(std::string_view field, uint64_t value, uint64_t alignment);
// known: whether value is one of the enum's numbers; the message gives the
// number, since an unknown value has no name.
Status Enum(std::string_view field, int value, bool known);

// s with control characters, backslash and non-ASCII bytes as \xNN: safe on
// one log line whatever the input.
std::string Printable(std::string_view s);

}  // namespace collectived::daemon::validate

#endif  // COLLECTIVED_DAEMON_VALIDATE_H_
