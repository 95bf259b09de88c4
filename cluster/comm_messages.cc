#include "cluster/comm_messages.h"

#include <cstring>

#include "ring/segment_layout.h"

namespace collectived::cluster {
namespace {

constexpr uint32_t kMaxKeyBytes = 1024;
constexpr uint32_t kMaxReasonBytes = 1024;
constexpr uint32_t kMaxNodes = 256;

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof(v)); }
  void U64(uint64_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof(v)); }
  void Str(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    out_ += s;
  }
  void Ranks(const std::vector<uint32_t>& r) {
    U32(static_cast<uint32_t>(r.size()));
    for (uint32_t v : r) U32(v);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  bool U8(uint8_t* v) { return Raw(v, 1); }
  bool U32(uint32_t* v) { return Raw(v, 4); }
  bool U64(uint64_t* v) { return Raw(v, 8); }
  bool Str(std::string* s, uint32_t max) {
    uint32_t n = 0;
    if (!U32(&n) || n > max || in_.size() - at_ < n) return false;
    s->assign(in_.data() + at_, n);
    at_ += n;
    return true;
  }
  bool Ranks(std::vector<uint32_t>* r) {
    uint32_t n = 0;
    if (!U32(&n) || n > ring::kMaxRanks || (in_.size() - at_) / 4 < n) return false;
    r->resize(n);
    for (uint32_t& v : *r) {
      if (!U32(&v) || v >= ring::kMaxRanks) return false;
    }
    return true;
  }
  bool AtEnd() const { return at_ == in_.size(); }

 private:
  bool Raw(void* v, size_t n) {
    if (in_.size() - at_ < n) return false;
    std::memcpy(v, in_.data() + at_, n);
    at_ += n;
    return true;
  }
  const std::string& in_;
  size_t at_ = 0;
};

}  // namespace

std::string EncodeControl(const ControlMessage& m) {
  Writer w;
  w.U8(static_cast<uint8_t>(m.kind));
  switch (m.kind) {
    case ControlMessage::Kind::kAnnounce: {
      const JoinAnnounce& a = m.announce;
      w.Str(a.key);
      w.U32(a.world);
      w.U32(a.mode);
      w.U32(a.op_timeout_ms);
      w.U8(a.gpu ? 1 : 0);
      w.U64(a.gpu_heap_bytes);
      w.U32(a.recv_id);
      w.U64(a.epoch);
      w.Ranks(a.ranks);
      break;
    }
    case ControlMessage::Kind::kForm: {
      const FormDecision& f = m.form;
      w.Str(f.key);
      w.U32(f.mode);
      w.U32(f.plan.comm_tag);
      w.U32(f.plan.world);
      w.U32(static_cast<uint32_t>(f.plan.nodes.size()));
      for (size_t i = 0; i < f.plan.nodes.size(); ++i) {
        w.U32(f.plan.nodes[i]);
        w.U32(f.plan.recv_ids[i]);
        w.U64(f.plan.epochs[i]);
        w.Ranks(f.plan.ranks[i]);
      }
      break;
    }
    case ControlMessage::Kind::kFailure:
      w.Str(m.failure.key);
      w.U32(m.failure.comm_tag);
      w.U32(m.failure.code);
      w.Str(m.failure.reason.substr(0, kMaxReasonBytes));
      w.U8(m.failure.withdrew ? 1 : 0);
      w.U8(m.failure.relayed ? 1 : 0);
      break;
  }
  return w.Take();
}

Status DecodeControl(const std::string& bytes, ControlMessage* out) {
  Reader r(bytes);
  ControlMessage m;
  uint8_t kind = 0;
  bool ok = r.U8(&kind);
  const char* what = "kind";
  if (ok && kind == static_cast<uint8_t>(ControlMessage::Kind::kAnnounce)) {
    m.kind = ControlMessage::Kind::kAnnounce;
    JoinAnnounce& a = m.announce;
    uint8_t gpu = 0;
    what = "announcement";
    ok = r.Str(&a.key, kMaxKeyBytes) && r.U32(&a.world) && r.U32(&a.mode) && r.U32(&a.op_timeout_ms) &&
         r.U8(&gpu) && gpu <= 1 && r.U64(&a.gpu_heap_bytes) && r.U32(&a.recv_id) && r.U64(&a.epoch) && r.Ranks(&a.ranks) && !a.key.empty() &&
         a.world >= 1 && a.world <= ring::kMaxRanks;
    for (uint32_t v : a.ranks) ok = ok && v < a.world;
    a.gpu = gpu == 1;
  } else if (ok && kind == static_cast<uint8_t>(ControlMessage::Kind::kForm)) {
    m.kind = ControlMessage::Kind::kForm;
    FormDecision& f = m.form;
    uint32_t nodes = 0;
    what = "form decision";
    ok = r.Str(&f.key, kMaxKeyBytes) && r.U32(&f.mode) && r.U32(&f.plan.comm_tag) && r.U32(&f.plan.world) &&
         r.U32(&nodes) && nodes <= kMaxNodes && f.plan.world >= 1 && f.plan.world <= ring::kMaxRanks;
    for (uint32_t i = 0; ok && i < nodes; ++i) {
      uint32_t node = 0, recv_id = 0;
      uint64_t epoch = 0;
      std::vector<uint32_t> ranks;
      ok = r.U32(&node) && r.U32(&recv_id) && r.U64(&epoch) && r.Ranks(&ranks);
      f.plan.nodes.push_back(node);
      f.plan.recv_ids.push_back(recv_id);
      f.plan.epochs.push_back(epoch);
      f.plan.ranks.push_back(std::move(ranks));
    }
  } else if (ok && kind == static_cast<uint8_t>(ControlMessage::Kind::kFailure)) {
    m.kind = ControlMessage::Kind::kFailure;
    what = "failure";
    uint8_t withdrew = 0, relayed = 0;
    ok = r.Str(&m.failure.key, kMaxKeyBytes) && r.U32(&m.failure.comm_tag) && r.U32(&m.failure.code) &&
         r.Str(&m.failure.reason, kMaxReasonBytes) && r.U8(&withdrew) && withdrew <= 1 && r.U8(&relayed) &&
         relayed <= 1;
    m.failure.withdrew = withdrew == 1;
    m.failure.relayed = relayed == 1;
    // Another node chose these: a code that exists, a reason without control characters.
    m.failure.code = static_cast<uint32_t>(ring::SharedStatusCode(m.failure.code));
    m.failure.reason = ring::SharedText(m.failure.reason.data(), m.failure.reason.size());
  } else {
    ok = false;
  }
  if (!ok || !r.AtEnd()) {
    return Status::InvalidArgument("malformed control message (" + std::string(what) + ", " +
                                   std::to_string(bytes.size()) + " bytes)");
  }
  *out = std::move(m);
  return Status::Ok();
}

}  // namespace collectived::cluster
