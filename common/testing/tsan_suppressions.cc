// The one TSan suppression list, linked into every test binary that uses real ZeroMQ,
// libsodium or cpp-httplib (${PDKV_TSAN_SUPPRESSIONS} in CMake; the TSan runtime calls
// this hook, so a binary links it once).
//
// Those libraries are Debian's uninstrumented builds: TSan cannot see their internal
// lock-free hand-offs (libzmq's ypipe, httplib's worker queue), so it reports their own
// memcpy/memcmp of buffers handed between their threads as races (with CURVE, libzmq's
// I/O thread decrypts a message in place with libsodium before the ypipe hands it on).
// The reports are inside the libraries, not in pdkv; pdkv's own shared state stays
// checked.
//
// Two pdkv test functions are listed: a KV test's byte check (RankBuffers::holds_request)
// reads memory a receiver thread wrote, and its refill (RankBuffers::fill_request) writes
// source memory a sender thread read, both after the room reported Success; in tests whose
// managers talk over real ZeroMQ that happens-before edge is the status message through
// libzmq (and the data over a TCP socket), which TSan cannot see.
extern "C" const char* __tsan_default_suppressions() {
  return "called_from_lib:libzmq.so.5\n"
         "called_from_lib:libsodium.so.23\n"
         "called_from_lib:libcpp-httplib.so.0.11\n"
         "race:pdkv::kv::testing::RankBuffers::holds_request\n"
         "race:pdkv::kv::testing::RankBuffers::fill_request\n";
}
