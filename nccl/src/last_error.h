// Private: the text ncclGetLastError returns: "<call>: <reason>".
#ifndef COLLECTIVED_NCCL_SRC_LAST_ERROR_H_
#define COLLECTIVED_NCCL_SRC_LAST_ERROR_H_

#include "collectived/status.h"
#include "nccl.h"

namespace collectived::nccl {

// Records a failed call (for this thread and for the process) and returns
// its result; OK records nothing and returns ncclSuccess.
ncclResult_t Fail(const char* call, const Status& s);
ncclResult_t Fail(const char* call, ncclResult_t r, const std::string& reason);
// This thread's last error text, else the process's, else "".
const char* LastErrorText();

}  // namespace collectived::nccl

#endif  // COLLECTIVED_NCCL_SRC_LAST_ERROR_H_
