// RequestDeadlines on socket pairs: an overdue connection is shut down, a forgotten or
// restarted one is not.
#include "http/http_request_deadlines.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

namespace pdkv::http {
namespace {

using std::chrono::milliseconds;

struct SocketPair {
  SocketPair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0); }
  ~SocketPair() {
    ::close(fd[0]);
    ::close(fd[1]);
  }
  // True if the far end sees the near end (fd[0]) shut down within `timeout`.
  bool shut_within(milliseconds timeout) const {
    pollfd p{fd[1], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    char c;
    return ::recv(fd[1], &c, 1, MSG_DONTWAIT) == 0;
  }
  int fd[2] = {-1, -1};
};

TEST(RequestDeadlinesTest, AnOverdueConnectionIsShutDown) {
  RequestDeadlines deadlines(milliseconds(200));
  SocketPair overdue;
  TimePoint start = now();
  deadlines.opened(&overdue, overdue.fd[0]);
  EXPECT_TRUE(overdue.shut_within(milliseconds(3000)));
  EXPECT_GE(elapsed_ms(start), 150);
  EXPECT_EQ(deadlines.expired(), 1u);
  deadlines.closed(&overdue);
}

TEST(RequestDeadlinesTest, AClosedOrRestartedConnectionIsLeftAlone) {
  RequestDeadlines deadlines(milliseconds(1000));
  SocketPair closed, restarted;
  deadlines.opened(&closed, closed.fd[0]);
  deadlines.opened(&restarted, restarted.fd[0]);
  deadlines.closed(&closed);
  for (int i = 0; i < 5; ++i) {  // 5 x 300 ms: past the deadline, restarted each time
    std::this_thread::sleep_for(milliseconds(300));
    deadlines.restarted(&restarted);
  }
  EXPECT_FALSE(closed.shut_within(milliseconds(0)));
  EXPECT_FALSE(restarted.shut_within(milliseconds(0)));
  EXPECT_EQ(deadlines.expired(), 0u);
  EXPECT_TRUE(restarted.shut_within(milliseconds(3000)));  // no more restarts: it expires
  deadlines.closed(&restarted);
}

}  // namespace
}  // namespace pdkv::http
