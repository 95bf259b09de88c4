// Inputs whose reductions are exact in every dtype (nccl-tests style), the
// matching reference, and poisoning. Shared by tests and the benchmark.
//
// Values are small integers (sum, avg, min, max) or powers of two (prod), so
// every partial result is representable and any reduction order gives the
// same bits; avg is compared within 1 ulp (one rounding of sum / n).
#ifndef COLLECTIVED_TESTS_SUPPORT_EXACT_DATA_H_
#define COLLECTIVED_TESTS_SUPPORT_EXACT_DATA_H_

#include <cstdint>

#include "collectived/types.h"

namespace collectived::testing {

// Input element j of `rank` for a reduction `op` (kUnspecified: all-gather),
// as a double; exactly representable in `dtype`.
double InputValue(DataType dtype, ReduceOp op, uint32_t rank, uint64_t j, uint64_t seed);
// Writes count inputs of `rank` into `out` in `dtype`.
void FillInput(DataType dtype, ReduceOp op, uint32_t rank, uint64_t seed, void* out, uint64_t count);
// NaN for floating types, 0xA5.. bytes for integers: never a valid result.
void Poison(DataType dtype, void* out, uint64_t count);
// Elements of an all-reduce result over `world` ranks that differ from the reference.
uint64_t CountWrongAllReduce(DataType dtype, ReduceOp op, uint32_t world, uint64_t seed, const void* out,
                             uint64_t count);
// Elements of an all-gather result (world * count) that differ from the inputs.
uint64_t CountWrongAllGather(DataType dtype, uint32_t world, uint64_t seed, const void* out, uint64_t count);

}  // namespace collectived::testing

#endif  // COLLECTIVED_TESTS_SUPPORT_EXACT_DATA_H_
