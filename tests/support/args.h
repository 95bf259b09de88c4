// `--name value` flags for the test and benchmark tools (CLI11 is kept to the
// daemon's and ctl's main files: it costs seconds per including file).
#ifndef COLLECTIVED_TESTS_SUPPORT_ARGS_H_
#define COLLECTIVED_TESTS_SUPPORT_ARGS_H_

#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>

namespace collectived::testing {

// The value after `name` in argv, or `fallback`.
inline std::string Arg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return fallback;
}

// Answers --help / -h with `usage` and refuses a flag not in `known` (each
// takes a value): -1 to go on, else the exit code (0 after help, 2 on a bad
// command line, with the reason on stderr).
inline int CheckFlags(int argc, char** argv, std::initializer_list<const char*> known, const char* usage) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(usage, stdout);
      return 0;
    }
    bool is_known = false;
    for (const char* k : known) is_known |= std::strcmp(argv[i], k) == 0;
    if (!is_known) {
      std::fprintf(stderr, "unknown option %s\n%s", argv[i], usage);
      return 2;
    }
    if (++i >= argc) {
      std::fprintf(stderr, "%s needs a value\n", argv[i - 1]);
      return 2;
    }
  }
  return -1;
}

}  // namespace collectived::testing

#endif  // COLLECTIVED_TESTS_SUPPORT_ARGS_H_
