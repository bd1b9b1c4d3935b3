#include "kv/pipeline/status_note.h"

#include <gtest/gtest.h>

#include <vector>

#include "engine/batch_note.h"
#include "proto/codec.h"

namespace pdkv::kv {
namespace {

proto::TransferStatus success(uint64_t room) {
  proto::TransferStatus s;
  s.room = room;
  s.state = proto::TransferState::kSuccess;
  s.prefill_attn_tp_rank = 3;
  s.ticket = 0xabcdef0000 + room;
  s.bootstrap_token = 42;
  s.spec_candidate_ids = {1, 2, 3};
  return s;
}

std::span<const uint8_t> bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::vector<proto::TransferStatus> read(const std::string& note, Status* st) {
  std::vector<proto::TransferStatus> out;
  *st = for_each_status(bytes(note), [&](const proto::TransferStatus& s) { out.push_back(s); });
  return out;
}

TEST(StatusNote, StatusesComeBackInOrderAndTheNoteStaysWithinItsBound) {
  std::string note;
  std::vector<proto::TransferStatus> sent;
  for (uint64_t room = 1; append_status(&note, success(room)); ++room) {
    sent.push_back(success(room));
  }
  ASSERT_GT(sent.size(), 100u);  // a whole batch of small rooms fits
  EXPECT_LE(note.size(), engine::kMaxNoteBytes);
  Status st;
  std::vector<proto::TransferStatus> got = read(note, &st);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(got.size(), sent.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i] == sent[i]) << i;
}

TEST(StatusNote, EveryCutAndForeignRecordIsDataLossAfterTheGoodOnes) {
  std::string note;
  ASSERT_TRUE(append_status(&note, success(1)));
  const size_t one = note.size();
  ASSERT_TRUE(append_status(&note, success(2)));
  for (size_t n = one + 1; n < note.size(); ++n) {
    Status st;
    std::vector<proto::TransferStatus> got = read(note.substr(0, n), &st);
    EXPECT_EQ(st.code(), StatusCode::kDataLoss) << n;
    EXPECT_EQ(got.size(), 1u) << n;  // the whole first record still counted
  }
  // A record whose length runs past the end.
  std::string liar = note;
  liar[one] = '\xff';
  Status st;
  read(liar, &st);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  // Another message type, or a Failed status, has no business in a note.
  for (const proto::Message& m : {proto::Message(proto::Ping{}), proto::Message([] {
                                    proto::TransferStatus f = success(3);
                                    f.state = proto::TransferState::kFailed;
                                    return f;
                                  }())}) {
    std::string bad;
    const std::string flat = proto::encode_flat(m);
    const auto n = static_cast<uint32_t>(flat.size());
    for (int i = 0; i < 4; ++i) bad.push_back(static_cast<char>(n >> (8 * i)));
    bad += flat;
    std::vector<proto::TransferStatus> got = read(bad, &st);
    EXPECT_EQ(st.code(), StatusCode::kDataLoss);
    EXPECT_TRUE(got.empty());
  }
}

}  // namespace
}  // namespace pdkv::kv
