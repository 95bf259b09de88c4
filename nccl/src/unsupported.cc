// The exported NCCL calls collectived does not implement (unsupported_calls.inc).
// Deliberately without nccl.h: their arguments are never read, so one
// argument-less definition serves every signature (C linkage, caller-cleaned
// arguments), and the result is ncclInvalidUsage's value.
extern "C" int collectived_nccl_unsupported(const char* call);

#define COLLECTIVED_NCCL_UNSUPPORTED(name) \
  extern "C" int name() { return collectived_nccl_unsupported(#name); }
#include "nccl/src/unsupported_calls.inc"
#undef COLLECTIVED_NCCL_UNSUPPORTED
