// Lab probe (issue 17): the raw UCX yardstick for the exchange between nodes.
// Two MPI processes move TOTAL bytes both ways (or one way) over UCX tagged
// messages in pieces, best of 30, as collectived's exchange does, without
// the daemon around it. Build and run:
//   mpicxx -O2 -o ucx_exchange_probe tools/gpu-lab/ucx_exchange_probe.cc -lucp -lucs
//   mpirun -np 2 --mca btl self,tcp -x UCX_TLS=tcp,self -x UCX_NET_DEVICES=lo \
//     ./ucx_exchange_probe MULTI WAKEUP PIECE BOTH [REDUCE] [SLEEPY] [TOTAL=64 MiB]
// MULTI: worker thread mode multi (1) or single; WAKEUP: the wakeup feature;
// BOTH: both directions at once; REDUCE: add each received piece into the
// buffer (as the exchange reduces); SLEEPY: sleep on the worker's fd when
// nothing moves (as the exchange does). AM=1 in the environment adds the
// active-message feature.
#include <mpi.h>
#include <poll.h>
#include <ucp/api/ucp.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
struct Req { int done = 0; };
static void sent(void*, ucs_status_t, void* u) { static_cast<Req*>(u)->done = 1; }
static void recvd(void*, ucs_status_t, const ucp_tag_recv_info_t*, void* u) { static_cast<Req*>(u)->done = 1; }
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const bool multi = atoi(argv[1]); const bool wakeup = atoi(argv[2]); const size_t piece = atol(argv[3]);
  const bool both = atoi(argv[4]); const bool reduce = argc > 5 && atoi(argv[5]); const bool sleepy = argc > 6 && atoi(argv[6]);
  int efd = -1; const size_t total = argc > 7 ? atol(argv[7]) : (64ul << 20); const int iters = 30;
  ucp_config_t* cfg; ucp_config_read(nullptr, nullptr, &cfg);
  ucp_params_t p{}; p.field_mask = UCP_PARAM_FIELD_FEATURES; p.features = UCP_FEATURE_TAG | (wakeup ? UCP_FEATURE_WAKEUP : 0) | (getenv("AM") ? UCP_FEATURE_AM : 0);
  ucp_context_h ctx; ucp_init(&p, cfg, &ctx);
  ucp_worker_params_t wp{}; wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE; wp.thread_mode = multi ? UCS_THREAD_MODE_MULTI : UCS_THREAD_MODE_SINGLE;
  ucp_worker_h w; ucp_worker_create(ctx, &wp, &w); if (sleepy) ucp_worker_get_efd(w, &efd);
  ucp_address_t* a; size_t alen; ucp_worker_get_address(w, &a, &alen);
  int len = alen, plen; MPI_Sendrecv(&len, 1, MPI_INT, 1 - rank, 0, &plen, 1, MPI_INT, 1 - rank, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  std::vector<char> peer(plen); MPI_Sendrecv(a, len, MPI_BYTE, 1 - rank, 0, peer.data(), plen, MPI_BYTE, 1 - rank, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  ucp_ep_params_t ep{}; ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.address = (ucp_address_t*)peer.data(); ep.err_mode = UCP_ERR_HANDLING_MODE_PEER; ucp_ep_h e; ucp_ep_create(w, &ep, &e);
  std::vector<char> src(total, 1), dst(total, 0);
  double best = 1e9;
  for (int it = 0; it < iters; ++it) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto t0 = std::chrono::steady_clock::now();
    size_t n = total / piece; std::vector<Req> rs(n), ss(n); std::vector<void*> reqs;
    bool do_send = both || rank == 0, do_recv = both || rank == 1;
    for (size_t i = 0; i < n; ++i) {
      ucp_request_param_t rp{}; rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
      if (do_recv) { rp.cb.recv = recvd; rp.user_data = &rs[i]; reqs.push_back(ucp_tag_recv_nbx(w, dst.data() + i * piece, piece, i, ~0ull, &rp)); } else rs[i].done = 1;
    }
    for (size_t i = 0; i < n; ++i) {
      ucp_request_param_t rp{}; rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
      if (do_send) { rp.cb.send = sent; rp.user_data = &ss[i]; reqs.push_back(ucp_tag_send_nbx(e, src.data() + i * piece, piece, i, &rp)); } else ss[i].done = 1;
    }
    std::vector<bool> red(n, false); int idle = 0;
    for (;;) {
      if (ucp_worker_progress(w)) idle = 0;
      bool all = true;
      for (size_t i = 0; i < n; ++i) {
        if (reduce && rs[i].done && !red[i]) { red[i] = true; idle = 0; float* d = (float*)(dst.data() + i * piece); const float* s2 = (const float*)(src.data() + i * piece); for (size_t j = 0; j < piece / 4; ++j) d[j] += s2[j]; }
        all = all && rs[i].done && ss[i].done;
      }
      if (all) break;
      if (sleepy && ++idle > 64 && ucp_worker_arm(w) == UCS_OK) { pollfd pfd{efd, POLLIN, 0}; poll(&pfd, 1, 1); }
    }
    for (void* r : reqs) if (UCS_PTR_IS_PTR(r)) ucp_request_free(r);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (s < best) best = s;
  }
  if (rank == 0) printf("reduce=%d sleepy=%d multi=%d wakeup=%d piece=%zu both=%d: best %.1f ms, %.0f MiB/s per direction\n", reduce, sleepy, multi, wakeup, piece, both, best * 1e3, total / best / (1 << 20));
  MPI_Finalize();
}
