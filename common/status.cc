#include "common/status.h"

#include <cstdio>
#include <cstdlib>

namespace pdkv {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kOutOfRange: return "OutOfRange";
    case StatusCode::kFailedPrecondition: return "FailedPrecondition";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kDeadlineExceeded: return "DeadlineExceeded";
    case StatusCode::kDataLoss: return "DataLoss";
    case StatusCode::kAborted: return "Aborted";
    case StatusCode::kInternal: return "Internal";
    case StatusCode::kUnauthenticated: return "Unauthenticated";
    case StatusCode::kAlreadyCompleted: return "AlreadyCompleted";
  }
  return "Unknown";
}

Status::Status(StatusCode code, std::string message) {
  // An "OK with a message" would be ambiguous; OK is always the null state.
  if (code != StatusCode::kOk) state_ = std::make_unique<State>(State{code, std::move(message)});
}

Status::Status(const Status& other)
    : state_(other.state_ ? std::make_unique<State>(*other.state_) : nullptr) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) state_ = other.state_ ? std::make_unique<State>(*other.state_) : nullptr;
  return *this;
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  std::string out(status_code_name(state_->code));
  out += ": ";
  out += state_->message;
  return out;
}

Status Status::with_context(std::string_view prefix) const {
  if (ok()) return Status();
  std::string message(prefix);
  message += ": ";
  message += state_->message;
  return Status(state_->code, std::move(message));
}

Status invalid_argument(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
Status not_found(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
Status out_of_range(std::string m) { return Status(StatusCode::kOutOfRange, std::move(m)); }
Status failed_precondition(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
Status unavailable(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }
Status deadline_exceeded(std::string m) {
  return Status(StatusCode::kDeadlineExceeded, std::move(m));
}
Status data_loss(std::string m) { return Status(StatusCode::kDataLoss, std::move(m)); }
Status aborted(std::string m) { return Status(StatusCode::kAborted, std::move(m)); }
Status internal_error(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
Status unauthenticated(std::string m) { return Status(StatusCode::kUnauthenticated, std::move(m)); }
Status already_completed(std::string m) {
  return Status(StatusCode::kAlreadyCompleted, std::move(m));
}

void die_on_bad_result_access(const Status& status) {
  std::fprintf(stderr, "pdkv: value() called on an error Result: %s\n", status.to_string().c_str());
  std::abort();
}

}  // namespace pdkv
