// Status and Result<T>: errors as values on every pdkv library path.
//
// A Status is either OK (a null pointer, so cheap to create, copy and test) or a code
// plus a message. Result<T> holds either a T or a non-OK Status. Both are
// [[nodiscard]]: ignoring an error is a compile warning, not a silent bug.
//
// Codes (pick the most specific one):
//   kInvalidArgument    the caller passed something wrong; retrying the same call fails.
//   kNotFound           a named thing (room, region, peer, route) does not exist.
//   kOutOfRange         an address, index or length lies outside its valid range,
//                       e.g. a write outside a registered memory region.
//   kFailedPrecondition the system is not in a state that allows the call; do not retry
//                       until that state changes.
//   kUnavailable        a peer is down or unreachable; the caller may retry later.
//   kDeadlineExceeded   a timeout elapsed before the operation completed.
//   kDataLoss           a malformed or truncated frame / message arrived.
//   kAborted            the operation was cancelled (abort, shutdown).
//   kInternal           a pdkv bug or an unexpected failure of a dependency.
//   kUnauthenticated    a peer did not prove it holds the cluster secret (or this side
//                       has none while the peer requires it); retrying will not help.
//   kAlreadyCompleted   what the call would do is already done: a write naming a write
//                       grant whose room already succeeded (its bytes are in place, the
//                       grant is closed); a retry that finds this has nothing left to do.
//
// Thread safety: const methods may be called concurrently; a Status or Result that is
// being modified needs outside synchronisation, like any value type.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace pdkv {

enum class StatusCode : unsigned char {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kOutOfRange,
  kFailedPrecondition,
  kUnavailable,
  kDeadlineExceeded,
  kDataLoss,
  kAborted,
  kInternal,
  kUnauthenticated,
  kAlreadyCompleted,  // last: wire formats carry codes as numbers up to this one
};

// "InvalidArgument", "OutOfRange", ...: the names used in messages and in Python.
std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);
  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;
  ~Status() = default;

  static Status ok_status() { return Status(); }

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  // Empty for OK.
  const std::string& message() const;
  // "OK" or "<CodeName>: <message>".
  std::string to_string() const;

  // Returns a copy whose message is "<prefix>: <message>"; OK stays OK.
  Status with_context(std::string_view prefix) const;

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  std::unique_ptr<State> state_;
};

inline bool operator==(const Status& a, const Status& b) {
  return a.code() == b.code() && a.message() == b.message();
}

// Shorthands, one per code, so call sites read as the condition they report.
Status invalid_argument(std::string message);
Status not_found(std::string message);
Status out_of_range(std::string message);
Status failed_precondition(std::string message);
Status unavailable(std::string message);
Status deadline_exceeded(std::string message);
Status data_loss(std::string message);
Status aborted(std::string message);
Status internal_error(std::string message);
Status unauthenticated(std::string message);
Status already_completed(std::string message);

// Result<T>: a T or an error Status. Constructing from an OK Status is a bug and is
// turned into kInternal so it cannot masquerade as a value.
// Misuse: value() on an error Result aborts the process (it is a programming error;
// check ok() first or use PDKV_ASSIGN_OR_RETURN).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : data_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(data_).ok()) {
      data_ = internal_error("Result constructed from an OK Status");
    }
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(data_);
  }

  T& value() & { return checked(); }
  const T& value() const& { return const_cast<Result*>(this)->checked(); }
  T&& value() && { return std::move(checked()); }
  T* operator->() { return &checked(); }
  const T* operator->() const { return &const_cast<Result*>(this)->checked(); }
  T& operator*() & { return checked(); }
  const T& operator*() const& { return const_cast<Result*>(this)->checked(); }

  T value_or(T fallback) const& { return ok() ? std::get<T>(data_) : std::move(fallback); }

 private:
  T& checked();
  std::variant<T, Status> data_;
};

[[noreturn]] void die_on_bad_result_access(const Status& status);

template <typename T>
T& Result<T>::checked() {
  if (!ok()) die_on_bad_result_access(std::get<Status>(data_));
  return std::get<T>(data_);
}

}  // namespace pdkv

#define PDKV_STATUS_CONCAT_INNER(a, b) a##b
#define PDKV_STATUS_CONCAT(a, b) PDKV_STATUS_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the enclosing function if it is not OK.
#define PDKV_RETURN_IF_ERROR(expr)                       \
  do {                                                   \
    ::pdkv::Status pdkv_status_tmp_ = (expr);            \
    if (!pdkv_status_tmp_.ok()) return pdkv_status_tmp_; \
  } while (0)

// `PDKV_ASSIGN_OR_RETURN(auto x, make_x());` declares x from a Result or returns its error.
#define PDKV_ASSIGN_OR_RETURN(lhs, expr)                        \
  auto PDKV_STATUS_CONCAT(pdkv_result_, __LINE__) = (expr);     \
  if (!PDKV_STATUS_CONCAT(pdkv_result_, __LINE__).ok())         \
    return PDKV_STATUS_CONCAT(pdkv_result_, __LINE__).status(); \
  lhs = std::move(PDKV_STATUS_CONCAT(pdkv_result_, __LINE__)).value()
