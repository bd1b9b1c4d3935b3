// HttpRouter without sockets: dispatch, the 404/405 fallbacks, exceptions, the error hook.
#include "http/http_router.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace pdkv::http {
namespace {

HttpRequest request(HttpMethod method, std::string path) {
  HttpRequest r;
  r.method = method;
  r.method_name = std::string(http_method_name(method));
  r.path = std::move(path);
  return r;
}

HttpRouter sample_router(std::vector<int>* errors) {
  HttpRouter router("test");
  router.on(HttpMethod::kGet, "/a",
            [](const HttpRequest&, HttpResponse& res) { res.set_content("got a", "text/plain"); });
  router.on(HttpMethod::kPut, "/a", [](const HttpRequest& req, HttpResponse& res) {
    res.set_content(req.body, "application/octet-stream");
  });
  router.on(HttpMethod::kGet, "/boom",
            [](const HttpRequest&, HttpResponse&) { throw std::runtime_error("kaput"); });
  router.on_error(
      [errors](const HttpRequest&, HttpResponse& res) { errors->push_back(res.status); });
  return router;
}

// sample_router(), with the statuses its error hook saw in errors_.
class SampleRouterTest : public ::testing::Test {
 protected:
  std::vector<int> errors_;
  HttpRouter router_ = sample_router(&errors_);
};

TEST_F(SampleRouterTest, DispatchesByMethodAndPath) {
  HttpResponse get = router_.handle(request(HttpMethod::kGet, "/a"));
  EXPECT_EQ(get.status, 200);
  EXPECT_EQ(get.body, "got a");
  HttpRequest put = request(HttpMethod::kPut, "/a");
  put.body = "payload";
  EXPECT_EQ(router_.handle(put).body, "payload");
  // HEAD falls back to GET (the listener sends no body for HEAD).
  EXPECT_EQ(router_.handle(request(HttpMethod::kHead, "/a")).body, "got a");
  EXPECT_TRUE(errors_.empty());
}

TEST_F(SampleRouterTest, UnknownPathIs404AndUnknownMethodIs405WithAllow) {
  HttpResponse missing = router_.handle(request(HttpMethod::kGet, "/nowhere"));
  EXPECT_EQ(missing.status, 404);
  EXPECT_NE(missing.body.find("\"error\""), std::string::npos) << missing.body;
  HttpRequest odd = request(HttpMethod::kOther, "/a");
  odd.method_name = "PROPFIND";
  HttpResponse not_allowed = router_.handle(odd);
  EXPECT_EQ(not_allowed.status, 405);
  EXPECT_EQ(not_allowed.headers.get("allow"), "GET, PUT");
  EXPECT_NE(not_allowed.body.find("PROPFIND"), std::string::npos) << not_allowed.body;
  EXPECT_EQ(errors_, (std::vector<int>{404, 405}));
}

TEST_F(SampleRouterTest, AHandlerThatThrowsIs500) {
  HttpResponse res = router_.handle(request(HttpMethod::kGet, "/boom"));
  EXPECT_EQ(res.status, 500);
  EXPECT_NE(res.body.find("kaput"), std::string::npos) << res.body;
  EXPECT_EQ(errors_, (std::vector<int>{500}));
}

TEST(HttpRouterTest, RefusalsGoThroughTheErrorHookWhichMayRewriteThem) {
  HttpRouter router("test");
  router.on_error([](const HttpRequest&, HttpResponse& res) {
    if (res.status == 413) res.status = 400;
  });
  HttpResponse res = router.refuse(request(HttpMethod::kPut, "/a"), 413, "too big");
  EXPECT_EQ(res.status, 400);
  EXPECT_NE(res.body.find("too big"), std::string::npos);
}

TEST(HttpTypesTest, HeadersAreCaseInsensitiveAndKeepTheFirstValue) {
  HttpHeaders h;
  h.add("X-Pdkv-Auth", "one");
  h.add("x-pdkv-auth", "two");
  EXPECT_EQ(h.get("X-PDKV-AUTH"), "one");
  EXPECT_TRUE(h.has("x-pdkv-auth"));
  EXPECT_EQ(h.get("Missing"), "");
  EXPECT_EQ(parse_http_method("DELETE"), HttpMethod::kDelete);
  EXPECT_EQ(parse_http_method("delete"), HttpMethod::kOther);  // methods are case-sensitive
  EXPECT_EQ(http_method_name(HttpMethod::kPatch), "PATCH");
}

}  // namespace
}  // namespace pdkv::http
