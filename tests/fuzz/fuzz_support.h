// What the fuzz targets share: this process's credentials (the caller every
// in-process call claims to be), and writing a target's seed corpus.
#ifndef COLLECTIVED_TESTS_FUZZ_FUZZ_SUPPORT_H_
#define COLLECTIVED_TESTS_FUZZ_FUZZ_SUPPORT_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "ipc/unix_peer.h"

namespace collectived::fuzz {

inline ipc::PeerCredentials SelfCredentials() {
  ipc::PeerCredentials c;
  c.uid = geteuid();
  c.gid = getegid();
  c.pid = getpid();
  return c;
}

// COLLECTIVED_FUZZ_NEGATIVE_CONTROL=1: a target plants the fault its
// after-input check exists to catch (a leaked descriptor, a wrong element),
// which must then fail it (the fuzz_*_negative_control tests).
inline bool NegativeControl() {
  static const bool on = std::getenv("COLLECTIVED_FUZZ_NEGATIVE_CONTROL") != nullptr;
  return on;
}

// With COLLECTIVED_FUZZ_WRITE_SEEDS=DIR set, writes the seeds `make` gives
// as DIR/<target>-<n> and exits: how tests/fuzz/corpus was made (run.sh
// --write-seeds), so a change of an input layout can remake it.
inline void WriteSeedsIfAsked(const char* target, const std::function<void(std::vector<std::string>*)>& make) {
  const char* dir = std::getenv("COLLECTIVED_FUZZ_WRITE_SEEDS");
  if (dir == nullptr) return;
  std::vector<std::string> seeds;
  make(&seeds);
  for (size_t i = 0; i < seeds.size(); ++i) {
    const std::string path = std::string(dir) + "/" + target + "-" + std::to_string(i);
    std::ofstream(path, std::ios::binary) << seeds[i];
    std::printf("wrote %s (%zu bytes)\n", path.c_str(), seeds[i].size());
  }
  std::exit(0);
}

}  // namespace collectived::fuzz

#endif  // COLLECTIVED_TESTS_FUZZ_FUZZ_SUPPORT_H_
