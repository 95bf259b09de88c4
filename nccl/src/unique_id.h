// Private: what an ncclUniqueId of collectived carries, and how.
#ifndef COLLECTIVED_NCCL_SRC_UNIQUE_ID_H_
#define COLLECTIVED_NCCL_SRC_UNIQUE_ID_H_

#include <string>

#include "collectived/status.h"
#include "nccl.h"

namespace collectived::nccl {

// The id's 128 bytes: a magic, the communicator key (32 hex digits from the
// kernel's random source) and the daemon's socket path of the rank that made
// it (each rank may name its own node's daemon with COLLECTIVED_SOCKET).
struct UniqueId {
  std::string key;
  std::string socket;
};

constexpr size_t kMaxIdSocketBytes = 87;  // what fits after the magic and the key, with its NUL

// A fresh key; INTERNAL when the random source fails.
Status FreshKey(std::string* key);
// INVALID_ARGUMENT naming `socket` when it does not fit.
Status EncodeUniqueId(const UniqueId& id, ncclUniqueId* out);
// INVALID_ARGUMENT naming `commId` when the bytes were not made by EncodeUniqueId.
Status DecodeUniqueId(const ncclUniqueId& in, UniqueId* out);

// The daemon a rank connects to: COLLECTIVED_SOCKET, else the id's socket,
// else the packaged default.
std::string DaemonSocket(const UniqueId& id);

}  // namespace collectived::nccl

#endif  // COLLECTIVED_NCCL_SRC_UNIQUE_ID_H_
