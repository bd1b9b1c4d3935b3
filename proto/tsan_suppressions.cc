// Linked into this layer's test binaries. libzmq, libsodium and cpp-httplib are Debian's
// uninstrumented builds: TSan cannot see their internal lock-free hand-offs (libzmq's
// ypipe, httplib's worker queue), so it reports their own memcpy/memcmp of buffers they
// handed between their threads as races (with CURVE, libzmq's I/O thread decrypts a
// message in place with libsodium before the ypipe hands it to the receive thread). Those reports are inside the libraries, not in
// pdkv; pdkv's own shared state stays fully checked. The TSan runtime calls this hook.
extern "C" const char* __tsan_default_suppressions() {
  return "called_from_lib:libzmq.so.5\n"
         "called_from_lib:libsodium.so.23\n"
         "called_from_lib:libcpp-httplib.so.0.11\n";
}
