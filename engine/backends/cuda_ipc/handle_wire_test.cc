// The handle socket's decoders refuse what a hostile caller or receiver could send.
#include "engine/backends/cuda_ipc/handle_wire.h"

#include <gtest/gtest.h>

namespace pdkv::engine::cuda_ipc {
namespace {

TEST(HandleWire, HeaderRoundTripsAndRefusesMalformedRecords) {
  std::vector<uint8_t> out;
  encode_header(TableHeader{true, 42, 3, ""}, &out);
  auto h = decode_header(out);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_TRUE(h->ok);
  EXPECT_EQ(h->epoch, 42u);
  EXPECT_EQ(h->count, 3u);
  auto trailing = out;
  trailing.push_back(0);
  EXPECT_EQ(decode_header(trailing).status().code(), StatusCode::kDataLoss);
  auto short_record = out;
  short_record.pop_back();
  EXPECT_EQ(decode_header(short_record).status().code(), StatusCode::kDataLoss);
  auto bad_magic = out;
  bad_magic[0] ^= 1;
  EXPECT_EQ(decode_header(bad_magic).status().code(), StatusCode::kDataLoss);
  out.clear();
  encode_header(TableHeader{true, 1, kMaxExportedPieces + 1, ""}, &out);
  EXPECT_EQ(decode_header(out).status().code(), StatusCode::kDataLoss);
}

TEST(HandleWire, EntryRoundTripsAndRefusesBadKindsAndRanges) {
  HandleEntry e;
  e.kind = IpcHandleKind::kPosixFd;
  e.id = 7;
  e.base = 0x7f0000000000;
  e.size = 2u << 20;
  e.device[0] = 9;
  e.legacy[63] = 5;
  std::vector<uint8_t> out;
  encode_entry(e, &out);
  auto d = decode_entry(out);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->kind, IpcHandleKind::kPosixFd);
  EXPECT_EQ(d->id, 7u);
  EXPECT_EQ(d->base, e.base);
  EXPECT_EQ(d->size, e.size);
  EXPECT_EQ(d->device, e.device);
  EXPECT_EQ(d->legacy, e.legacy);
  auto bad_kind = out;
  bad_kind[0] = 3;
  EXPECT_EQ(decode_entry(bad_kind).status().code(), StatusCode::kDataLoss);
  auto longer = out;
  longer.push_back(0);
  EXPECT_EQ(decode_entry(longer).status().code(), StatusCode::kDataLoss);
  HandleEntry overflow = e;
  overflow.base = ~uint64_t{0} - 10;
  out.clear();
  encode_entry(overflow, &out);
  EXPECT_EQ(decode_entry(out).status().code(), StatusCode::kDataLoss);
  HandleEntry empty = e;
  empty.size = 0;
  out.clear();
  encode_entry(empty, &out);
  EXPECT_EQ(decode_entry(out).status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace pdkv::engine::cuda_ipc
