#include "cluster/mpi_bootstrap.h"

#include <mpi.h>

#include <cstring>
#include <random>
#include <string>

namespace collectived::cluster {
namespace {

// One daemon's record on the wire: fixed fields, then its host and address.
struct Fixed {
  uint64_t epoch;
  int32_t pid;
  uint32_t host_bytes;
  uint32_t address_bytes;
  uint32_t reserved;
};
constexpr size_t kMaxRecord = 64 * 1024;  // a UCX worker address is a few hundred bytes

Status MpiError(int rc, const char* what) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return Status::Unavailable(std::string("MPI bootstrap: ") + what + ": " + text);
}

}  // namespace

Status MpiBootstrap(const NodeInfo& self, std::vector<NodeInfo>* nodes, uint32_t* self_id, uint64_t* secret) {
  int rc = MPI_Init(nullptr, nullptr);
  if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Init");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string mine(sizeof(Fixed), '\0');
  Fixed f{self.epoch, self.pid, static_cast<uint32_t>(self.host.size()),
          static_cast<uint32_t>(self.worker_address.size()), 0};
  std::memcpy(mine.data(), &f, sizeof(f));
  mine += self.host + self.worker_address;
  if (mine.size() > kMaxRecord) return Status::InvalidArgument("MPI bootstrap: this daemon's record is too large");
  const int mine_bytes = static_cast<int>(mine.size());
  std::vector<int> bytes(size), offsets(size);
  rc = MPI_Allgather(&mine_bytes, 1, MPI_INT, bytes.data(), 1, MPI_INT, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Allgather");
  int total = 0;
  for (int k = 0; k < size; ++k) {
    if (bytes[k] < static_cast<int>(sizeof(Fixed)) || bytes[k] > static_cast<int>(kMaxRecord)) {
      return Status::InvalidArgument("MPI bootstrap: rank " + std::to_string(k) + " sent a record of " +
                                     std::to_string(bytes[k]) + " bytes");
    }
    offsets[k] = total;
    total += bytes[k];
  }
  std::string all(total, '\0');
  rc = MPI_Allgatherv(mine.data(), mine_bytes, MPI_BYTE, all.data(), bytes.data(), offsets.data(), MPI_BYTE,
                      MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Allgatherv");
  uint64_t s = 0;
  if (rank == 0) {
    std::random_device rd;
    s = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  rc = MPI_Bcast(&s, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Bcast");
  // Every rank took part: MPI is done (the exchange is its only use).
  MPI_Finalize();
  nodes->clear();
  for (int k = 0; k < size; ++k) {
    Fixed g{};
    std::memcpy(&g, all.data() + offsets[k], sizeof(g));
    if (sizeof(Fixed) + uint64_t{g.host_bytes} + g.address_bytes != static_cast<uint64_t>(bytes[k])) {
      return Status::InvalidArgument("MPI bootstrap: rank " + std::to_string(k) + "'s record does not add up");
    }
    NodeInfo n;
    n.node_id = static_cast<uint32_t>(k);
    n.epoch = g.epoch;
    n.pid = g.pid;
    n.host.assign(all.data() + offsets[k] + sizeof(Fixed), g.host_bytes);
    n.worker_address.assign(all.data() + offsets[k] + sizeof(Fixed) + g.host_bytes, g.address_bytes);
    nodes->push_back(std::move(n));
  }
  *self_id = static_cast<uint32_t>(rank);
  *secret = s;
  return Status::Ok();
}

}  // namespace collectived::cluster
