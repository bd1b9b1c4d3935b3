// TransferEngine API behaviour with two engines in one process (the multi-process tests
// in engine_multiprocess_test.cc cover real peers, kills and malformed input).
#include "engine/transfer_engine.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <vector>

#include "engine/backend.h"
#include "engine/testing/guarded_buffer.h"

namespace pdkv::engine {
namespace {

using std::chrono::seconds;

std::unique_ptr<TransferEngine> make_engine(uint64_t stage_max_bytes = 0,
                                            uint64_t recv_stage_max_bytes = 4096) {
  EngineOptions o;
  o.tcp.streams = 2;
  o.tcp.stage_max_bytes = stage_max_bytes;
  o.tcp.recv_stage_max_bytes = recv_stage_max_bytes;
  auto e = TransferEngine::create(o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return std::move(e).value();
}

uint64_t addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

TEST(TransferEngine, UnknownAndUnbuiltBackendsAreClearErrors) {
  EngineOptions o;
  o.backend = "carrier-pigeon";
  EXPECT_EQ(TransferEngine::create(o).status().code(), StatusCode::kInvalidArgument);
#ifndef PDKV_HAVE_UCX  // with UCX found, "ucx" is built (engine/backends/ucx)
  o.backend = "ucx";
  auto r = TransferEngine::create(o);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("ucx"), std::string::npos);
#endif
  o.backend = "tcp";
  o.tcp.streams = 0;
  EXPECT_EQ(TransferEngine::create(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(TransferEngine, RegisteringUnmappedMemoryIsAClearError) {
  auto engine = make_engine();
  // The first page is never mapped; a range past the top of user space neither.
  Status st = engine->register_memory(0x1000, 4096);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
  EXPECT_NE(st.message().find("not mapped"), std::string::npos) << st.to_string();
  EXPECT_EQ(engine->register_memory(~uint64_t{0} - 100, 4096).code(), StatusCode::kOutOfRange);
  std::vector<uint8_t> ok(8192);
  EXPECT_TRUE(engine->register_memory(addr(ok.data()), ok.size()).ok());
  // A PROT_NONE reservation (how CUDA holds device addresses) is mapped but unreadable.
  void* none = ::mmap(nullptr, 8192, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(none, MAP_FAILED);
  st = engine->register_memory(addr(none), 8192);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
  EXPECT_NE(st.message().find("host memory"), std::string::npos) << st.to_string();
  ::munmap(none, 8192);
}

TEST(TransferEngine, OptionsFromEnvironmentAreRangeChecked) {
  setenv("PDKV_TCP_STREAMS", "3", 1);
  auto o = EngineOptions::from_env();
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->tcp.streams, 3);
  setenv("PDKV_TCP_STREAMS", "0", 1);
  EXPECT_EQ(EngineOptions::from_env().status().code(), StatusCode::kInvalidArgument);
  unsetenv("PDKV_TCP_STREAMS");
  setenv("PDKV_ENGINE_BACKEND", "rdma", 1);
  EXPECT_EQ(EngineOptions::from_env().status().code(), StatusCode::kInvalidArgument);
  unsetenv("PDKV_ENGINE_BACKEND");
}

// Code-given settings beat the environment, also for the backend's own options, which
// the backend reads only when the engine creates it.
TEST(TransferEngine, ExplicitSettingsReachEngineAndBackendOptions) {
  setenv("PDKV_TCP_STREAMS", "3", 1);
  setenv("PDKV_SHM_COPY_THREADS", "2", 1);
  config::Settings settings;
  settings.set("PDKV_TCP_STREAMS", int64_t{5}).set("PDKV_ENGINE_BACKEND", "shm");
  settings.set("PDKV_SHM_COPY_THREADS", int64_t{99});  // out of range [1, 16]
  auto o = EngineOptions::from(settings);
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->tcp.streams, 5);
  EXPECT_EQ(o->backend, "shm");
  auto engine = TransferEngine::create(*o);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("PDKV_SHM_COPY_THREADS=99"), std::string::npos)
      << engine.status().to_string();
  EXPECT_FALSE(check_backend_settings(settings).ok());
  unsetenv("PDKV_TCP_STREAMS");
  unsetenv("PDKV_SHM_COPY_THREADS");
}

TEST(TransferEngine, WritesBetweenTwoEnginesAndReportsEndpoint) {
  auto sender = make_engine();
  auto receiver = make_engine();
  EXPECT_EQ(sender->backend_name(), "tcp");
  EXPECT_EQ(receiver->endpoint().rfind("127.0.0.1:", 0), 0u);
  std::vector<uint8_t> src(3 << 20), dst(3 << 20, 0);
  testing::fill_pattern(src.data(), src.size(), 1);
  ASSERT_TRUE(receiver->register_memory(addr(dst.data()), dst.size()).ok());
  auto session = sender->open_session(receiver->endpoint());
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  // Reverse page order: every block lands somewhere else than it came from.
  std::vector<WriteBlock> blocks;
  const size_t page = 4096, pages = src.size() / page;
  for (size_t i = 0; i < pages; ++i) {
    blocks.push_back(
        {addr(src.data()) + i * page, addr(dst.data()) + (pages - 1 - i) * page, page});
  }
  auto batch = sender->submit(*session, blocks);
  ASSERT_TRUE(batch.ok());
  auto st = sender->wait(*batch, seconds(120));
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->state, BatchState::kSucceeded) << st->error.to_string();
  for (size_t i = 0; i < pages; ++i) {
    ASSERT_EQ(std::memcmp(dst.data() + (pages - 1 - i) * page, src.data() + i * page, page), 0);
  }
  ASSERT_TRUE(sender->release(*batch).ok());
  // Stale batch and session ids are errors, not undefined behaviour.
  EXPECT_EQ(sender->poll(*batch).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(sender->wait(*batch, seconds(1)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(sender->release(*batch).code(), StatusCode::kNotFound);
  ASSERT_TRUE(sender->close_session(*session).ok());
  EXPECT_EQ(sender->submit(*session, blocks).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(sender->close_session(*session).code(), StatusCode::kNotFound);
  EXPECT_EQ(sender->submit(SessionId{77, 3}, blocks).status().code(), StatusCode::kNotFound);
}

TEST(TransferEngine, UnregisteredMemoryIsRejected) {
  auto sender = make_engine();
  auto receiver = make_engine();
  std::vector<uint8_t> src(8192, 5), dst(8192, 0);
  ASSERT_TRUE(receiver->register_memory(addr(dst.data()), dst.size()).ok());
  EXPECT_EQ(receiver->register_memory(addr(dst.data()) + 10, 10).code(),
            StatusCode::kFailedPrecondition);
  std::vector<WriteBlock> blocks = {{addr(src.data()), addr(dst.data()), 8192}};
  EXPECT_EQ(sender->transfer_sync(receiver->endpoint(), blocks), 0);
  ASSERT_TRUE(receiver->unregister_memory(addr(dst.data())).ok());
  EXPECT_EQ(receiver->unregister_memory(addr(dst.data())).code(), StatusCode::kNotFound);
  std::fill(dst.begin(), dst.end(), 0);
  EXPECT_LT(sender->transfer_sync(receiver->endpoint(), blocks), 0);
  EXPECT_EQ(dst[0], 0);
}

TEST(TransferEngine, TimedOutWaitIsPendingNotAnError) {
  auto sender = make_engine();
  auto receiver = make_engine();
  std::vector<uint8_t> src(64 << 20, 1), dst(64 << 20, 0);
  ASSERT_TRUE(receiver->register_memory(addr(dst.data()), dst.size()).ok());
  auto session = sender->open_session(receiver->endpoint());
  ASSERT_TRUE(session.ok());
  std::vector<WriteBlock> blocks = {{addr(src.data()), addr(dst.data()), src.size()}};
  auto batch = sender->submit(*session, blocks);
  ASSERT_TRUE(batch.ok());
  auto first = sender->wait(*batch, std::chrono::milliseconds(0));
  ASSERT_TRUE(first.ok());  // pending or already done: neither is an error
  auto st = sender->wait(*batch, seconds(120));
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state, BatchState::kSucceeded);
  EXPECT_EQ(dst.back(), 1);
}

TEST(TransferEngine, ReleasingAPendingBatchIsSafe) {
  auto sender = make_engine();
  auto receiver = make_engine();
  // Two destinations: the released batch may still be writing the first one while the
  // second batch runs (on other streams), and overlapping writes would be the caller's
  // race, not the engine's.
  std::vector<uint8_t> src(32 << 20, 2), dst_a(32 << 20, 0), dst_b(32 << 20, 0);
  ASSERT_TRUE(receiver->register_memory(addr(dst_a.data()), dst_a.size()).ok());
  ASSERT_TRUE(receiver->register_memory(addr(dst_b.data()), dst_b.size()).ok());
  auto session = sender->open_session(receiver->endpoint());
  ASSERT_TRUE(session.ok());
  std::vector<WriteBlock> to_a = {{addr(src.data()), addr(dst_a.data()), src.size()}};
  std::vector<WriteBlock> to_b = {{addr(src.data()), addr(dst_b.data()), src.size()}};
  auto batch = sender->submit(*session, to_a);
  ASSERT_TRUE(batch.ok());
  ASSERT_TRUE(sender->release(*batch).ok());
  EXPECT_EQ(sender->poll(*batch).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(sender->transfer_sync(*session, to_b), 0);
  EXPECT_EQ(dst_b.front(), 2);
  EXPECT_EQ(dst_b.back(), 2);
  // Both batches span both streams and each stream is FIFO, so the released batch was
  // applied before the second one was acknowledged: dst_a is no longer written.
  EXPECT_EQ(dst_a.back(), 2);
}

// submit_async: many batches in flight at once, each reported exactly once through its
// callback; small scattered blocks (staged through memcpy) land intact;
// a batch to a bad destination reports OutOfRange through the callback too.
TEST(TransferEngine, SubmitAsyncReportsEveryBatchOnceThroughItsCallback) {
  // Staging on for the 512-byte blocks on both sides, so the memcpy paths are covered.
  auto sender = make_engine(1024);
  auto receiver = make_engine(1024);
  constexpr size_t kBytes = 4 << 20;
  std::vector<uint8_t> src(kBytes), dst(kBytes, 0);
  for (size_t i = 0; i < kBytes; ++i) src[i] = static_cast<uint8_t>(i * 7 + 3);
  ASSERT_TRUE(receiver->register_memory(addr(dst.data()), dst.size()).ok());
  auto session = sender->open_session(receiver->endpoint());
  ASSERT_TRUE(session.ok());
  constexpr int kBatches = 32;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> calls(kBatches + 1, 0);
  std::vector<Status> results(kBatches + 1);
  int done = 0;
  auto record = [&](int batch, Status st) {
    std::lock_guard<std::mutex> lock(mu);
    ++calls[batch];
    results[batch] = std::move(st);
    ++done;
    cv.notify_all();
  };
  for (int b = 0; b < kBatches; ++b) {
    // Batch b: its share of the buffer, as 512-byte blocks written in reverse order.
    const size_t share = kBytes / kBatches, base = b * share;
    std::vector<WriteBlock> blocks;
    for (size_t off = share; off > 0; off -= 512) {
      blocks.push_back(WriteBlock{addr(src.data()) + base + off - 512,
                                  addr(dst.data()) + base + off - 512, 512});
    }
    ASSERT_TRUE(
        sender->submit_async(*session, blocks, [&, b](Status st) { record(b, std::move(st)); })
            .ok());
  }
  std::vector<WriteBlock> bad{{addr(src.data()), addr(dst.data()) + kBytes, 64}};
  ASSERT_TRUE(
      sender->submit_async(*session, bad, [&](Status st) { record(kBatches, std::move(st)); })
          .ok());
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, seconds(30), [&] { return done == kBatches + 1; }));
  for (int b = 0; b < kBatches; ++b) {
    EXPECT_EQ(calls[b], 1);
    EXPECT_TRUE(results[b].ok()) << results[b].to_string();
  }
  EXPECT_EQ(calls[kBatches], 1);
  EXPECT_EQ(results[kBatches].code(), StatusCode::kOutOfRange);
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), kBytes), 0);
  // Small (staged) and large (iovec) blocks mixed in one batch, sources out of order.
  std::vector<uint8_t> src2(1 << 20), dst2(1 << 20, 0);
  for (size_t i = 0; i < src2.size(); ++i) src2[i] = static_cast<uint8_t>(i * 13 + 5);
  ASSERT_TRUE(receiver->register_memory(addr(dst2.data()), dst2.size()).ok());
  std::vector<WriteBlock> mixed;
  for (size_t off = 0, k = 0; off < src2.size(); ++k) {
    const size_t len = std::min<size_t>(k % 3 == 2 ? 70'000 : 300, src2.size() - off);
    mixed.push_back(WriteBlock{addr(src2.data()) + off, addr(dst2.data()) + off, len});
    off += len;
  }
  std::reverse(mixed.begin(), mixed.end());
  lock.unlock();
  ASSERT_TRUE(sender->transfer(*session, mixed).ok());
  EXPECT_EQ(std::memcmp(src2.data(), dst2.data(), src2.size()), 0);
  // An empty list succeeds at once; a stale session is an error and no callback.
  bool empty_called = false;
  EXPECT_TRUE(sender->submit_async(*session, {}, [&](Status st) { empty_called = st.ok(); }).ok());
  EXPECT_TRUE(empty_called);
  ASSERT_TRUE(sender->close_session(*session).ok());
  bool stale_called = false;
  EXPECT_EQ(sender->submit_async(*session, bad, [&](Status) { stale_called = true; }).code(),
            StatusCode::kNotFound);
  EXPECT_FALSE(stale_called);
}

// Head-split pieces (every other slot of a token-major pool, as a TP 4 prefill rank writes a
// TP 2 decode rank's pages) land exactly whichever way the receiver takes them: through
// its staging chunks and streaming-store copies (pieces at most recv_stage_max_bytes,
// runs cut across the 256 KiB chunk boundary, a piece larger than a chunk, pieces of lengths not a
// multiple of 16 at unaligned addresses), or read straight in. The slots between the pieces are not
// touched.
TEST(TransferEngine, StridedSmallPiecesLandExactlyStagedOrRead) {
  for (uint64_t recv_stage : {uint64_t{0}, uint64_t{4096}, uint64_t{1} << 20}) {
    auto sender = make_engine(0, recv_stage);
    auto receiver = make_engine(0, recv_stage);
    auto session = sender->open_session(receiver->endpoint());
    ASSERT_TRUE(session.ok());
    for (size_t piece : {size_t{512}, size_t{300}, size_t{2112}, size_t{20000}, size_t{300000}}) {
      SCOPED_TRACE(::testing::Message() << "recv_stage " << recv_stage << ", piece " << piece);
      const size_t tokens = (3 << 20) / piece;  // several chunks, runs cut inside
      const size_t slot = 2 * piece + 3;        // odd stride: unaligned destinations
      std::vector<uint8_t> src(tokens * piece), dst(tokens * slot + 64, 0xEE);
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 11 + piece);
      ASSERT_TRUE(receiver->register_memory(addr(dst.data()), dst.size()).ok());
      std::vector<WriteBlock> blocks;
      for (size_t t = 0; t < tokens; ++t) {  // the second half-slot of every token
        blocks.push_back(WriteBlock{addr(src.data()) + t * piece,
                                    addr(dst.data()) + 1 + t * slot + piece, piece});
      }
      ASSERT_TRUE(sender->transfer(*session, blocks).ok());
      size_t wrong = 0;
      for (size_t t = 0; t < tokens; ++t) {
        const uint8_t* got = dst.data() + 1 + t * slot + piece;
        if (std::memcmp(got, src.data() + t * piece, piece) != 0) ++wrong;
        // Before the piece (the slot's first half and the byte of the odd stride) and
        // after the last one: untouched.
        for (const uint8_t* g = got - piece - (t == 0 ? 1 : 3); g < got; ++g) wrong += *g != 0xEE;
      }
      for (size_t i = 1 + tokens * slot - 3; i < dst.size(); ++i) wrong += dst[i] != 0xEE;
      EXPECT_EQ(wrong, 0u);
      ASSERT_TRUE(receiver->unregister_memory(addr(dst.data())).ok());
    }
  }
}

}  // namespace
}  // namespace pdkv::engine
