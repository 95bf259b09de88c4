// `--name value` flags for the test and benchmark tools (CLI11 is kept to the
// daemon's and ctl's main files: it costs seconds per including file).
#ifndef COLLECTIVED_TESTS_SUPPORT_ARGS_H_
#define COLLECTIVED_TESTS_SUPPORT_ARGS_H_

#include <cstring>
#include <string>

namespace collectived::testing {

// The value after `name` in argv, or `fallback`.
inline std::string Arg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return fallback;
}

}  // namespace collectived::testing

#endif  // COLLECTIVED_TESTS_SUPPORT_ARGS_H_
