// Element-wise reduction over several inputs on the CPU, every dtype and op.
#ifndef COLLECTIVED_KERNELS_HOST_REDUCE_H_
#define COLLECTIVED_KERNELS_HOST_REDUCE_H_

#include <cstddef>
#include <cstdint>

#include "collectived/types.h"

namespace collectived::host {

// out[j] = in[0][j] op in[1][j] op ... op in[n-1][j] for j in [begin, end),
// in rank order, so every rank and every algorithm produces the same bits.
// float16/bfloat16 accumulate in float and round once. avg = sum / n.
// Integer sum/prod wrap (two's complement). `out` may alias any in[k].
// `also_out`, when set, receives the same result at the same elements: a
// block is stored there while it is still in L1, cheaper than copying `out`
// afterwards. It may alias in[k] only exactly (the same elements), and must
// not overlap `out`.
// REQUIRES: IsValidReduction(dtype, op), n >= 1.
void ReduceElements(DataType dtype, ReduceOp op, void* out, const void* const* in, uint32_t n, size_t begin,
                    size_t end, void* also_out = nullptr);

// data[j] = data[j] / divisor for j in [0, count): kAvg's last step where the
// sum was taken in parts (across nodes). Floating types only (like kAvg);
// float16/bfloat16 divide in float and round once.
void DivideElements(DataType dtype, void* data, size_t count, uint32_t divisor);

}  // namespace collectived::host

#endif  // COLLECTIVED_KERNELS_HOST_REDUCE_H_
