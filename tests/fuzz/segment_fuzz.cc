// libFuzzer target: a communicator's shared segment as a hostile member
// could write it. Two sessions form a communicator in a real registry
// (daemon- or client-executed, the input chooses); the input then
// interleaves writes anywhere in the segment (header and layout fields,
// control words, ring descriptors and sequence words, status records and
// texts, counters) with what the daemon does that reads it: ops submitted
// and run by its executors, op queries, freeing buffers, stats, metrics,
// stall inspection, leaving. Every read of member-writable memory must
// stay bounded (docs/security.md).
//
// Checked after each input, beyond "no crash, no sanitizer report": a
// second communicator of the same two sessions, which nobody scribbled on,
// still runs an all-reduce with the exact result (a scribbling member
// spoils only its own communicator), and leaving ends everything in bounded
// time.
#include <fuzzer/FuzzedDataProvider.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "daemon/registry.h"
#include "ring/segment_layout.h"
#include "tests/fuzz/fuzz_support.h"

namespace collectived::fuzz {
namespace {

using daemon::Registry;

constexpr uint64_t kBufferBytes = 4096;

daemon::DaemonConfig Config() {
  daemon::DaemonConfig c;
  c.backend = daemon::Backend::kHost;
  c.max_message_bytes = 1024;
  c.one_shot_max_bytes = 256;  // both algorithms within a short input
  c.ring_depth = 4;
  c.op_timeout_ms = 20;  // a scribbled op fails fast
  c.join_timeout_ms = 2000;
  c.max_buffer_bytes = 1 << 20;
  c.stall_threshold_ms = 1;
  return c;
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "segment_fuzz: %s\n", what.c_str());
  std::abort();
}

// A mapping of a window, as a member maps it.
struct Mapping {
  void* base = MAP_FAILED;
  size_t bytes = 0;
  ~Mapping() {
    if (base != MAP_FAILED) munmap(base, bytes);
  }
};

void MapWindow(Registry& reg, uint64_t session, uint64_t window_id, Mapping* m) {
  daemon::WindowFd w;
  Status s = reg.FetchWindow(session, window_id, &w);
  if (!s.ok()) Fail("FetchWindow: " + s.ToString());
  m->bytes = w.size;
  m->base = mmap(nullptr, w.size, PROT_READ | PROT_WRITE, MAP_SHARED, w.fd, 0);
  if (w.close_after_send) close(w.fd);
  if (m->base == MAP_FAILED) Fail("mmap");
}

// Both sessions join `key` (2 ranks, `mode`); each rank's result.
void Form(Registry& reg, const uint64_t sessions[2], const std::string& key, ExecutionMode mode,
          daemon::JoinResult out[2]) {
  std::shared_ptr<int> answered = std::make_shared<int>(0);
  std::shared_ptr<Status> bad = std::make_shared<Status>();
  for (uint32_t r = 0; r < 2; ++r) {
    daemon::JoinRequest j;
    j.session_id = sessions[r];
    j.key = key;
    j.world_size = 2;
    j.rank = r;
    j.mode = mode;
    reg.Join(j, [answered, bad, out, r](const Status& s, const daemon::JoinResult& res) {
      if (!s.ok()) *bad = s;
      out[r] = res;
      ++*answered;
    });
  }
  if (*answered != 2 || !bad->ok()) Fail("join " + key + ": " + bad->ToString());
}

bool WaitDone(Registry& reg, uint64_t session, uint64_t comm, uint32_t rank, uint64_t index, Status* st) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    bool done = false;
    Status q = reg.QueryOp(session, comm, rank, index, &done, st);
    if (!q.ok()) {
      *st = q;
      return true;
    }
    if (done) return true;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return false;
}

ring::OpDescriptor Op(CollectiveKind kind, DataType dtype, ReduceOp op, uint64_t count, uint64_t send,
                      uint64_t recv) {
  ring::OpDescriptor d{};
  d.kind = kind;
  d.dtype = dtype;
  d.reduce_op = op;
  d.count = count;
  d.send_buffer_id = send;
  d.recv_buffer_id = recv;
  return d;
}

}  // namespace
}  // namespace collectived::fuzz

using namespace collectived;        // NOLINT: a fuzz target's two entry points
using namespace collectived::fuzz;  // NOLINT

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  WriteSeedsIfAsked("segment", [](std::vector<std::string>* seeds) {
    // Starting points only: FuzzedDataProvider takes integers from the
    // input's end and bytes from its front, so a seed's bytes do not map one
    // to one onto steps; coverage grows from them (docs/proof.md).
    seeds->push_back(std::string("\x01\x01\x00\x10", 4));
    seeds->push_back(std::string("\x00\x01\x00\x10\x03\x04", 6));
    std::string scribble("\x01\x00\x00\x00\x08\xff\xff\xff\xff\xff\xff\xff\xff\x01\x00\x10", 16);
    seeds->push_back(scribble);
    seeds->push_back(std::string("\x01\x00\x02\x40\x08\x01\x01\x01\x01\x01\x01\x01\x01\x01\x00\x10\x05", 17));
    seeds->push_back(std::string("\x01\x01\x00\x10\x00\x03\x00\x04\x04\x00\x00\x00\x00\x06\x07", 15));
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const ExecutionMode mode = (in.ConsumeIntegral<uint8_t>() & 1) ? ExecutionMode::kDaemon : ExecutionMode::kClient;
  Registry reg(Config());
  const ipc::PeerCredentials self = SelfCredentials();
  uint64_t sessions[2], token = 0;
  for (auto& s : sessions) {
    if (!reg.Attach("fuzz", static_cast<uint32_t>(getpid()), self, &s, &token).ok()) Fail("attach");
  }
  daemon::BufferInfo bufs[2];
  Mapping buf_maps[2];
  for (uint32_t r = 0; r < 2; ++r) {
    if (!reg.AllocBuffer(sessions[r], kBufferBytes, &bufs[r]).ok()) Fail("alloc");
    MapWindow(reg, sessions[r], bufs[r].window_id, &buf_maps[r]);
  }
  daemon::JoinResult hostile[2];
  Form(reg, sessions, "hostile", mode, hostile);
  Mapping seg;
  MapWindow(reg, sessions[0], hostile[0].window_id, &seg);
  auto* bytes = static_cast<uint8_t*>(seg.base);
  ring::CommSegment view;
  if (!ring::CommSegment::Attach(seg.base, seg.bytes, &view).ok()) Fail("attach segment");
  const ring::SegmentLayout lay = view.layout();
  // Where a write lands: a region, then an offset in it, so that short
  // inputs reach every part of the segment.
  const uint64_t regions[][2] = {{0, lay.rank_control_offset},
                                 {lay.rank_control_offset, lay.ring_offset},
                                 {lay.ring_offset, lay.status_offset},
                                 {lay.status_offset, lay.in_slot_offset},
                                 {lay.in_slot_offset, lay.total_bytes}};
  for (int steps = 0; steps < 24 && in.remaining_bytes() > 0; ++steps) {
    switch (in.ConsumeIntegral<uint8_t>() % 8) {
      case 0: {  // a hostile write: region, offset, length, bytes
        const auto& reg_range = regions[in.ConsumeIntegral<uint8_t>() % 5];
        const uint64_t span = reg_range[1] - reg_range[0];
        const uint64_t at = reg_range[0] + in.ConsumeIntegral<uint16_t>() % span;
        const size_t len = std::min<size_t>(in.ConsumeIntegralInRange<size_t>(1, 16), lay.total_bytes - at);
        const std::string b = in.ConsumeBytesAsString(len);
        std::memcpy(bytes + at, b.data(), b.size());
        break;
      }
      case 1: {  // an op, submitted for a rank as the RPC would (count from the input)
        const uint32_t r = in.ConsumeIntegral<uint8_t>() & 1;
        const uint64_t count = in.ConsumeIntegralInRange<uint64_t>(1, 256);
        const bool gather = in.ConsumeBool();
        uint64_t index = 0;
        Status s = reg.Submit(sessions[r], hostile[r].comm_id, r,
                              Op(gather ? CollectiveKind::kAllGather : CollectiveKind::kAllReduce, DataType::kInt32,
                                 gather ? ReduceOp::kUnspecified : ReduceOp::kSum, count, bufs[r].buffer_id,
                                 bufs[r].buffer_id),
                              &index);
        (void)s;  // refused or posted: either way the daemon must stay sound
        break;
      }
      case 2: {  // query an op, any index
        const uint32_t r = in.ConsumeIntegral<uint8_t>() & 1;
        bool done = false;
        Status st;
        (void)reg.QueryOp(sessions[r], hostile[r].comm_id, r, in.ConsumeIntegral<uint8_t>(), &done, &st);
        break;
      }
      case 3:
        (void)reg.Stats();
        break;
      case 4:
        (void)reg.Metrics();
        break;
      case 5:
        reg.Housekeeping();
        break;
      case 6:
        (void)reg.FreeBuffer(sessions[in.ConsumeIntegral<uint8_t>() & 1], bufs[0].buffer_id);
        break;
      case 7:
        std::this_thread::sleep_for(std::chrono::milliseconds(in.ConsumeIntegralInRange(0, 3)));
        break;
    }
  }
  // The other communicator of the same sessions runs exactly.
  daemon::JoinResult clean[2];
  Form(reg, sessions, "clean", ExecutionMode::kDaemon, clean);
  daemon::BufferInfo ins[2], outs[2];
  Mapping in_maps[2], out_maps[2];
  constexpr uint64_t kCount = 64;
  for (uint32_t r = 0; r < 2; ++r) {
    if (!reg.AllocBuffer(sessions[r], kCount * 4, &ins[r]).ok()) Fail("alloc in");
    if (!reg.AllocBuffer(sessions[r], kCount * 4, &outs[r]).ok()) Fail("alloc out");
    MapWindow(reg, sessions[r], ins[r].window_id, &in_maps[r]);
    MapWindow(reg, sessions[r], outs[r].window_id, &out_maps[r]);
    auto* x = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(in_maps[r].base) + ins[r].offset);
    auto* y = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(out_maps[r].base) + outs[r].offset);
    for (uint64_t i = 0; i < kCount; ++i) {
      x[i] = static_cast<int32_t>((r + 1) * 1000 + i);
      y[i] = -7;  // poison
    }
  }
  uint64_t index[2];
  for (uint32_t r = 0; r < 2; ++r) {
    Status s = reg.Submit(sessions[r], clean[r].comm_id, r,
                          Op(CollectiveKind::kAllReduce, DataType::kInt32, ReduceOp::kSum, kCount,
                             ins[r].buffer_id, outs[r].buffer_id),
                          &index[r]);
    if (!s.ok()) Fail("submit on the clean communicator: " + s.ToString());
  }
  for (uint32_t r = 0; r < 2; ++r) {
    Status st;
    if (!WaitDone(reg, sessions[r], clean[r].comm_id, r, index[r], &st)) Fail("the clean op did not end");
    if (!st.ok()) Fail("the clean op failed: " + st.ToString());
    auto* y = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(out_maps[r].base) + outs[r].offset);
    if (NegativeControl()) y[kCount / 2] += 1;  // the control: one wrong element
    for (uint64_t i = 0; i < kCount; ++i) {
      if (y[i] != static_cast<int32_t>(3000 + 2 * i)) Fail("the clean op's output is wrong");
    }
  }
  for (auto s : sessions) (void)reg.Detach(s);
  return 0;
}
