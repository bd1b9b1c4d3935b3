#include "common/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace pdkv {
namespace {

TEST(StatusTest, DefaultIsOkAndCarriesNoMessage) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.to_string(), "OK");
}

TEST(StatusTest, ErrorKeepsCodeAndMessage) {
  Status s = out_of_range("write [0x10, 0x20) outside region");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s.to_string(), "OutOfRange: write [0x10, 0x20) outside region");
}

TEST(StatusTest, CopyIsDeepAndEqual) {
  Status a = unavailable("peer down");
  Status b = a;
  EXPECT_EQ(a, b);
  a = Status();
  EXPECT_TRUE(a.ok());
  EXPECT_EQ(b.message(), "peer down");
}

TEST(StatusTest, OkCodeWithMessageIsStillOk) {
  Status s(StatusCode::kOk, "ignored");
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.message(), "");
}

TEST(StatusTest, WithContextPrefixesMessageAndKeepsOk) {
  EXPECT_EQ(data_loss("short frame").with_context("room 7").message(), "room 7: short frame");
  EXPECT_TRUE(Status().with_context("x").ok());
}

TEST(ResultTest, HoldsValueOrError) {
  Result<int> good = 5;
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 5);
  Result<int> bad = not_found("room 9");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(bad.value_or(-1), -1);
}

TEST(ResultTest, FromOkStatusBecomesInternalError) {
  Result<int> r = Status();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(ResultTest, MoveOnlyValue) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(3);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 3);
}

Result<int> parse_positive(int v) {
  if (v <= 0) return invalid_argument("not positive");
  return v;
}

Status use_macros(int v, int* out) {
  PDKV_ASSIGN_OR_RETURN(int x, parse_positive(v));
  PDKV_RETURN_IF_ERROR(x > 100 ? out_of_range("too big") : Status());
  *out = x;
  return Status();
}

TEST(ResultTest, MacrosPropagateErrors) {
  int out = 0;
  EXPECT_TRUE(use_macros(7, &out).ok());
  EXPECT_EQ(out, 7);
  EXPECT_EQ(use_macros(-1, &out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(use_macros(101, &out).code(), StatusCode::kOutOfRange);
}

TEST(ResultDeathTest, ValueOnErrorAborts) {
  Result<int> bad = internal_error("boom");
  EXPECT_DEATH({ (void)bad.value(); }, "error Result: Internal: boom");
}

}  // namespace
}  // namespace pdkv
