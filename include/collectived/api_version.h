// The version of the collectived.v1 API that this build speaks. A client and
// a daemon agree when the majors are equal; the minor names what was added.
#ifndef COLLECTIVED_API_VERSION_H_
#define COLLECTIVED_API_VERSION_H_

#include <cstdint>

namespace collectived {

constexpr uint32_t kApiMajor = 1;
constexpr uint32_t kApiMinor = 3;  // 1.1: GPU communicators; 1.2: cannot_join; 1.3: registered GPU buffers

}  // namespace collectived

#endif  // COLLECTIVED_API_VERSION_H_
