#include "cluster/mpi_bootstrap.h"

#include <mpi.h>

#include <random>
#include <string>

#include "cluster/node_record.h"

namespace collectived::cluster {
namespace {

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
  NodeInfo me = self;
  me.node_id = static_cast<uint32_t>(rank);
  const std::string mine = EncodeNode(me);
  if (mine.size() > kMaxNodeRecord) return Status::InvalidArgument("MPI bootstrap: this daemon's record is too large");
  const int mine_bytes = static_cast<int>(mine.size());
  std::vector<int> bytes(size), offsets(size);
  rc = MPI_Allgather(&mine_bytes, 1, MPI_INT, bytes.data(), 1, MPI_INT, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Allgather");
  int total = 0;
  for (int k = 0; k < size; ++k) {
    if (bytes[k] <= 0 || bytes[k] > static_cast<int>(kMaxNodeRecord)) {
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
    NodeInfo n;
    Status d = DecodeNode(all.substr(offsets[k], bytes[k]), &n);
    if (!d.ok()) return Status::InvalidArgument("MPI bootstrap: rank " + std::to_string(k) + ": " + d.message());
    if (n.node_id != static_cast<uint32_t>(k)) {
      return Status::InvalidArgument("MPI bootstrap: rank " + std::to_string(k) + " claims node " +
                                     std::to_string(n.node_id));
    }
    nodes->push_back(std::move(n));
  }
  *self_id = static_cast<uint32_t>(rank);
  *secret = s;
  return Status::Ok();
}

}  // namespace collectived::cluster
