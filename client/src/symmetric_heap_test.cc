// Unit tests of the symmetric heap's allocator (host only: no GPU headers).
#include "client/src/symmetric_heap.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace collectived {
namespace {

constexpr uint64_t kAlign = 256;  // what the communicator passes (ring::kHeapAlignment)

uint64_t MustAlloc(SymmetricHeap& heap, uint64_t bytes) {
  uint64_t offset = ~uint64_t{0};
  Status s = heap.Alloc(bytes, &offset);
  EXPECT_TRUE(s.ok()) << bytes << " bytes: " << s.ToString();
  return offset;
}

TEST(SymmetricHeapTest, RangesAreRoundedUpToTheAlignmentAndPackedFirstFit) {
  SymmetricHeap heap(4096, kAlign);
  EXPECT_EQ(MustAlloc(heap, 1), 0u);
  EXPECT_EQ(MustAlloc(heap, 256), 256u);
  EXPECT_EQ(MustAlloc(heap, 257), 512u);  // two units
  EXPECT_EQ(MustAlloc(heap, 0), 1024u);   // 0 bytes still takes a unit
  EXPECT_EQ(MustAlloc(heap, 100), 1280u);
}

TEST(SymmetricHeapTest, SameSizesInTheSameOrderGiveTheSameOffsets) {
  SymmetricHeap a(1 << 20, kAlign), b(1 << 20, kAlign);
  for (uint64_t bytes : {uint64_t{3000}, uint64_t{1}, uint64_t{70000}, uint64_t{256}}) {
    EXPECT_EQ(MustAlloc(a, bytes), MustAlloc(b, bytes)) << bytes;
  }
}

TEST(SymmetricHeapTest, ExhaustionIsResourceExhaustedNamingTheOption) {
  SymmetricHeap heap(1024, kAlign);
  uint64_t offset = 7;
  Status s = heap.Alloc(1025, &offset);  // more than the whole heap
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("1280 bytes"), std::string::npos) << s.message();  // the rounded request
  EXPECT_NE(s.message().find("gpu_heap_bytes"), std::string::npos) << s.message();
  EXPECT_EQ(offset, 7u);  // untouched when refused
  EXPECT_EQ(MustAlloc(heap, 1024), 0u);
  EXPECT_EQ(heap.Alloc(1, &offset).code(), StatusCode::kResourceExhausted);
}

TEST(SymmetricHeapTest, ASizeNear2To64IsRefusedNotWrappedToZero) {
  SymmetricHeap heap(4096, 256);
  uint64_t off = 7;
  for (uint64_t bytes : {UINT64_MAX, UINT64_MAX - 10, UINT64_MAX - 255, uint64_t{4097}}) {
    EXPECT_EQ(heap.Alloc(bytes, &off).code(), StatusCode::kResourceExhausted) << bytes;
  }
  // Nothing was handed out: the whole heap is still there.
  ASSERT_TRUE(heap.Alloc(4096, &off).ok());
  EXPECT_EQ(off, 0u);
}

TEST(SymmetricHeapTest, AnEmptyHeapRefusesEverything) {
  SymmetricHeap heap(0, kAlign);
  uint64_t offset = 0;
  EXPECT_EQ(heap.Alloc(1, &offset).code(), StatusCode::kResourceExhausted);
}

TEST(SymmetricHeapTest, ATailShorterThanOneUnitIsNeverHandedOut) {
  SymmetricHeap heap(1000, kAlign);  // 3 units and 232 bytes
  EXPECT_EQ(MustAlloc(heap, 768), 0u);
  uint64_t offset = 0;
  EXPECT_EQ(heap.Alloc(1, &offset).code(), StatusCode::kResourceExhausted);
}

TEST(SymmetricHeapTest, AFreedRangeIsReusedBeforeTheRest) {
  SymmetricHeap heap(4096, kAlign);
  ASSERT_EQ(MustAlloc(heap, 512), 0u);
  ASSERT_EQ(MustAlloc(heap, 256), 512u);
  ASSERT_TRUE(heap.Free(0).ok());
  EXPECT_EQ(MustAlloc(heap, 200), 0u);    // first fit: the freed range
  EXPECT_EQ(MustAlloc(heap, 256), 256u);  // what is left of it
  EXPECT_EQ(MustAlloc(heap, 1), 768u);    // then the space after the last range
}

TEST(SymmetricHeapTest, FreeOfAnOffsetNotAllocatedIsNotFound) {
  SymmetricHeap heap(4096, kAlign);
  const uint64_t a = MustAlloc(heap, 512);
  Status s = heap.Free(a + 256);  // inside the range, not its start
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("offset 256"), std::string::npos) << s.message();
  EXPECT_EQ(heap.Free(1024).code(), StatusCode::kNotFound);  // free space
  ASSERT_TRUE(heap.Free(a).ok());
  EXPECT_EQ(heap.Free(a).code(), StatusCode::kNotFound);  // twice
}

// Four ranges of one unit; freeing the first and third leaves two units
// free, apart: a two-unit request is refused until the second goes too,
// which joins all three into one range (merged with both neighbours).
TEST(SymmetricHeapTest, FragmentsAreMergedWhenTheRangeBetweenThemIsFreed) {
  SymmetricHeap heap(4 * kAlign, kAlign);
  uint64_t r[4];
  for (uint64_t& x : r) x = MustAlloc(heap, kAlign);
  ASSERT_TRUE(heap.Free(r[0]).ok());
  ASSERT_TRUE(heap.Free(r[2]).ok());
  uint64_t offset = 0;
  EXPECT_EQ(heap.Alloc(2 * kAlign, &offset).code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(heap.Free(r[1]).ok());
  EXPECT_EQ(MustAlloc(heap, 3 * kAlign), 0u);
  EXPECT_EQ(heap.Alloc(1, &offset).code(), StatusCode::kResourceExhausted);  // r[3] is still held
  ASSERT_TRUE(heap.Free(r[3]).ok());
  ASSERT_TRUE(heap.Free(0).ok());
  EXPECT_EQ(MustAlloc(heap, 4 * kAlign), 0u);  // the whole heap is one range again
}

}  // namespace
}  // namespace collectived
