// Who may do what beyond their own session (docs/security.md): the daemon's
// own uid, root and the admin group administer (Drain, every key in the
// stats); a communicator's members all have its creator's uid, unless the
// shared group holds both.
#ifndef COLLECTIVED_DAEMON_ACCESS_H_
#define COLLECTIVED_DAEMON_ACCESS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "collectived/status.h"
#include "ipc/unix_peer.h"

namespace collectived::daemon {

class AccessPolicy {
 public:
  // Administered by root and `daemon_uid` only; nothing shared across uids.
  explicit AccessPolicy(uint32_t daemon_uid);
  // Resolves --admin-group and --shared-group (empty: none) by name or
  // number. INVALID_ARGUMENT naming the flag for a group that does not exist.
  static Status Resolve(uint32_t daemon_uid, const std::string& admin_group, const std::string& shared_group,
                        AccessPolicy* out);

  bool IsAdmin(const ipc::PeerCredentials& peer) const;
  // May `joiner` be a member of a communicator `creator` formed?
  bool MayShare(const ipc::PeerCredentials& creator, const ipc::PeerCredentials& joiner) const;
  // May `viewer` see what `owner_uid` named its communicators?
  bool MaySee(const ipc::PeerCredentials& viewer, uint32_t owner_uid) const;

 private:
  uint32_t daemon_uid_;
  std::optional<uint32_t> admin_gid_, shared_gid_;
};

}  // namespace collectived::daemon

#endif  // COLLECTIVED_DAEMON_ACCESS_H_
