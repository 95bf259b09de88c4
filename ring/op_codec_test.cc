// Unit tests of the shared-memory codec (ring/op_codec.h) and of the GPU
// control window's layout: what poster and executor must encode alike.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <set>
#include <tuple>

#include "ring/gpu_control_layout.h"
#include "ring/matcher.h"
#include "ring/op_codec.h"

namespace collectived::ring {
namespace {

TEST(OpCodecTest, BufferPlacesRoundTrip) {
  struct Case {
    BufferPlace place;
    uint64_t id;
  } cases[] = {{BufferPlace::kSlot, 0},       {BufferPlace::kHeap, 0},
               {BufferPlace::kRegistered, 0}, {BufferPlace::kRegistered, 1},
               {BufferPlace::kRegistered, 65536}, {BufferPlace::kRegistered, kMaxRegisteredBufferId}};
  std::set<uint64_t> words;
  for (const Case& c : cases) {
    const uint64_t word = EncodeBufferPlace(c.place, c.id);
    words.insert(word);
    BufferPlace place{};
    uint64_t id = 12345;
    ASSERT_TRUE(DecodeBufferPlace(word, &place, &id)) << word;
    EXPECT_EQ(place, c.place);
    EXPECT_EQ(id, c.id);
  }
  EXPECT_EQ(words.size(), std::size(cases)) << "two places share a word";
}

TEST(OpCodecTest, DecodeRefusesWordsNoPosterWrites) {
  const uint64_t bad[] = {0, 4, 0xff, EncodeBufferPlace(BufferPlace::kSlot) | 1 << 8,
                          EncodeBufferPlace(BufferPlace::kHeap) | uint64_t{7} << 8};
  for (uint64_t word : bad) {
    BufferPlace place{};
    uint64_t id = 0;
    EXPECT_FALSE(DecodeBufferPlace(word, &place, &id)) << word;
  }
}

TEST(OpCodecTest, PhaseFlagsCarryGenerationAndStatus) {
  const uint64_t ok = EncodePhaseFlag(0, StatusCode::kOk);
  EXPECT_EQ(PhaseFlagGeneration(ok), 1u);
  EXPECT_EQ(PhaseFlagStatus(ok), StatusCode::kOk);
  const uint64_t failed = EncodePhaseFlag(41, StatusCode::kInvalidArgument);
  EXPECT_EQ(PhaseFlagGeneration(failed), 42u);
  EXPECT_EQ(PhaseFlagStatus(failed), StatusCode::kInvalidArgument);
  // A waiter for op i waits for flag >= (i + 1) << shift: any status of op i
  // passes it, no status of op i - 1 does.
  for (StatusCode s : {StatusCode::kOk, StatusCode::kAborted, StatusCode::kUnauthenticated}) {
    EXPECT_GE(EncodePhaseFlag(9, s), uint64_t{10} << kPhaseFlagShift);
    EXPECT_LT(EncodePhaseFlag(8, s), uint64_t{10} << kPhaseFlagShift);
  }
}

TEST(OpCodecTest, RingSlotLayoutIsTheHostStruct) {
  const RingSlotWords w = RingSlotLayout();
  EXPECT_EQ(w.slot_bytes, sizeof(RingSlot));
  EXPECT_EQ(w.desc_offset, offsetof(RingSlot, desc));
  EXPECT_EQ(w.desc_words * 8u, sizeof(OpDescriptor));
  EXPECT_LE(w.desc_words, kRingDescriptorWords);
  EXPECT_GE(w.desc_offset, sizeof(uint64_t)) << "ready_seq sits before the descriptor";
}

TEST(OpCodecTest, PackedDescriptorReadsBackAsTheSame) {
  OpDescriptor d{};
  d.kind = CollectiveKind::kAllReduce;
  d.dtype = DataType::kBFloat16;
  d.reduce_op = ReduceOp::kMax;
  d.algorithm = Algorithm::kTwoShot;
  d.count = 123456789;
  d.send_buffer_id = EncodeBufferPlace(BufferPlace::kRegistered, 77);
  d.send_offset = 4096;
  d.recv_buffer_id = EncodeBufferPlace(BufferPlace::kHeap);
  d.recv_offset = 8192;
  uint64_t words[kRingDescriptorWords];
  std::memset(words, 0xab, sizeof(words));
  PackOpDescriptor(d, words);
  OpDescriptor back{};
  std::memcpy(&back, words, sizeof(back));
  EXPECT_EQ(std::memcmp(&back, &d, sizeof(d)), 0);
  for (uint32_t w = RingSlotLayout().desc_words; w < kRingDescriptorWords; ++w) EXPECT_EQ(words[w], 0u) << w;
}

TEST(OpCodecTest, DeviceDescriptorTellsEveryFieldApart) {
  auto pack = [](CollectiveKind k, DataType t, ReduceOp o, uint32_t a, uint64_t n, bool z, uint64_t s, uint64_t r) {
    uint64_t w[kDescriptorWords];
    PackDeviceDescriptor(k, t, o, a, n, z, s, r, w);
    return std::make_tuple(w[0], w[1], w[2]);
  };
  const auto base = pack(CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 1, 1024, true, 3, 5);
  EXPECT_EQ(base, pack(CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 1, 1024, true, 3, 5));
  EXPECT_NE(base, pack(CollectiveKind::kAllGather, DataType::kFloat32, ReduceOp::kSum, 1, 1024, true, 3, 5));
  EXPECT_NE(base, pack(CollectiveKind::kAllReduce, DataType::kInt32, ReduceOp::kSum, 1, 1024, true, 3, 5));
  EXPECT_NE(base, pack(CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kMax, 1, 1024, true, 3, 5));
  EXPECT_NE(base, pack(CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 2, 1024, true, 3, 5));
  EXPECT_NE(base, pack(CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 1, 1025, true, 3, 5));
  EXPECT_NE(base, pack(CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 1, 1024, false, 3, 5));
  EXPECT_NE(base, pack(CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 1, 1024, true, 4, 5));
  EXPECT_NE(base, pack(CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 1, 1024, true, 3, 6));
  // Staged ops do not compare where buffers lie: each rank's are its own.
  EXPECT_EQ(pack(CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 1, 1024, false, 3, 5),
            pack(CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 1, 1024, false, 8, 9));
}

TEST(OpCodecTest, TaggedDescriptorHalvesRoundTripAndTellOpsApart) {
  // Tags at the edges of the 32 bits a word keeps of the generation.
  for (uint64_t gen : {uint64_t{1}, uint64_t{0xffffffff}, uint64_t{1} << 32, (uint64_t{1} << 32) + 1}) {
    for (uint32_t half : {0u, 1u, 0xdeadbeefu, 0xffffffffu}) {
      const uint64_t w = TagHalf(gen, half);
      EXPECT_EQ(TaggedHalf(w), half) << gen;
      EXPECT_TRUE(TagMatches(w, gen)) << gen;
      EXPECT_FALSE(TagMatches(w, gen + 1)) << gen;
      EXPECT_FALSE(TagMatches(w, gen - 1)) << gen;
    }
  }
  // What a line holds before any op (zeros) is no op's word.
  EXPECT_FALSE(TagMatches(0, 1));
  // Only 32 bits of the generation: the same tag 2^32 ops apart (why every
  // op rewrites its line, gpu_control_layout.h).
  EXPECT_TRUE(TagMatches(TagHalf(7, 5), 7 + (uint64_t{1} << 32)));
}

TEST(OpCodecTest, OneAlgorithmChoiceForEveryPoster) {
  EXPECT_EQ(ChooseAlgorithm(CollectiveKind::kAllReduce, 256 * 1024, 256 * 1024), Algorithm::kOneShot);
  EXPECT_EQ(ChooseAlgorithm(CollectiveKind::kAllReduce, 256 * 1024 + 1, 256 * 1024), Algorithm::kTwoShot);
  EXPECT_EQ(ChooseAlgorithm(CollectiveKind::kAllGather, 1, 256 * 1024), Algorithm::kGather);
}

TEST(OpCodecTest, HostCommunicatorsOfMoreThanTwoRanksLeaveOneShotEarly) {
  for (bool daemon : {false, true}) {
    EXPECT_EQ(HostOneShotMaxBytes(256 * 1024, 1, daemon), 256u * 1024);
    EXPECT_EQ(HostOneShotMaxBytes(256 * 1024, 3, daemon), kHostWideOneShotMaxBytes);
    EXPECT_EQ(HostOneShotMaxBytes(256 * 1024, 8, daemon), kHostWideOneShotMaxBytes);
    EXPECT_EQ(HostOneShotMaxBytes(1024, 8, daemon), 1024u);  // a lower configured limit stands
    EXPECT_EQ(ChooseAlgorithm(CollectiveKind::kAllReduce, 16 * 1024, HostOneShotMaxBytes(256 * 1024, 8, daemon)),
              Algorithm::kTwoShot);
  }
  // Two ranks: client-executed keeps the configured limit; daemon-executed
  // reads in place and stays one-shot at every size.
  EXPECT_EQ(HostOneShotMaxBytes(256 * 1024, 2, false), 256u * 1024);
  EXPECT_EQ(ChooseAlgorithm(CollectiveKind::kAllReduce, 1 << 20, HostOneShotMaxBytes(256 * 1024, 2, false)),
            Algorithm::kTwoShot);
  EXPECT_EQ(ChooseAlgorithm(CollectiveKind::kAllReduce, uint64_t{1} << 34, HostOneShotMaxBytes(256 * 1024, 2, true)),
            Algorithm::kOneShot);
}

TEST(GpuControlLayoutTest, RegionsAreDisjointAndInOrder) {
  alignas(64) static uint64_t window[GpuControlLayout::kBytes / 8];
  void* base = window;
  auto at = [&](const void* p) { return static_cast<const uint8_t*>(p) - static_cast<const uint8_t*>(base); };
  EXPECT_EQ(at(GpuControlLayout::Flags(base)), 0);
  EXPECT_GE(at(GpuControlLayout::Counter(base, 0)), static_cast<ptrdiff_t>(kFlagWords * 8));
  // One 128-byte line per rank: counter, op index, done, finished.
  EXPECT_EQ(at(GpuControlLayout::Counter(base, 1)) - at(GpuControlLayout::Counter(base, 0)), 128);
  EXPECT_EQ(at(GpuControlLayout::OpIndex(base, 3)), at(GpuControlLayout::Counter(base, 3)) + 8);
  EXPECT_EQ(at(GpuControlLayout::Done(base, 3)), at(GpuControlLayout::Counter(base, 3)) + 16);
  EXPECT_EQ(at(GpuControlLayout::Finished(base, 3)), at(GpuControlLayout::Counter(base, 3)) + 24);
  // Block completion words after the rank lines, kMaxBlocks per rank, before the error word.
  EXPECT_GE(at(GpuControlLayout::BlockDone(base, 0)), at(GpuControlLayout::Counter(base, kMaxDeviceRanks - 1)) + 128);
  EXPECT_EQ(at(GpuControlLayout::BlockDone(base, 1)) - at(GpuControlLayout::BlockDone(base, 0)),
            static_cast<ptrdiff_t>(kMaxBlocks * 8));
  EXPECT_GE(at(GpuControlLayout::Error(base)), at(GpuControlLayout::BlockDone(base, kMaxDeviceRanks - 1)) +
                                                   static_cast<ptrdiff_t>(kMaxBlocks * 8));
  // A flag's line holds the flag and the descriptor beside it.
  EXPECT_GE(kFlagLineWords * 8, 128u);
  EXPECT_GE(kFlagLineWords, kTaggedDescriptorWord + kTaggedDescriptorWords);
  EXPECT_EQ(at(GpuControlLayout::Abort(base)) - at(GpuControlLayout::Error(base)), 64) << "abort word on its own line";
  // The claim counters close the window, each on a 128-byte line of its own.
  EXPECT_EQ(at(GpuControlLayout::Claims(base)), at(GpuControlLayout::Trace(base, kMaxDeviceRanks)));
  EXPECT_EQ(at(GpuControlLayout::Claims(base)) % 128, 0);
  EXPECT_EQ(at(GpuControlLayout::Claims(base)) + 2 * 128, static_cast<ptrdiff_t>(GpuControlLayout::kBytes));
  EXPECT_EQ(AlignUp(1, kHeapAlignment), kHeapAlignment);
  EXPECT_EQ(AlignUp(kHeapAlignment, kHeapAlignment), kHeapAlignment);
}

// What a reader of the window counts as a rank's completed ops: the later of
// done (post/complete ops) and the slowest of the rank's blocks (single-launch
// ops with a word per block); words past `blocks` are not the communicator's.
TEST(GpuControlLayoutTest, CompletedOpsIsTheLaterOfDoneAndTheSlowestBlock) {
  const uint64_t words[4] = {7, 7, 6, 1};
  EXPECT_EQ(CompletedOps(5, words, 3), 6u);   // a block still in op 7
  EXPECT_EQ(CompletedOps(9, words, 3), 9u);   // post/complete ops since
  EXPECT_EQ(CompletedOps(5, words, 2), 7u);   // only the communicator's blocks count
  EXPECT_EQ(CompletedOps(5, words, 4), 5u);
  EXPECT_EQ(CompletedOps(4, words, 0), 4u);   // no block words: done alone
}

}  // namespace
}  // namespace collectived::ring
