// Batch notes (batch_note.h) between two engines over loopback TCP: delivered after the
// batch's bytes landed and before its completion, never for a rejected part, bounded.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "engine/transfer_engine.h"

namespace pdkv::engine {
namespace {

using std::chrono::seconds;

uint64_t addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

std::unique_ptr<TransferEngine> tcp_engine(int streams) {
  EngineOptions o;
  o.tcp.streams = streams;
  auto e = TransferEngine::create(o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return std::move(e).value();
}

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// What the receiver's note handler saw, and the sender's completions, in arrival order.
struct Recorder {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> notes;
  std::vector<bool> landed_when_noted;  // every destination byte in place at delivery
  std::vector<std::string> events;      // "note:<text>" / "done:<text>"
  std::vector<Status> results;

  void note(std::span<const uint8_t> n, bool landed) {
    std::lock_guard<std::mutex> lock(mu);
    notes.emplace_back(n.begin(), n.end());
    landed_when_noted.push_back(landed);
    events.push_back("note:" + notes.back());
    cv.notify_all();
  }
  void done(const std::string& what, Status st) {
    std::lock_guard<std::mutex> lock(mu);
    results.push_back(std::move(st));
    events.push_back("done:" + what);
    cv.notify_all();
  }
  bool wait_results(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, seconds(30), [&] { return results.size() >= n; });
  }
};

// A batch large enough that the planner would spread it over every stream (2 x the
// 1 MiB split threshold, as 4 KiB blocks in reverse page order): with a note it must
// still arrive whole before the note is handed over.
TEST(BatchNote, ArrivesAfterEveryByteOfItsBatchLandedAndBeforeItsCompletion) {
  auto sender = tcp_engine(4);
  auto receiver = tcp_engine(4);
  ASSERT_TRUE(sender->carries_notes());
  constexpr size_t kBytes = 6 << 20, kPage = 4096, kPages = kBytes / kPage;
  std::vector<uint8_t> src(kBytes), dst(kBytes, 0);
  for (size_t i = 0; i < kBytes; ++i) src[i] = static_cast<uint8_t>(i * 31 + 7);
  ASSERT_TRUE(receiver->register_memory(addr(dst.data()), dst.size()).ok());
  Recorder rec;
  receiver->set_note_handler([&](std::span<const uint8_t> n) {
    rec.note(n, std::memcmp(src.data(), dst.data(), kBytes) == 0);
  });
  auto session = sender->open_session(receiver->endpoint());
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  std::vector<WriteBlock> blocks;
  for (size_t i = 0; i < kPages; ++i) {
    blocks.push_back({addr(src.data()) + (kPages - 1 - i) * kPage,
                      addr(dst.data()) + (kPages - 1 - i) * kPage, kPage});
  }
  const std::string note = "room 7 is complete";
  ASSERT_TRUE(sender
                  ->submit_async(
                      *session, blocks, [&](Status st) { rec.done("batch", std::move(st)); },
                      bytes_of(note))
                  .ok());
  ASSERT_TRUE(rec.wait_results(1));
  std::lock_guard<std::mutex> lock(rec.mu);
  ASSERT_TRUE(rec.results[0].ok()) << rec.results[0].to_string();
  ASSERT_EQ(rec.notes, std::vector<std::string>{note});
  EXPECT_TRUE(rec.landed_when_noted[0]) << "the note came before the batch's bytes";
  EXPECT_EQ(rec.events, (std::vector<std::string>{"note:" + note, "done:batch"}));
}

TEST(BatchNote, ManyNotedBatchesEachDeliverTheirOwnNoteOnce) {
  auto sender = tcp_engine(2);
  auto receiver = tcp_engine(2);
  constexpr int kBatches = 64;
  constexpr size_t kShare = 64 * 1024;
  std::vector<uint8_t> src(kBatches * kShare, 9), dst(kBatches * kShare, 0);
  ASSERT_TRUE(receiver->register_memory(addr(dst.data()), dst.size()).ok());
  Recorder rec;
  receiver->set_note_handler([&](std::span<const uint8_t> n) { rec.note(n, true); });
  auto session = sender->open_session(receiver->endpoint());
  ASSERT_TRUE(session.ok());
  for (int b = 0; b < kBatches; ++b) {
    WriteBlock block{addr(src.data()) + b * kShare, addr(dst.data()) + b * kShare, kShare};
    const std::string note = "batch " + std::to_string(b);
    ASSERT_TRUE(sender
                    ->submit_async(
                        *session, std::span(&block, 1),
                        [&, b](Status st) { rec.done(std::to_string(b), std::move(st)); },
                        bytes_of(note))
                    .ok());
  }
  ASSERT_TRUE(rec.wait_results(kBatches));
  std::lock_guard<std::mutex> lock(rec.mu);
  for (const Status& st : rec.results) EXPECT_TRUE(st.ok()) << st.to_string();
  std::vector<std::string> sorted = rec.notes, want;
  for (int b = 0; b < kBatches; ++b) want.push_back("batch " + std::to_string(b));
  std::sort(sorted.begin(), sorted.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(sorted, want);
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), src.size()), 0);
}

TEST(BatchNote, ARejectedBatchDeliversNoNote) {
  auto sender = tcp_engine(1);
  auto receiver = tcp_engine(1);
  std::vector<uint8_t> src(8192, 3), dst(8192, 0);
  ASSERT_TRUE(receiver->register_memory(addr(dst.data()), dst.size()).ok());
  Recorder rec;
  receiver->set_note_handler([&](std::span<const uint8_t> n) { rec.note(n, true); });
  auto session = sender->open_session(receiver->endpoint());
  ASSERT_TRUE(session.ok());
  // Its second block reaches past the registered memory: the whole part is refused.
  std::vector<WriteBlock> blocks = {{addr(src.data()), addr(dst.data()), 4096},
                                    {addr(src.data()), addr(dst.data()) + 8000, 4096}};
  ASSERT_TRUE(sender
                  ->submit_async(
                      *session, blocks, [&](Status st) { rec.done("bad", std::move(st)); },
                      bytes_of("must not arrive"))
                  .ok());
  // Then a good one on the same stream, so the bad one was certainly processed.
  WriteBlock good{addr(src.data()), addr(dst.data()), 4096};
  ASSERT_TRUE(sender
                  ->submit_async(
                      *session, std::span(&good, 1),
                      [&](Status st) { rec.done("good", std::move(st)); }, bytes_of("arrives"))
                  .ok());
  ASSERT_TRUE(rec.wait_results(2));
  std::lock_guard<std::mutex> lock(rec.mu);
  EXPECT_EQ(rec.results[0].code(), StatusCode::kOutOfRange) << rec.results[0].to_string();
  EXPECT_TRUE(rec.results[1].ok()) << rec.results[1].to_string();
  EXPECT_EQ(rec.notes, std::vector<std::string>{"arrives"});
}

TEST(BatchNote, BoundsAreCheckedBeforeAnythingIsSent) {
  auto sender = tcp_engine(1);
  auto receiver = tcp_engine(1);
  std::vector<uint8_t> src(4096, 1), dst(4096, 0);
  ASSERT_TRUE(receiver->register_memory(addr(dst.data()), dst.size()).ok());
  auto session = sender->open_session(receiver->endpoint());
  ASSERT_TRUE(session.ok());
  WriteBlock block{addr(src.data()), addr(dst.data()), 4096};
  const std::vector<uint8_t> too_big(kMaxNoteBytes + 1, 'x');
  int calls = 0;
  auto count = [&](Status) { ++calls; };
  EXPECT_EQ(sender->submit_async(*session, std::span(&block, 1), count, too_big).code(),
            StatusCode::kInvalidArgument);
  // Nothing to write: a note would have no part to ride on.
  EXPECT_EQ(sender->submit_async(*session, {}, count, bytes_of("x")).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(calls, 0);
  // The largest note goes through.
  Recorder rec;
  receiver->set_note_handler([&](std::span<const uint8_t> n) { rec.note(n, true); });
  const std::string biggest(kMaxNoteBytes, 'y');
  ASSERT_TRUE(sender
                  ->submit_async(
                      *session, std::span(&block, 1),
                      [&](Status st) { rec.done("big", std::move(st)); }, bytes_of(biggest))
                  .ok());
  ASSERT_TRUE(rec.wait_results(1));
  std::lock_guard<std::mutex> lock(rec.mu);
  EXPECT_TRUE(rec.results[0].ok());
  EXPECT_EQ(rec.notes, std::vector<std::string>{biggest});
}

TEST(BatchNote, ABackendThatCannotCarryNotesRefusesThem) {
  EngineOptions o;
  o.backend = "shm";
  auto engine = TransferEngine::create(o);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  EXPECT_FALSE((*engine)->carries_notes());
  std::vector<uint8_t> src(4096, 1);
  WriteBlock block{addr(src.data()), 0, 4096};
  // Refused before the session is even looked up: the caller learns it needs another way.
  EXPECT_EQ((*engine)
                ->submit_async(
                    SessionId{1, 1}, std::span(&block, 1), [](Status) {}, bytes_of("x"))
                .code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace pdkv::engine
