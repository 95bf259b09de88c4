// float16 / bfloat16 storage types for the host backend, with round-to-
// nearest-even conversions (the rounding the GPU kernels use).
#ifndef COLLECTIVED_KERNELS_HOST_HALF_H_
#define COLLECTIVED_KERNELS_HOST_HALF_H_

#include <cmath>
#include <cstdint>
#include <cstring>

namespace collectived::host {

struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

inline uint32_t FloatBits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}
inline float BitsFloat(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

inline Float16 FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return {static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u))};
  if (absx >= 0x477ff000u) return {static_cast<uint16_t>(sign | 0x7c00u)};  // >= 65520 rounds to inf
  if (absx < 0x38800000u) {  // below 2^-14: subnormal half (exact scaling, RNE rounding)
    const float scaled = BitsFloat(absx) * 16777216.0f;
    return {static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)))};
  }
  const uint32_t mant = absx & 0x7fffffu;
  const uint32_t exp = (absx >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return {static_cast<uint16_t>(sign | h)};
}

inline float HalfToFloat(Float16 v) {
  const uint32_t h = v.bits;
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float f = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -f : f;
  }
  if (exp == 31) return BitsFloat(sign | 0x7f800000u | (mant << 13));
  return BitsFloat(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

inline BFloat16 FloatToBFloat16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((x >> 16) | 0x40u)};  // quiet NaN
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return {static_cast<uint16_t>(rounded >> 16)};
}

inline float BFloat16ToFloat(BFloat16 v) { return BitsFloat(static_cast<uint32_t>(v.bits) << 16); }

}  // namespace collectived::host

#endif  // COLLECTIVED_KERNELS_HOST_HALF_H_
