#include "tests/support/exact_data.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <cstring>
#include <limits>

#include "kernels/host/half.h"

namespace collectived::testing {
namespace {

using host::BFloat16;
using host::Float16;

uint64_t Mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

bool Unsigned(DataType d) { return d == DataType::kUint32; }

// Writes `v` (exactly representable) as one element of `dtype`.
void Store(DataType dtype, void* base, uint64_t j, double v) {
  switch (dtype) {
    case DataType::kFloat32: static_cast<float*>(base)[j] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(base)[j] = v; break;
    case DataType::kFloat16: static_cast<Float16*>(base)[j] = host::FloatToHalf(static_cast<float>(v)); break;
    case DataType::kBFloat16: static_cast<BFloat16*>(base)[j] = host::FloatToBFloat16(static_cast<float>(v)); break;
    case DataType::kInt32: static_cast<int32_t*>(base)[j] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(base)[j] = static_cast<int64_t>(v); break;
    case DataType::kUint32: static_cast<uint32_t*>(base)[j] = static_cast<uint32_t>(v); break;
    default: break;
  }
}

// Bits of element j, widened to 64 bits for comparison.
uint64_t Bits(DataType dtype, const void* base, uint64_t j) {
  const size_t size = DataTypeSize(dtype);
  uint64_t b = 0;
  std::memcpy(&b, static_cast<const uint8_t*>(base) + j * size, size);
  return b;
}

bool IsNan(DataType dtype, uint64_t bits) {
  switch (dtype) {
    case DataType::kFloat32: return (bits & 0x7fffffffu) > 0x7f800000u;
    case DataType::kFloat64: return (bits & 0x7fffffffffffffffULL) > 0x7ff0000000000000ULL;
    case DataType::kFloat16: return (bits & 0x7fffu) > 0x7c00u;
    case DataType::kBFloat16: return (bits & 0x7fffu) > 0x7f80u;
    default: return false;
  }
}

}  // namespace

double InputValue(DataType dtype, ReduceOp op, uint32_t rank, uint64_t j, uint64_t seed) {
  const uint64_t h = Mix(seed * 1000003ULL + rank * 7919ULL + j * 104729ULL + Mix(j));
  switch (op) {
    case ReduceOp::kProd: {
      // Powers of two with a sign: products stay exact (or overflow identically).
      if (!IsFloatingType(dtype)) return Unsigned(dtype) ? static_cast<double>(1 + h % 3) : (h % 3 == 0 ? -1.0 : (h % 3 == 1 ? 1.0 : 2.0));
      static const double kFactors[] = {1.0, -1.0, 2.0, 0.5};
      return kFactors[h % 4];
    }
    case ReduceOp::kMin:
    case ReduceOp::kMax:
    case ReduceOp::kUnspecified: {
      const uint64_t span = dtype == DataType::kBFloat16 ? 255 : 2001;  // integers exact in the type
      const double v = static_cast<double>(h % span);
      return Unsigned(dtype) ? v : v - static_cast<double>(span / 2);
    }
    default: {  // sum, avg: |v| <= 4, so 64 ranks sum to <= 256 (exact even in bfloat16)
      const double v = static_cast<double>(h % 9);
      return Unsigned(dtype) ? v : v - 4.0;
    }
  }
}

void FillInput(DataType dtype, ReduceOp op, uint32_t rank, uint64_t seed, void* out, uint64_t count) {
  for (uint64_t j = 0; j < count; ++j) Store(dtype, out, j, InputValue(dtype, op, rank, j, seed));
}

void Poison(DataType dtype, void* out, uint64_t count) {
  if (!IsFloatingType(dtype)) {
    std::memset(out, 0xA5, count * DataTypeSize(dtype));
    return;
  }
  for (uint64_t j = 0; j < count; ++j) Store(dtype, out, j, std::numeric_limits<double>::quiet_NaN());
}

uint64_t CountWrongAllReduce(DataType dtype, ReduceOp op, uint32_t world, uint64_t seed, const void* out,
                             uint64_t count) {
  std::unique_ptr<uint8_t[]> expected(new uint8_t[DataTypeSize(dtype)]);
  uint64_t wrong = 0;
  for (uint64_t j = 0; j < count; ++j) {
    // Reference: floats in double, integers in 64-bit two's complement
    // truncated to the type (wrap-around like the kernels).
    double acc = InputValue(dtype, op, 0, j, seed);
    uint64_t iacc = static_cast<uint64_t>(static_cast<int64_t>(acc));
    for (uint32_t r = 1; r < world; ++r) {
      const double v = InputValue(dtype, op, r, j, seed);
      const uint64_t iv = static_cast<uint64_t>(static_cast<int64_t>(v));
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg: acc += v; iacc += iv; break;
        case ReduceOp::kProd: acc *= v; iacc *= iv; break;
        case ReduceOp::kMin: acc = std::min(acc, v); break;
        case ReduceOp::kMax: acc = std::max(acc, v); break;
        default: break;
      }
    }
    if (op == ReduceOp::kAvg) acc /= world;
    const bool integer_wrap = !IsFloatingType(dtype) && (op == ReduceOp::kSum || op == ReduceOp::kProd);
    uint64_t want = 0;
    if (integer_wrap) {
      want = iacc;
      if (DataTypeSize(dtype) == 4) want &= 0xffffffffULL;
    } else {
      Store(dtype, expected.get(), 0, acc);
      want = Bits(dtype, expected.get(), 0);
    }
    const uint64_t got = Bits(dtype, out, j);
    if (IsNan(dtype, got)) {
      ++wrong;
    } else if (got != want) {
      // avg: one rounding of sum / n, allow 1 ulp (same sign, adjacent bits).
      const uint64_t diff = got > want ? got - want : want - got;
      if (!(op == ReduceOp::kAvg && diff == 1)) ++wrong;
    }
  }
  return wrong;
}

uint64_t CountWrongAllGather(DataType dtype, uint32_t world, uint64_t seed, const void* out, uint64_t count) {
  std::unique_ptr<uint8_t[]> expected(new uint8_t[DataTypeSize(dtype)]);
  const size_t size = DataTypeSize(dtype);
  uint64_t wrong = 0;
  for (uint32_t r = 0; r < world; ++r) {
    const void* chunk = static_cast<const uint8_t*>(out) + r * count * size;
    for (uint64_t j = 0; j < count; ++j) {
      Store(dtype, expected.get(), 0, InputValue(dtype, ReduceOp::kUnspecified, r, j, seed));
      wrong += Bits(dtype, chunk, j) != Bits(dtype, expected.get(), 0);
    }
  }
  return wrong;
}

}  // namespace collectived::testing
