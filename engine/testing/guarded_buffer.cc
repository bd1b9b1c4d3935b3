#include "engine/testing/guarded_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace pdkv::engine::testing {
namespace {

size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

uint64_t pattern_word(uint64_t word_index, uint64_t seed) {
  uint64_t x = word_index * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull + 1;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return x;
}

uint8_t pattern_byte(size_t pos, uint64_t seed) {
  return static_cast<uint8_t>(pattern_word(pos / 8, seed) >> (8 * (pos % 8)));
}

}  // namespace

Result<std::unique_ptr<GuardedBuffer>> GuardedBuffer::create(size_t size) {
  int fd = memfd_create("pdkv-guarded", MFD_CLOEXEC);
  if (fd < 0) return internal_error(std::string("memfd_create: ") + std::strerror(errno));
  const size_t page = page_size();
  size = (size + page - 1) / page * page;
  if (size == 0) size = page;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    ::close(fd);
    return internal_error(std::string("ftruncate: ") + std::strerror(errno));
  }
  auto mapped = map_fd(fd, size);
  if (!mapped.ok()) {
    ::close(fd);
    return mapped.status();
  }
  (*mapped)->owns_fd_ = true;
  return mapped;
}

Result<std::unique_ptr<GuardedBuffer>> GuardedBuffer::map_fd(int fd, size_t size) {
  const size_t page = page_size();
  if (size == 0 || size % page != 0) return invalid_argument("size must be whole pages");
  const size_t total = size + 2 * page;
  void* res = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (res == MAP_FAILED) return internal_error(std::string("mmap: ") + std::strerror(errno));
  auto* base = static_cast<uint8_t*>(res);
  void* data = mmap(base + page, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  if (data == MAP_FAILED) {
    munmap(base, total);
    return internal_error(std::string("mmap memfd: ") + std::strerror(errno));
  }
  return std::unique_ptr<GuardedBuffer>(new GuardedBuffer(fd, false, base, total, size));
}

GuardedBuffer::GuardedBuffer(int fd, bool owns_fd, uint8_t* reservation, size_t reservation_bytes,
                             size_t size)
    : fd_(fd),
      owns_fd_(owns_fd),
      reservation_(reservation),
      reservation_bytes_(reservation_bytes),
      data_(reservation + page_size()),
      size_(size) {}

GuardedBuffer::~GuardedBuffer() {
  munmap(reservation_, reservation_bytes_);
  if (owns_fd_) ::close(fd_);
}

void fill_pattern(uint8_t* data, size_t size, uint64_t seed) {
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t w = pattern_word(i / 8, seed);
    std::memcpy(data + i, &w, 8);
  }
  for (; i < size; ++i) data[i] = pattern_byte(i, seed);
}

size_t first_pattern_mismatch(const uint8_t* data, size_t size, uint64_t seed, size_t offset) {
  for (size_t i = 0; i < size; ++i) {
    const size_t pos = offset + i;
    if (pos % 8 == 0 && i + 8 <= size) {
      uint64_t w = pattern_word(pos / 8, seed);
      if (std::memcmp(data + i, &w, 8) == 0) {
        i += 7;
        continue;
      }
    }
    if (data[i] != pattern_byte(pos, seed)) return i;
  }
  return size;
}

}  // namespace pdkv::engine::testing
