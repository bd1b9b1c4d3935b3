#include "engine/memory_registry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

namespace pdkv::engine {
namespace {

TEST(MemoryRegistry, RejectsZeroLengthOverflowAndOverlap) {
  MemoryRegistry r;
  EXPECT_EQ(r.add(0x1000, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.add(UINT64_MAX - 10, 100).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(r.add(0x1000, 0x1000).ok());
  EXPECT_EQ(r.add(0x1800, 0x1000).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.add(0x0800, 0x1000).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.add(0x1000, 1).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(r.add(0x2000, 0x10).ok());  // adjacent, not overlapping
}

TEST(MemoryRegistry, CheckIsInclusiveOfEdgesAndOverflowSafe) {
  MemoryRegistry r;
  ASSERT_TRUE(r.add(0x1000, 0x1000).ok());
  EXPECT_TRUE(r.check(0x1000, 0x1000).ok());
  EXPECT_TRUE(r.check(0x1fff, 1).ok());
  uint64_t bad = 0;
  EXPECT_EQ(r.check(0x1fff, 2, &bad).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(bad, 0x2000u);
  EXPECT_EQ(r.check(0xfff, 2, &bad).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(bad, 0xfffu);
  EXPECT_EQ(r.check(0x1800, UINT64_MAX).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(r.check(UINT64_MAX, 1).code(), StatusCode::kOutOfRange);
}

TEST(MemoryRegistry, BackToBackRegionsFormOneSpanButGapsDoNot) {
  MemoryRegistry r;
  ASSERT_TRUE(r.add(0x1000, 0x1000).ok());
  ASSERT_TRUE(r.add(0x2000, 0x1000).ok());
  ASSERT_TRUE(r.add(0x3001, 0x1000).ok());
  EXPECT_TRUE(r.check(0x1800, 0x1000).ok());
  uint64_t bad = 0;
  EXPECT_FALSE(r.check(0x2800, 0x1000, &bad).ok());
  EXPECT_EQ(bad, 0x3000u);
}

TEST(MemoryRegistry, RemoveMakesLaterChecksFailAndWaitsForPins) {
  MemoryRegistry r;
  ASSERT_TRUE(r.add(0x1000, 0x1000).ok());
  EXPECT_EQ(r.remove(0x1234).code(), StatusCode::kNotFound);
  std::atomic<bool> removed{false};
  std::thread remover;
  {
    // An admitted write pins the registry until its Admission is released (here: leaves
    // scope), as a receiver holds one while the part's bytes land.
    MemoryRegistry::Admission admission;
    const MemoryRegistry::WriteRun run{0x1000, 0x10};
    uint64_t first_bad = 0;
    ASSERT_EQ(r.admit({&run, 1}, admission, &first_bad), 1u);
    remover = std::thread([&] {
      EXPECT_TRUE(r.remove(0x1000).ok());
      removed = true;
    });
    // The region disappears at once even though remove() is still waiting for the pin.
    while (r.check(0x1000, 1).ok()) std::this_thread::yield();
    EXPECT_FALSE(removed.load());
  }
  remover.join();
  EXPECT_TRUE(removed.load());
  EXPECT_TRUE(r.regions().empty());
}

TEST(MemoryRegistry, CheckAllNamesFirstBadIndex) {
  MemoryRegistry r;
  ASSERT_TRUE(r.add(0x1000, 0x100).ok());
  DstRange ranges[] = {{0x1000, 0x10}, {0x1010, 0x10}, {0x10f0, 0x11}, {0x5000, 1}};
  uint64_t bad = 0;
  EXPECT_EQ(r.check_all(ranges, &bad), 2u);
  EXPECT_EQ(bad, 0x1100u);
}

using WriteRun = MemoryRegistry::WriteRun;

TEST(MemoryRegistryGrants, WithGrantsRequiredOnlyGrantedBytesOfALiveGrantAreAdmitted) {
  MemoryRegistry r;
  ASSERT_TRUE(r.add(0x1000, 0x1000).ok());
  r.set_require_grants(true);
  MemoryRegistry::Admission admission;
  uint64_t bad = 0;
  // Registered, but no grant: refused.
  const WriteRun ungranted[] = {{0x1000, 0x10, 1, 0, 0}};
  EXPECT_EQ(r.admit(ungranted, admission, &bad), 0u);
  EXPECT_EQ(r.add_grant(0, WriteGrant::of_range(0x1000, 0x100)).code(),
            StatusCode::kInvalidArgument);
  // A grant may open registered memory only.
  EXPECT_EQ(r.add_grant(7, WriteGrant::of_range(0x1f00, 0x200)).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(r.add_grant(7, WriteGrant::of_range(0x1000, 0x100)).ok());
  EXPECT_EQ(r.add_grant(7, WriteGrant::of_range(0x1200, 0x100)).code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(r.add_grant(8, WriteGrant::of_range(0x1200, 0x100)).ok());
  // Runs of two grants in one part, one a strided run inside its grant.
  const WriteRun mixed[] = {{0x1000, 0x10, 4, 0x40, 7}, {0x1200, 0x100, 1, 0, 8}};
  EXPECT_EQ(r.admit(mixed, admission, &bad), 2u);
  admission.release();
  // Grant 7's run reaching into grant 8's bytes, an unknown grant, no grant.
  const WriteRun foreign[] = {{0x1000, 0x10, 1, 0, 7}, {0x10f0, 0x20, 1, 0, 7}};
  EXPECT_EQ(r.admit(foreign, admission, &bad), 1u);
  EXPECT_EQ(bad, 0x1100u);
  const WriteRun unknown[] = {{0x1000, 0x10, 1, 0, 9}};
  EXPECT_EQ(r.admit(unknown, admission, &bad), 0u);
  EXPECT_EQ(bad, 0x1000u);
  // A strided run whose last piece leaves the grant is refused as a whole.
  const WriteRun strided[] = {{0x1000, 0x20, 5, 0x40, 7}};
  EXPECT_EQ(r.admit(strided, admission, &bad), 0u);
  EXPECT_EQ(r.grant_count(), 2u);
}

TEST(MemoryRegistryGrants, WithoutRequirementUngrantedWritesPassButANamedGrantIsChecked) {
  MemoryRegistry r;
  ASSERT_TRUE(r.add(0x1000, 0x1000).ok());
  ASSERT_TRUE(r.add_grant(5, WriteGrant::of_range(0x1000, 0x100)).ok());
  MemoryRegistry::Admission admission;
  uint64_t bad = 0;
  const WriteRun plain[] = {{0x1800, 0x100, 1, 0, 0}};
  EXPECT_EQ(r.admit(plain, admission, &bad), 1u);
  admission.release();
  const WriteRun named[] = {{0x1800, 0x100, 1, 0, 5}};
  EXPECT_EQ(r.admit(named, admission, &bad), 0u);
  const WriteRun outside[] = {{0x2000, 0x10, 1, 0, 0}};
  EXPECT_EQ(r.admit(outside, admission, &bad), 0u);
}

TEST(MemoryRegistryGrants, RevokeRefusesLaterWritesAndReportsDrainAfterAdmittedOnesLand) {
  MemoryRegistry r;
  ASSERT_TRUE(r.add(0x1000, 0x1000).ok());
  r.set_require_grants(true);
  ASSERT_TRUE(r.add_grant(3, WriteGrant::of_range(0x1000, 0x100)).ok());
  const WriteRun run[] = {{0x1000, 0x100, 1, 0, 3}};
  uint64_t bad = 0;
  MemoryRegistry::Admission in_flight;
  ASSERT_EQ(r.admit(run, in_flight, &bad), 1u);
  std::atomic<int> drained{0};
  ASSERT_TRUE(r.revoke_grant(3, [&] { ++drained; }).ok());
  // Unlinked at once: a late write naming it is refused, the same pages can be granted
  // again under a new id, but the drain waits for the write admitted before.
  MemoryRegistry::Admission late;
  EXPECT_EQ(r.admit(run, late, &bad), 0u);
  EXPECT_EQ(r.revoke_grant(3, {}).code(), StatusCode::kNotFound);
  ASSERT_TRUE(r.add_grant(4, WriteGrant::of_range(0x1000, 0x100)).ok());
  EXPECT_EQ(drained.load(), 0);
  in_flight.release();
  EXPECT_EQ(drained.load(), 1);
  in_flight.release();  // releasing twice is harmless
  EXPECT_EQ(drained.load(), 1);
  // Nothing in flight: the drain runs before revoke returns.
  ASSERT_TRUE(r.revoke_grant(4, [&] { ++drained; }).ok());
  EXPECT_EQ(drained.load(), 2);
  EXPECT_EQ(r.grant_count(), 0u);
}

TEST(MemoryRegistryGrants, AWriteNamingACompletedGrantIsRefusedAsCompletedNotOutOfBounds) {
  MemoryRegistry r;
  ASSERT_TRUE(r.add(0x1000, 0x1000).ok());
  r.set_require_grants(true);
  ASSERT_TRUE(r.add_grant(5, WriteGrant::of_range(0x1000, 0x100)).ok());
  ASSERT_TRUE(r.add_grant(6, WriteGrant::of_range(0x1100, 0x100)).ok());
  ASSERT_TRUE(r.revoke_grant(5, {}, GrantEnd::kCompleted).ok());
  ASSERT_TRUE(r.revoke_grant(6, {}).ok());  // withdrawn (the default)
  uint64_t bad = 0;
  Refusal why = Refusal::kNotWritable;
  MemoryRegistry::Admission admission;
  // Refused either way: nothing lands in a completed room's pages.
  const WriteRun completed[] = {{0x1000, 0x100, 1, 0, 5}};
  EXPECT_EQ(r.admit(completed, admission, &bad, &why), 0u);
  EXPECT_EQ(why, Refusal::kGrantCompleted);
  EXPECT_EQ(bad, 0x1000u);
  const WriteRun withdrawn[] = {{0x1100, 0x100, 1, 0, 6}};
  EXPECT_EQ(r.admit(withdrawn, admission, &bad, &why), 0u);
  EXPECT_EQ(why, Refusal::kNotWritable);
  const WriteRun never_granted[] = {{0x1100, 0x100, 1, 0, 77}};
  EXPECT_EQ(r.admit(never_granted, admission, &bad, &why), 0u);
  EXPECT_EQ(why, Refusal::kNotWritable);
  // A refusal of the second run names the completed grant of that run.
  ASSERT_TRUE(r.add_grant(7, WriteGrant::of_range(0x1200, 0x100)).ok());
  const WriteRun mixed[] = {{0x1200, 0x100, 1, 0, 7}, {0x1000, 0x100, 1, 0, 5}};
  EXPECT_EQ(r.admit(mixed, admission, &bad, &why), 1u);
  EXPECT_EQ(why, Refusal::kGrantCompleted);
}

TEST(MemoryRegistryGrants, CompletedGrantsAreRememberedUpToABoundOldestForgottenFirst) {
  MemoryRegistry r;
  ASSERT_TRUE(r.add(0x1000, 0x1000).ok());
  r.set_require_grants(true);
  const uint64_t n = kRememberedCompletedGrants + 1;
  for (uint64_t id = 1; id <= n; ++id) {
    ASSERT_TRUE(r.add_grant(id, WriteGrant::of_range(0x1000, 0x10)).ok());
    ASSERT_TRUE(r.revoke_grant(id, {}, GrantEnd::kCompleted).ok());
  }
  uint64_t bad = 0;
  Refusal why = Refusal::kNotWritable;
  MemoryRegistry::Admission admission;
  const WriteRun oldest[] = {{0x1000, 0x10, 1, 0, 1}};
  EXPECT_EQ(r.admit(oldest, admission, &bad, &why), 0u);
  EXPECT_EQ(why, Refusal::kNotWritable);  // forgotten: a plain refusal
  const WriteRun second[] = {{0x1000, 0x10, 1, 0, 2}};
  EXPECT_EQ(r.admit(second, admission, &bad, &why), 0u);
  EXPECT_EQ(why, Refusal::kGrantCompleted);
  const WriteRun newest[] = {{0x1000, 0x10, 1, 0, n}};
  EXPECT_EQ(r.admit(newest, admission, &bad, &why), 0u);
  EXPECT_EQ(why, Refusal::kGrantCompleted);
}

TEST(MemoryRegistryGrants, UnregisterWaitsForAdmittedWrites) {
  MemoryRegistry r;
  ASSERT_TRUE(r.add(0x1000, 0x1000).ok());
  const WriteRun run[] = {{0x1000, 0x100, 1, 0, 0}};
  uint64_t bad = 0;
  auto admission = std::make_unique<MemoryRegistry::Admission>();
  ASSERT_EQ(r.admit(run, *admission, &bad), 1u);
  std::atomic<bool> removed{false};
  std::thread remover([&] {
    EXPECT_TRUE(r.remove(0x1000).ok());
    removed = true;
  });
  while (r.check(0x1000, 1).ok()) std::this_thread::yield();
  EXPECT_FALSE(removed.load());
  admission.reset();
  remover.join();
  EXPECT_TRUE(removed.load());
}

}  // namespace
}  // namespace pdkv::engine
