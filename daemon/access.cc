#include "daemon/access.h"

#include <grp.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

namespace collectived::daemon {
namespace {

Status ResolveGroup(const char* flag, const std::string& name, std::optional<uint32_t>* out) {
  out->reset();
  if (name.empty()) return Status::Ok();
  group g{};
  group* found = nullptr;
  std::vector<char> buf(16384);
  char* end = nullptr;
  const unsigned long number = std::strtoul(name.c_str(), &end, 10);
  const int rc = (*end == '\0') ? getgrgid_r(static_cast<gid_t>(number), &g, buf.data(), buf.size(), &found)
                                : getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &found);
  if (rc != 0 || found == nullptr) {
    return Status::InvalidArgument(std::string(flag) + " names group '" + name + "', which does not exist");
  }
  *out = found->gr_gid;
  return Status::Ok();
}

}  // namespace

AccessPolicy::AccessPolicy(uint32_t daemon_uid) : daemon_uid_(daemon_uid) {}

Status AccessPolicy::Resolve(uint32_t daemon_uid, const std::string& admin_group, const std::string& shared_group,
                             AccessPolicy* out) {
  AccessPolicy p(daemon_uid);
  COLLECTIVED_RETURN_IF_ERROR(ResolveGroup("--admin-group", admin_group, &p.admin_gid_));
  COLLECTIVED_RETURN_IF_ERROR(ResolveGroup("--shared-group", shared_group, &p.shared_gid_));
  *out = p;
  return Status::Ok();
}

bool AccessPolicy::IsAdmin(const ipc::PeerCredentials& peer) const {
  return peer.uid == 0 || peer.uid == daemon_uid_ || (admin_gid_ && peer.InGroup(*admin_gid_));
}

bool AccessPolicy::MayShare(const ipc::PeerCredentials& creator, const ipc::PeerCredentials& joiner) const {
  if (creator.uid == joiner.uid) return true;
  return shared_gid_ && creator.InGroup(*shared_gid_) && joiner.InGroup(*shared_gid_);
}

bool AccessPolicy::MaySee(const ipc::PeerCredentials& viewer, uint32_t owner_uid) const {
  return viewer.uid == owner_uid || IsAdmin(viewer);
}

}  // namespace collectived::daemon
