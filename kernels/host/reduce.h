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
// REQUIRES: IsValidReduction(dtype, op), n >= 1.
void ReduceElements(DataType dtype, ReduceOp op, void* out, const void* const* in, uint32_t n, size_t begin,
                    size_t end);

}  // namespace collectived::host

#endif  // COLLECTIVED_KERNELS_HOST_REDUCE_H_
