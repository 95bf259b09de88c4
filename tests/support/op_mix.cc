#include "tests/support/op_mix.h"

#include "tests/support/exact_data.h"

namespace collectived::testing {

MixedOp NextMixedOp(std::mt19937_64& rng, uint64_t max_count, uint64_t run_seed, uint64_t k) {
  static const DataType kTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                                    DataType::kInt32,   DataType::kInt64,   DataType::kUint32};
  static const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};
  MixedOp op;
  op.gather = rng() % 4 == 0;
  op.dtype = kTypes[rng() % 7];
  do {
    op.op = kOps[rng() % 5];
  } while (!IsValidReduction(op.dtype, op.op));
  if (op.gather) op.op = ReduceOp::kUnspecified;
  op.count = 1 + rng() % max_count;
  op.in_place = rng() % 2 == 0;
  op.seed = run_seed * 1000003 + k;
  return op;
}

Status PostMixedOp(Communicator& comm, const MixedOp& op, Buffer& send, Buffer& recv, bool via_rpc, Handle* handle) {
  const uint32_t rank = comm.rank(), world = comm.world_size();
  const size_t es = DataTypeSize(op.dtype);
  if (op.gather) {
    Poison(op.dtype, recv.data(), op.count * world);
    if (op.in_place) {
      FillInput(op.dtype, op.op, rank, op.seed, recv.as<uint8_t>() + rank * op.count * es, op.count);
      BufferSpan mine(recv, rank * op.count * es);
      return via_rpc ? comm.SubmitAllGather(mine, recv, op.count, op.dtype, handle)
                     : comm.AllGather(mine, recv, op.count, op.dtype, handle);
    }
    FillInput(op.dtype, op.op, rank, op.seed, send.data(), op.count);
    return via_rpc ? comm.SubmitAllGather(send, recv, op.count, op.dtype, handle)
                   : comm.AllGather(send, recv, op.count, op.dtype, handle);
  }
  FillInput(op.dtype, op.op, rank, op.seed, send.data(), op.count);
  if (!op.in_place) Poison(op.dtype, recv.data(), op.count);
  Buffer& out = op.in_place ? send : recv;
  return via_rpc ? comm.SubmitAllReduce(send, out, op.count, op.dtype, op.op, handle)
                 : comm.AllReduce(send, out, op.count, op.dtype, op.op, handle);
}

uint64_t CountWrongMixedOp(const MixedOp& op, uint32_t world, const Buffer& send, const Buffer& recv) {
  const void* out = op.in_place && !op.gather ? send.data() : recv.data();
  return op.gather ? CountWrongAllGather(op.dtype, world, op.seed, out, op.count)
                   : CountWrongAllReduce(op.dtype, op.op, world, op.seed, out, op.count);
}

}  // namespace collectived::testing
