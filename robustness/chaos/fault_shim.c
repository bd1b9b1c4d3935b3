/* LD_PRELOAD fault shim for the chaos suite: makes every N-th socket call fail,
 * short-write or stall. Only calls on sockets are touched (fstat S_ISSOCK).
 *   PDKV_FAULT_EVERY_N   inject on every N-th matching call (0 or unset = off)
 *   PDKV_FAULT_MODE      fail | short | stall (default fail). fail on send/recv really
 *                        breaks the connection (shutdown(SHUT_RDWR), then the error),
 *                        as a reset does: an error the kernel socket does not share
 *                        would be a fault no real network makes (ZeroMQ, for one,
 *                        stops writing after a send error and waits for the read side
 *                        to see the connection die, so a faked error black-holes it)
 *   PDKV_FAULT_ERRNO     EIO | ECONNRESET (default ECONNRESET) for mode fail
 *   PDKV_FAULT_STALL_MS  sleep before the call in mode stall (default 200)
 *   PDKV_FAULT_CALLS     comma list of send,sendmsg,recv,recvmsg,connect,write,read
 *                        (default all)
 *   PDKV_FAULT_SKIP      let this many matching calls through first (default 0)
 *   PDKV_FAULT_MAX       stop after injecting this many faults (0 = never stop): a
 *                        transient burst, after which the process must heal
 *   PDKV_FAULT_PREFIX    hex bytes (up to 32): only sends (send, write, sendmsg's first
 *                        iovec) whose data starts with them match, and no receive does;
 *                        e.g. the header of one kind of frame, to break a connection at
 *                        one exact point of a protocol
 * Build: cc -shared -fPIC -O2 -o libpdkv_fault_shim.so fault_shim.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { C_SEND, C_SENDMSG, C_RECV, C_RECVMSG, C_CONNECT, C_WRITE, C_READ, C_N };
static const char *kNames[C_N] = {"send", "sendmsg", "recv", "recvmsg", "connect", "write", "read"};
static int g_init, g_every, g_mode, g_errno = ECONNRESET, g_stall_ms = 200, g_enabled[C_N];
static long g_skip, g_max;
static unsigned char g_prefix[32];
static size_t g_prefix_len;
static atomic_long g_count, g_injected;

static void init(void) {
  if (g_init) return;
  const char *e = getenv("PDKV_FAULT_EVERY_N");
  g_every = e ? atoi(e) : 0;
  const char *m = getenv("PDKV_FAULT_MODE");
  g_mode = !m || !strcmp(m, "fail") ? 0 : !strcmp(m, "short") ? 1 : 2;
  const char *er = getenv("PDKV_FAULT_ERRNO");
  if (er && !strcmp(er, "EIO")) g_errno = EIO;
  const char *s = getenv("PDKV_FAULT_STALL_MS");
  if (s) g_stall_ms = atoi(s);
  const char *k = getenv("PDKV_FAULT_SKIP");
  g_skip = k ? atol(k) : 0;
  const char *mx = getenv("PDKV_FAULT_MAX");
  g_max = mx ? atol(mx) : 0;
  const char *px = getenv("PDKV_FAULT_PREFIX");
  for (g_prefix_len = 0; px && px[0] && px[1] && g_prefix_len < sizeof g_prefix; px += 2) {
    char byte[3] = {px[0], px[1], 0};
    g_prefix[g_prefix_len++] = (unsigned char)strtoul(byte, NULL, 16);
  }
  const char *c = getenv("PDKV_FAULT_CALLS");
  for (int i = 0; i < C_N; ++i) {
    if (!c || !*c) { g_enabled[i] = 1; continue; }
    const char *p = c;
    size_t n = strlen(kNames[i]);
    while ((p = strstr(p, kNames[i])) != NULL) {
      if ((p == c || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) { g_enabled[i] = 1; break; }
      p += n;
    }
  }
  g_init = 1;
}

static int is_sock(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

/* Whether a call's data passes PDKV_FAULT_PREFIX (data NULL: a receive, no data yet). */
static int has_prefix(const void *data, size_t n) {
  if (g_prefix_len == 0) return 1;
  return data != NULL && n >= g_prefix_len && memcmp(data, g_prefix, g_prefix_len) == 0;
}

/* 0 = pass, 1 = fail, 2 = short, 3 = stalled (then pass). `data`, `len`: what a send sends. */
static int decide(int call, int fd, const void *data, size_t len) {
  init();
  if (g_every <= 0 || !g_enabled[call] || !has_prefix(data, len) || !is_sock(fd)) return 0;
  long n = atomic_fetch_add(&g_count, 1) + 1;
  if (n <= g_skip || (n - g_skip) % g_every != 0) return 0;
  if (atomic_fetch_add(&g_injected, 1) >= g_max && g_max > 0) {
    atomic_fetch_sub(&g_injected, 1);
    return 0;
  }
  if (g_mode == 2) {
    struct timespec ts = {g_stall_ms / 1000, (long)(g_stall_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    return 3;
  }
  return g_mode == 0 ? 1 : 2;
}

/* Injected failure of a data call: the connection dies for both sides, as on a reset. */
static int broken(int fd) {
  shutdown(fd, SHUT_RDWR);
  errno = g_errno;
  return -1;
}

#define REAL(name, ret, ...)                                   \
  static ret (*real_##name)(__VA_ARGS__);                      \
  if (!real_##name) real_##name = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name)

ssize_t send(int fd, const void *b, size_t n, int fl) {
  REAL(send, ssize_t, int, const void *, size_t, int);
  int d = decide(C_SEND, fd, b, n);
  if (d == 1) return broken(fd);
  if (d == 2 && n > 1) n = n / 2;
  return real_send(fd, b, n, fl);
}

ssize_t write(int fd, const void *b, size_t n) {
  REAL(write, ssize_t, int, const void *, size_t);
  int d = decide(C_WRITE, fd, b, n);
  if (d == 1) return broken(fd);
  if (d == 2 && n > 1) n = n / 2;
  return real_write(fd, b, n);
}

ssize_t sendmsg(int fd, const struct msghdr *m, int fl) {
  REAL(sendmsg, ssize_t, int, const struct msghdr *, int);
  int d = decide(C_SENDMSG, fd, m->msg_iovlen > 0 ? m->msg_iov[0].iov_base : NULL,
                 m->msg_iovlen > 0 ? m->msg_iov[0].iov_len : 0);
  if (d == 1) return broken(fd);
  if (d == 2 && m->msg_iovlen > 0) {
    /* short: send only the first half of the first iovec */
    struct msghdr c = *m;
    struct iovec v = m->msg_iov[0];
    if (v.iov_len > 1) v.iov_len /= 2;
    c.msg_iov = &v;
    c.msg_iovlen = 1;
    return real_sendmsg(fd, &c, fl);
  }
  return real_sendmsg(fd, m, fl);
}

ssize_t recv(int fd, void *b, size_t n, int fl) {
  REAL(recv, ssize_t, int, void *, size_t, int);
  int d = decide(C_RECV, fd, NULL, 0);
  if (d == 1) return broken(fd);
  if (d == 2 && n > 1) n = n / 2;
  return real_recv(fd, b, n, fl);
}

ssize_t read(int fd, void *b, size_t n) {
  REAL(read, ssize_t, int, void *, size_t);
  int d = decide(C_READ, fd, NULL, 0);
  if (d == 1) return broken(fd);
  if (d == 2 && n > 1) n = n / 2;
  return real_read(fd, b, n);
}

ssize_t recvmsg(int fd, struct msghdr *m, int fl) {
  REAL(recvmsg, ssize_t, int, struct msghdr *, int);
  int d = decide(C_RECVMSG, fd, NULL, 0);
  if (d == 1) return broken(fd);
  if (d == 2 && m->msg_iovlen > 0 && m->msg_iov[0].iov_len > 1) {
    size_t keep = m->msg_iov[0].iov_len;
    size_t cnt = m->msg_iovlen;
    m->msg_iov[0].iov_len = keep / 2;
    m->msg_iovlen = 1;
    ssize_t r = real_recvmsg(fd, m, fl);
    m->msg_iov[0].iov_len = keep;
    m->msg_iovlen = cnt;
    return r;
  }
  return real_recvmsg(fd, m, fl);
}

int connect(int fd, const struct sockaddr *a, socklen_t l) {
  REAL(connect, int, int, const struct sockaddr *, socklen_t);
  int d = decide(C_CONNECT, fd, NULL, 0);
  if (d == 1) { errno = ECONNREFUSED; return -1; }
  return real_connect(fd, a, l);
}

/* One line on stderr at exit, so the driver knows faults were really injected. */
__attribute__((destructor)) static void report(void) {
  if (!g_init || g_every <= 0) return;
  char buf[128];
  int n = snprintf(buf, sizeof buf, "pdkv_fault_shim: injected %ld of %ld matching calls\n",
                   atomic_load(&g_injected), atomic_load(&g_count));
  static ssize_t (*w)(int, const void *, size_t);
  if (!w) w = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
  if (n > 0 && w) w(2, buf, (size_t)n);
}
