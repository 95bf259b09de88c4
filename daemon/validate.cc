#include "daemon/validate.h"

#include <cstdio>

namespace collectived::daemon::validate {
namespace {

bool IsControl(unsigned char c) { return c < 0x20 || c == 0x7f; }

}  // namespace

Status String(std::string_view field, std::string_view value, size_t max_bytes) {
  if (value.size() > max_bytes) {
    return Status::InvalidArgument(std::string(field) + " is " + std::to_string(value.size()) +
                                   " bytes, above the limit of " + std::to_string(max_bytes));
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if (IsControl(c)) {
      char code[8];
      std::snprintf(code, sizeof(code), "0x%02x", c);
      return Status::InvalidArgument(std::string(field) + " holds control character " + code + " at byte " +
                                     std::to_string(i));
    }
  }
  return Status::Ok();
}

Status Range(std::string_view field, uint64_t value, uint64_t lo, uint64_t hi) {
  if (value < lo || value > hi) {
    return Status::InvalidArgument(std::string(field) + " " + std::to_string(value) + " outside [" +
                                   std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return Status::Ok();
}

Status Aligned(std::string_view field, uint64_t value, uint64_t alignment) {
  if (alignment != 0 && value % alignment != 0) {
    return Status::InvalidArgument(std::string(field) + " " + std::to_string(value) +
                                   " is not a multiple of the element size " + std::to_string(alignment));
  }
  return Status::Ok();
}

Status Enum(std::string_view field, int value, bool known) {
  if (!known) return Status::InvalidArgument(std::string(field) + " has unknown value " + std::to_string(value));
  return Status::Ok();
}

std::string Printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (IsControl(c) || c == '\\' || c >= 0x80) {
      char code[8];
      std::snprintf(code, sizeof(code), "\\x%02x", c);
      out += code;
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace collectived::daemon::validate
