#include "engine/testing/child_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>

namespace pdkv::engine::testing {
namespace {

TEST(ChildProcessTest, TalksInLines) {
  auto child = ChildProcess::spawn({"/bin/cat"}, child_environment({}));
  ASSERT_TRUE(child.ok()) << child.status().to_string();
  Result<std::string> echo = (*child)->ask("PING 1", 10000);
  ASSERT_TRUE(echo.ok()) << echo.status().to_string();
  EXPECT_EQ(*echo, "PING 1");
  (*child)->stop("", 5000);  // EOF ends cat
  EXPECT_TRUE((*child)->reaped());
  EXPECT_EQ((*child)->write_line("late").code(), StatusCode::kUnavailable);
}

TEST(ChildProcessTest, OverridesReplaceTheParentsValue) {
  ASSERT_EQ(setenv("PDKV_CHILD_TEST_VAR", "parent", 1), 0);
  ASSERT_EQ(setenv("PDKV_CHILD_TEST_GONE", "parent", 1), 0);
  std::vector<std::string> env =
      child_environment({"PDKV_CHILD_TEST_VAR=child"}, {"PDKV_CHILD_TEST_GONE"});
  EXPECT_EQ(std::count(env.begin(), env.end(), "PDKV_CHILD_TEST_VAR=child"), 1);
  EXPECT_EQ(std::count(env.begin(), env.end(), "PDKV_CHILD_TEST_VAR=parent"), 0);
  EXPECT_EQ(std::count(env.begin(), env.end(), "PDKV_CHILD_TEST_GONE=parent"), 0);
  auto child = ChildProcess::spawn(
      {"/bin/sh", "-c", "echo \"$PDKV_CHILD_TEST_VAR-${PDKV_CHILD_TEST_GONE:-unset}\""}, env);
  ASSERT_TRUE(child.ok()) << child.status().to_string();
  Result<std::string> line = (*child)->read_line(10000);
  ASSERT_TRUE(line.ok()) << line.status().to_string();
  EXPECT_EQ(*line, "child-unset");
  unsetenv("PDKV_CHILD_TEST_VAR");
  unsetenv("PDKV_CHILD_TEST_GONE");
}

TEST(ChildProcessTest, ReadTimesOutAndStopKillsASilentChild) {
  auto child = ChildProcess::spawn({"/bin/sleep", "60"}, child_environment({}));
  ASSERT_TRUE(child.ok()) << child.status().to_string();
  EXPECT_EQ((*child)->read_line(50).status().code(), StatusCode::kDeadlineExceeded);
  (*child)->stop("QUIT", 100);  // sleep ignores stdin: SIGKILLed after the grace
  EXPECT_TRUE((*child)->reaped());
}

TEST(ChildProcessTest, ExitStatusAndClosedStdout) {
  auto child = ChildProcess::spawn({"/bin/sh", "-c", "exit 3"}, child_environment({}));
  ASSERT_TRUE(child.ok()) << child.status().to_string();
  EXPECT_EQ((*child)->read_line(10000).status().code(), StatusCode::kUnavailable);
  Result<int> status = (*child)->wait_exit(10000);
  ASSERT_TRUE(status.ok()) << status.status().to_string();
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 3);
}

}  // namespace
}  // namespace pdkv::engine::testing
