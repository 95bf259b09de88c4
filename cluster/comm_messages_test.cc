#include "cluster/comm_messages.h"

#include <gtest/gtest.h>

namespace collectived::cluster {
namespace {

ControlMessage AFormDecision() {
  ControlMessage m;
  m.kind = ControlMessage::Kind::kForm;
  m.form.key = "job";
  m.form.mode = 2;
  m.form.plan.comm_tag = 0x1234;
  m.form.plan.world = 5;
  m.form.plan.nodes = {0, 2, 7};
  m.form.plan.ranks = {{1, 4}, {0}, {2, 3}};
  m.form.plan.recv_ids = {5, 0xffffff, 1};
  m.form.plan.epochs = {11, 22, 0x123456789abcdefULL};
  return m;
}

TEST(CommMessagesTest, EveryKindRoundTrips) {
  ControlMessage a;
  a.kind = ControlMessage::Kind::kAnnounce;
  a.announce = {"key", 4, 0, 1500, false, 0, 77, 0xfedcba9876543210ULL, {1, 3}};
  ControlMessage out;
  ASSERT_TRUE(DecodeControl(EncodeControl(a), &out).ok());
  EXPECT_EQ(out.announce.key, "key");
  EXPECT_EQ(out.announce.recv_id, 77u);
  EXPECT_EQ(out.announce.epoch, 0xfedcba9876543210ULL);
  EXPECT_EQ(out.announce.world, 4u);
  EXPECT_EQ(out.announce.op_timeout_ms, 1500u);
  EXPECT_EQ(out.announce.ranks, (std::vector<uint32_t>{1, 3}));

  ASSERT_TRUE(DecodeControl(EncodeControl(AFormDecision()), &out).ok());
  EXPECT_EQ(out.form.plan.comm_tag, 0x1234u);
  EXPECT_EQ(out.form.plan.nodes, (std::vector<uint32_t>{0, 2, 7}));
  EXPECT_EQ(out.form.plan.ranks[2], (std::vector<uint32_t>{2, 3}));
  EXPECT_EQ(out.form.plan.recv_ids, (std::vector<uint32_t>{5, 0xffffff, 1}));
  EXPECT_EQ(out.form.plan.epochs, (std::vector<uint64_t>{11, 22, 0x123456789abcdefULL}));
  EXPECT_TRUE(CheckPlan(out.form.plan, 2).ok());

  ControlMessage f;
  f.kind = ControlMessage::Kind::kFailure;
  f.failure = {"key", 7, 999, "bad\nline", true, true};
  ASSERT_TRUE(DecodeControl(EncodeControl(f), &out).ok());
  EXPECT_TRUE(out.failure.withdrew);
  EXPECT_TRUE(out.failure.relayed);
  EXPECT_EQ(out.failure.code, static_cast<uint32_t>(StatusCode::kUnknown));  // a code that does not exist
  EXPECT_EQ(out.failure.reason, "bad?line");                                  // no forged log lines
}

TEST(CommMessagesTest, EveryTruncationAndTrailingByteIsRefused) {
  const std::string good = EncodeControl(AFormDecision());
  ControlMessage out;
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_EQ(DecodeControl(good.substr(0, n), &out).code(), StatusCode::kInvalidArgument) << n;
  }
  EXPECT_EQ(DecodeControl(good + "x", &out).code(), StatusCode::kInvalidArgument);
  std::string unknown = good;
  unknown[0] = 9;
  EXPECT_EQ(DecodeControl(unknown, &out).code(), StatusCode::kInvalidArgument);
}

TEST(CommMessagesTest, OutOfRangeValuesAreRefused) {
  ControlMessage a;
  a.kind = ControlMessage::Kind::kAnnounce;
  a.announce = {"key", 4, 0, 0, false, 0, 1, 1, {4}};  // rank 4 of a world of 4
  ControlMessage out;
  EXPECT_EQ(DecodeControl(EncodeControl(a), &out).code(), StatusCode::kInvalidArgument);
  a.announce.ranks = {0};
  a.announce.world = 100000;
  EXPECT_EQ(DecodeControl(EncodeControl(a), &out).code(), StatusCode::kInvalidArgument);
  a.announce.world = 4;
  a.announce.key.clear();
  EXPECT_EQ(DecodeControl(EncodeControl(a), &out).code(), StatusCode::kInvalidArgument);
}

TEST(CommMessagesTest, PlansThatCannotBeRunAreRefused) {
  SpanningPlan p = AFormDecision().form.plan;
  EXPECT_TRUE(CheckPlan(p, 0).ok());
  EXPECT_EQ(CheckPlan(p, 1).code(), StatusCode::kInvalidArgument);  // this node holds no rank
  SpanningPlan twice = p;
  twice.ranks[1] = {1};  // rank 1 on two nodes, rank 0 on none
  EXPECT_EQ(CheckPlan(twice, 0).code(), StatusCode::kInvalidArgument);
  SpanningPlan unsorted = p;
  std::swap(unsorted.nodes[0], unsorted.nodes[1]);
  EXPECT_EQ(CheckPlan(unsorted, 0).code(), StatusCode::kInvalidArgument);
  SpanningPlan one = p;
  one.nodes = {0};
  one.ranks = {{0, 1, 2, 3, 4}};
  EXPECT_EQ(CheckPlan(one, 0).code(), StatusCode::kInvalidArgument);  // one node: not across nodes
  SpanningPlan no_id = p;
  no_id.recv_ids[1] = 0;
  EXPECT_EQ(CheckPlan(no_id, 0).code(), StatusCode::kInvalidArgument);
  no_id.recv_ids[1] = 1u << kRecvIdBits;
  EXPECT_EQ(CheckPlan(no_id, 0).code(), StatusCode::kInvalidArgument);
  SpanningPlan short_epochs = p;
  short_epochs.epochs.pop_back();
  EXPECT_EQ(CheckPlan(short_epochs, 0).code(), StatusCode::kInvalidArgument);
}

TEST(CommMessagesTest, DataTagsKeepTheirFieldsApart) {
  const uint64_t t = DataTag(0x1abcdef, 0x1fff, true, 0x1ff, 0x1ff, 0x1ffff, true);
  EXPECT_EQ(t >> 40, 0xabcdefu);        // receive id: 24 bits
  EXPECT_EQ((t >> 33) & 0x7f, 0x7fu);   // op index: its low 7 bits
  EXPECT_EQ((t >> 32) & 1, 1u);         // ring
  EXPECT_EQ((t >> 24) & 0xff, 0xffu);   // descriptor code
  EXPECT_EQ((t >> 16) & 0xff, 0xffu);   // step
  EXPECT_EQ((t >> 15) & 1, 1u);         // last piece
  EXPECT_EQ(t & 0x7fff, 0x7fffu);       // piece
  EXPECT_EQ(DataTag(0, 0, false, 0, 0, 0, false), 0u);
  EXPECT_NE(DataTag(1, 5, false, 0, 0, 0, false), DataTag(1, 6, false, 0, 0, 0, false));
  EXPECT_NE(DataTag(1, 5, false, 0, 0, 0, false), DataTag(2, 5, false, 0, 0, 0, false));
  EXPECT_NE(DataTag(1, 5, false, 0, 0, 0, false), DataTag(1, 5, true, 0, 0, 0, false));
  EXPECT_NE(DataTag(1, 5, false, 0, 0, 3, false), DataTag(1, 5, false, 0, 0, 3, true));
  // The GPU executor's chunks: op i's are index 64i + c (c < 64), and
  // neighbouring ops' never share the 7 bits.
  for (uint64_t i = 0; i < 8; ++i) {
    for (uint64_t c = 0; c < 64; ++c) {
      for (uint64_t c2 = 0; c2 < 64; ++c2) {
        EXPECT_NE(DataTag(1, 64 * i + c, false, 0, 0, 0, false), DataTag(1, 64 * (i + 1) + c2, false, 0, 0, 0, false));
      }
    }
  }
}

TEST(CommMessagesTest, EveryDescriptorTheNodesCouldDisagreeOnHasItsOwnCode) {
  // Two nodes whose ops move the same bytes but differ in kind, type or
  // reduce op must never match each other's parts (the old 8-bit hash mixed
  // them once in 256). Every pair, exactly.
  std::vector<ring::OpDescriptor> all;
  for (auto kind : {CollectiveKind::kAllReduce, CollectiveKind::kAllGather}) {
    for (uint32_t t = 1; t <= static_cast<uint32_t>(DataType::kUint32); ++t) {
      for (uint32_t o = 0; o <= static_cast<uint32_t>(ReduceOp::kAvg); ++o) {
        ring::OpDescriptor d{};
        d.kind = kind;
        d.dtype = static_cast<DataType>(t);
        d.reduce_op = static_cast<ReduceOp>(o);
        d.count = 64;
        all.push_back(d);
      }
    }
  }
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_LT(DescriptorCode(all[i]), 256u);
    for (size_t j = i + 1; j < all.size(); ++j) {
      EXPECT_NE(DescriptorCode(all[i]), DescriptorCode(all[j])) << i << " " << j;
      EXPECT_NE(DataTag(9, 3, false, DescriptorCode(all[i]), 1, 0, true),
                DataTag(9, 3, false, DescriptorCode(all[j]), 1, 0, true));
    }
  }
}

}  // namespace
}  // namespace collectived::cluster
