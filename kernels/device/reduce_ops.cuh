// Element arithmetic shared by every device kernel: accumulator types and
// conversions (16-bit floats accumulate in float, round-to-nearest-even once),
// wrapping integer sum/prod, and 16-byte packs for vectorised loads/stores.
// Same contract as kernels/host/reduce.h, so host and device give equal bits.
#ifndef COLLECTIVED_KERNELS_DEVICE_REDUCE_OPS_CUH_
#define COLLECTIVED_KERNELS_DEVICE_REDUCE_OPS_CUH_

#include <cstdint>
#include <type_traits>

#include "collectived/types.h"
#include "base/gpu/gpu_runtime.h"

namespace collectived::device {

template <typename T>
struct Elem {
  using Acc = T;
  __device__ static Acc Load(T v) { return v; }
  __device__ static T Store(Acc v) { return v; }
};
template <>
struct Elem<gpu_half> {
  using Acc = float;
  __device__ static Acc Load(gpu_half v) { return gpuHalfToFloat(v); }
  __device__ static gpu_half Store(Acc v) { return gpuFloatToHalf(v); }
};
template <>
struct Elem<gpu_bfloat16> {
  using Acc = float;
  __device__ static Acc Load(gpu_bfloat16 v) { return gpuBFloat16ToFloat(v); }
  __device__ static gpu_bfloat16 Store(Acc v) { return gpuFloatToBFloat16(v); }
};

template <typename A, ReduceOp kOp>
__device__ __forceinline__ A Combine(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;  // wrap instead of signed overflow
    if constexpr (kOp == ReduceOp::kSum) return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
    if constexpr (kOp == ReduceOp::kProd) return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    if constexpr (kOp == ReduceOp::kSum || kOp == ReduceOp::kAvg) return a + b;
    if constexpr (kOp == ReduceOp::kProd) return a * b;
  }
  if constexpr (kOp == ReduceOp::kMin) return b < a ? b : a;
  return a < b ? b : a;
}

// Reduces element j over `n` inputs in rank order.
template <typename T, ReduceOp kOp>
__device__ __forceinline__ T ReduceOne(const void* const* in, uint32_t n, uint64_t j) {
  using E = Elem<T>;
  using A = typename E::Acc;
  A acc = E::Load(static_cast<const T*>(in[0])[j]);
  for (uint32_t k = 1; k < n; ++k) acc = Combine<A, kOp>(acc, E::Load(static_cast<const T*>(in[k])[j]));
  if constexpr (kOp == ReduceOp::kAvg) acc = acc / static_cast<A>(n);
  return E::Store(acc);
}

// 16 bytes of T.
template <typename T>
struct alignas(16) Pack {
  static constexpr int kElems = 16 / sizeof(T);
  T v[kElems];
};

// Streaming (evict-first) accesses, for data an op touches once: an input
// read once, an output written once and not read back by the op. They leave
// L2 to what is reused (measured on the H100, tools/gpu-lab/loop_probe.cu: a
// 2-input reduce to 2 outputs at 16-64 MiB a buffer ran 3-12 % faster, a
// copy up to 24 %, nothing either way at 256 MiB; docs/latency.md, "The
// 16-64 MiB range"). HIP has no uint4 overloads: plain accesses there. PTX
// treats cache operators as performance hints: the ordering the op protocol
// relies on is unchanged.
__device__ __forceinline__ uint4 LoadStreaming(const uint4* p) {
#if defined(COLLECTIVED_USE_HIP) || defined(__HIP_PLATFORM_AMD__)
  return *p;
#else
  return __ldcs(p);
#endif
}
__device__ __forceinline__ void StoreStreaming(uint4* p, const uint4& v) {
#if defined(COLLECTIVED_USE_HIP) || defined(__HIP_PLATFORM_AMD__)
  *p = v;
#else
  __stcs(p, v);
#endif
}

template <typename T, bool kStreaming = false>
__device__ __forceinline__ Pack<T> LoadPack(const void* base, uint64_t p) {
  const uint4* at = static_cast<const uint4*>(base) + p;
  uint4 raw = kStreaming ? LoadStreaming(at) : *at;
  Pack<T> out;
  static_assert(sizeof(out) == sizeof(raw));
  __builtin_memcpy(&out, &raw, sizeof(raw));
  return out;
}

template <typename T, bool kStreaming = false>
__device__ __forceinline__ void StorePack(void* base, uint64_t p, const Pack<T>& v) {
  uint4 raw;
  __builtin_memcpy(&raw, &v, sizeof(raw));
  uint4* at = static_cast<uint4*>(base) + p;
  if constexpr (kStreaming) {
    StoreStreaming(at, raw);
  } else {
    *at = raw;
  }
}

// Reduces pack p over `n` inputs in rank order.
template <typename T, ReduceOp kOp>
__device__ __forceinline__ Pack<T> ReducePack(const void* const* in, uint32_t n, uint64_t p) {
  using E = Elem<T>;
  using A = typename E::Acc;
  constexpr int kN = Pack<T>::kElems;
  A acc[kN];
  Pack<T> x = LoadPack<T>(in[0], p);
#pragma unroll
  for (int i = 0; i < kN; ++i) acc[i] = E::Load(x.v[i]);
  for (uint32_t k = 1; k < n; ++k) {
    x = LoadPack<T>(in[k], p);
#pragma unroll
    for (int i = 0; i < kN; ++i) acc[i] = Combine<A, kOp>(acc[i], E::Load(x.v[i]));
  }
  Pack<T> out;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    if constexpr (kOp == ReduceOp::kAvg) acc[i] = acc[i] / static_cast<A>(n);
    out.v[i] = E::Store(acc[i]);
  }
  return out;
}

// Calls f.template operator()<T, kOp>() for a runtime (dtype, op).
// REQUIRES: IsValidReduction(dtype, op).
template <typename F>
auto DispatchReduction(DataType dtype, ReduceOp op, F&& f) {
  auto by_op = [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
      case ReduceOp::kSum: return f.template operator()<T, ReduceOp::kSum>();
      case ReduceOp::kProd: return f.template operator()<T, ReduceOp::kProd>();
      case ReduceOp::kMin: return f.template operator()<T, ReduceOp::kMin>();
      case ReduceOp::kMax: return f.template operator()<T, ReduceOp::kMax>();
      default:
        if constexpr (std::is_integral_v<T>) {
          return f.template operator()<T, ReduceOp::kSum>();  // unreachable: avg on integers is refused
        } else {
          return f.template operator()<T, ReduceOp::kAvg>();
        }
    }
  };
  switch (dtype) {
    case DataType::kFloat64: return by_op(double{});
    case DataType::kFloat16: return by_op(gpu_half{});
    case DataType::kBFloat16: return by_op(gpu_bfloat16{});
    case DataType::kInt32: return by_op(int32_t{});
    case DataType::kInt64: return by_op(int64_t{});
    case DataType::kUint32: return by_op(uint32_t{});
    default: return by_op(float{});
  }
}

}  // namespace collectived::device

#endif  // COLLECTIVED_KERNELS_DEVICE_REDUCE_OPS_CUH_
