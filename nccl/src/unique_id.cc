#include "nccl/src/unique_id.h"

#include <sys/random.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace collectived::nccl {

namespace {
constexpr char kMagic[8] = {'C', 'L', 'V', 'D', 'N', 'C', '1', '\0'};
constexpr size_t kKeyOffset = 8;
constexpr size_t kKeyBytes = 32;  // hex digits
constexpr size_t kSocketOffset = kKeyOffset + kKeyBytes;
static_assert(kSocketOffset + kMaxIdSocketBytes + 1 == NCCL_UNIQUE_ID_BYTES);
constexpr const char* kDefaultSocket = "/run/collectived/collectived.sock";
}  // namespace

Status FreshKey(std::string* key) {
  uint8_t raw[kKeyBytes / 2];
  if (getrandom(raw, sizeof(raw), 0) != static_cast<ssize_t>(sizeof(raw))) {
    return Status::Internal(std::string("getrandom: ") + std::strerror(errno));
  }
  static const char* kHex = "0123456789abcdef";
  key->clear();
  for (uint8_t b : raw) {
    key->push_back(kHex[b >> 4]);
    key->push_back(kHex[b & 15]);
  }
  return Status::Ok();
}

Status EncodeUniqueId(const UniqueId& id, ncclUniqueId* out) {
  if (id.key.size() != kKeyBytes) return Status::Internal("a unique id's key has 32 hex digits");
  if (id.socket.size() > kMaxIdSocketBytes) {
    return Status::InvalidArgument("socket: the daemon's socket path (COLLECTIVED_SOCKET) is " +
                                   std::to_string(id.socket.size()) + " bytes; an ncclUniqueId holds at most " +
                                   std::to_string(kMaxIdSocketBytes));
  }
  std::memset(out->internal, 0, sizeof(out->internal));
  std::memcpy(out->internal, kMagic, sizeof(kMagic));
  std::memcpy(out->internal + kKeyOffset, id.key.data(), kKeyBytes);
  std::memcpy(out->internal + kSocketOffset, id.socket.data(), id.socket.size());
  return Status::Ok();
}

Status DecodeUniqueId(const ncclUniqueId& in, UniqueId* out) {
  if (std::memcmp(in.internal, kMagic, sizeof(kMagic)) != 0) {
    return Status::InvalidArgument("commId was not made by ncclGetUniqueId of collectived (wrong magic)");
  }
  std::string key(in.internal + kKeyOffset, kKeyBytes);
  for (char c : key) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return Status::InvalidArgument("commId: its key is not 32 hex digits");
    }
  }
  const char* sock = in.internal + kSocketOffset;
  if (sock[kMaxIdSocketBytes] != '\0') return Status::InvalidArgument("commId: its socket path is not terminated");
  out->key = key;
  out->socket = sock;
  return Status::Ok();
}

std::string DaemonSocket(const UniqueId& id) {
  const char* env = std::getenv("COLLECTIVED_SOCKET");
  if (env != nullptr && *env != '\0') return env;
  if (!id.socket.empty()) return id.socket;
  return kDefaultSocket;
}

}  // namespace collectived::nccl
