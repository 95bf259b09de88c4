// A client of another uid (run under setpriv by access_test.cc), or of the
// same uid as the negative control. It is given a victim session's id and
// token, one of its communicators and a key still forming, and tries each
// thing another local user must not do. One line per attempt on stdout:
// "<what> <grpc code> <message>"; the test judges them.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "collectived/api_version.h"
#include "collectived/client.h"
#include "collectived/v1/collectived.grpc.pb.h"
#include "ipc/fd_channel.h"

namespace {

using collectived::kSessionTokenMetadata;
namespace v1 = collectived::v1;

std::unique_ptr<grpc::ClientContext> Ctx(uint64_t token) {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (token != 0) c->AddMetadata(kSessionTokenMetadata, std::to_string(token));
  return c;
}

void Say(const char* what, const grpc::Status& s) {
  std::printf("%s %d %s\n", what, static_cast<int>(s.error_code()), s.error_message().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s SOCKET SESSION TOKEN COMM BUFFER FORMING_KEY\n", argv[0]);
    return 2;
  }
  const std::string socket = argv[1];
  const uint64_t session = std::strtoull(argv[2], nullptr, 10), token = std::strtoull(argv[3], nullptr, 10);
  const uint64_t comm = std::strtoull(argv[4], nullptr, 10), buffer = std::strtoull(argv[5], nullptr, 10);
  const std::string forming_key = argv[6];
  std::printf("uid %u\n", getuid());

  // Its own session works: what follows is refused for whose it is, not
  // because this process cannot reach the daemon.
  {
    std::unique_ptr<collectived::Client> own;
    collectived::Status s = collectived::Client::Connect({.socket_path = socket, .client_name = "intruder"}, &own);
    collectived::Buffer b;
    if (s.ok()) s = own->AllocBuffer(4096, &b);
    std::printf("own_session %d %s\n", static_cast<int>(s.code()), s.message().c_str());
  }

  auto stub = v1::CollectiveService::NewStub(grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  {
    v1::GetStatsResponse resp;
    grpc::Status s = stub->GetStats(Ctx(0).get(), v1::GetStatsRequest(), &resp);
    Say("stats", s);
    for (const auto& c : resp.communicators()) {
      std::printf("stats_comm %llu owner %u hidden %d key '%s'\n", static_cast<unsigned long long>(c.comm_id()),
                  c.owner_uid(), c.key_hidden() ? 1 : 0, c.key().c_str());
    }
  }
  {
    v1::AllocBufferRequest r;
    r.set_session_id(session);
    r.set_bytes(64);
    v1::AllocBufferResponse resp;
    Say("alloc_buffer", stub->AllocBuffer(Ctx(token).get(), r, &resp));
  }
  {
    v1::SubmitRequest r;
    r.set_session_id(session);
    r.set_comm_id(comm);
    auto* op = r.mutable_op();
    op->set_kind(v1::COLLECTIVE_KIND_ALL_REDUCE);
    op->set_dtype(v1::DATA_TYPE_FLOAT32);
    op->set_reduce_op(v1::REDUCE_OP_SUM);
    op->set_count(4);
    op->set_send_buffer_id(buffer);
    op->set_recv_buffer_id(buffer);
    v1::SubmitResponse resp;
    Say("submit", stub->Submit(Ctx(token).get(), r, &resp));
  }
  {
    v1::FreeBufferRequest r;
    r.set_session_id(session);
    r.set_buffer_id(buffer);
    v1::FreeBufferResponse resp;
    Say("free_buffer", stub->FreeBuffer(Ctx(token).get(), r, &resp));
  }
  {
    v1::DestroyCommunicatorRequest r;
    r.set_session_id(session);
    r.set_comm_id(comm);
    v1::DestroyCommunicatorResponse resp;
    Say("destroy_communicator", stub->DestroyCommunicator(Ctx(token).get(), r, &resp));
  }
  {
    v1::DetachRequest r;
    r.set_session_id(session);
    v1::DetachResponse resp;
    Say("detach", stub->Detach(Ctx(token).get(), r, &resp));
  }
  // The fd socket: binding the victim's session (with its token) would make
  // this process its lease and let it fetch the victim's windows.
  {
    int sock = -1;
    collectived::Status s = collectived::ipc::ConnectUnix(socket + ".fds", &sock);
    collectived::ipc::FdReply reply{};
    if (s.ok()) {
      collectived::ipc::FdRequest hello{collectived::ipc::kFdMagic, collectived::ipc::FdRequestType::kHello, session,
                                        token};
      int fd = -1;
      s = collectived::ipc::SendWithFd(sock, &hello, sizeof(hello), -1);
      if (s.ok()) s = collectived::ipc::RecvWithFd(sock, &reply, sizeof(reply), &fd);
      if (fd >= 0) close(fd);
      close(sock);
    }
    reply.message[sizeof(reply.message) - 1] = '\0';
    std::printf("fd_hello %d %s\n", s.ok() ? reply.code : static_cast<int>(s.code()), s.ok() ? reply.message : s.message().c_str());
  }
  // A communicator of its own uid to join the victim's forming key from.
  std::unique_ptr<collectived::Client> mine;
  collectived::Status cs = collectived::Client::Connect({.socket_path = socket, .client_name = "intruder2"}, &mine);
  if (!cs.ok()) {
    std::printf("second_session %d %s\n", static_cast<int>(cs.code()), cs.message().c_str());
    return 1;
  }
  for (const bool refuse : {false, true}) {
    v1::CreateCommunicatorRequest r;
    r.set_session_id(mine->session_id());
    r.set_key(forming_key);
    r.set_world_size(2);
    r.set_rank(1);
    r.set_join_timeout_ms(300);
    if (refuse) r.set_cannot_join("spoiling another user's job");
    v1::CreateCommunicatorResponse resp;
    Say(refuse ? "join_refusing" : "join", stub->CreateCommunicator(Ctx(mine->session_token()).get(), r, &resp));
  }
  {
    v1::DrainResponse resp;
    Say("drain", stub->Drain(Ctx(0).get(), v1::DrainRequest(), &resp));
  }
  return 0;
}
