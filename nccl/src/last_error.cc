#include "nccl/src/last_error.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "nccl/src/type_map.h"

namespace collectived::nccl {

namespace {
thread_local std::string t_last;
thread_local std::string t_returned;  // what LastErrorText handed out: valid until this thread's next call
std::mutex g_mu;
std::string g_last;

bool Verbose() {
  static const bool v = [] {
    const char* d = std::getenv("NCCL_DEBUG");
    return d != nullptr && (std::string(d) == "WARN" || std::string(d) == "INFO" || std::string(d) == "TRACE");
  }();
  return v;
}
}  // namespace

ncclResult_t Fail(const char* call, ncclResult_t r, const std::string& reason) {
  if (r == ncclSuccess) return r;
  std::string text = std::string(call) + ": " + reason;
  if (Verbose()) std::fprintf(stderr, "collectived-nccl WARN %s\n", text.c_str());
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_last = text;
  }
  t_last = std::move(text);
  return r;
}

ncclResult_t Fail(const char* call, const Status& s) {
  if (s.ok()) return ncclSuccess;
  return Fail(call, ResultFor(s), s.ToString());
}

const char* LastErrorText() {
  if (!t_last.empty()) {
    t_returned = t_last;
  } else {
    std::lock_guard<std::mutex> lock(g_mu);
    t_returned = g_last;
  }
  return t_returned.c_str();
}

}  // namespace collectived::nccl
