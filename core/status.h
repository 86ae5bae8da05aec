// Status and Result<T>: how fedmesh reports failures a user or the network can cause
// (bad config, corrupt file, bad message). Success costs nothing: an OK Status holds no
// allocation. Exceptions never cross a library boundary; this is what crosses instead.
// Thread-safety: value types, safe to copy between threads.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace fedmesh {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // the caller passed something malformed (config, flag, shape)
  kNotFound,           // a named file, key or entity does not exist
  kCorruption,         // stored or received bytes fail validation
  kIOError,            // the OS refused a read/write
  kFailedPrecondition, // the system is not in a state where this can run
  kOutOfRange,         // an index or size beyond a limit
  kUnavailable,        // a peer or resource is temporarily unreachable
  kDeadlineExceeded,
  kPermissionDenied,
  kAlreadyExists,
  kUnimplemented,
  kInternal,           // a bug: an invariant the code itself should hold
};

std::string_view StatusCodeName(StatusCode code);

// A number as error messages spell it: "0.1", "1e-05", "inf" (printf's %g), rather than
// std::to_string's "0.100000".
std::string FormatNumber(double v);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
  static Status IOError(std::string m) { return {StatusCode::kIOError, std::move(m)}; }
  static Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
  static Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
  static Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  // The human-readable sentence, without the code name. Empty when OK.
  const std::string& message() const;
  // "InvalidArgument: <message>" or "OK".
  std::string ToString() const;
  // Returns a copy whose message is "<context>: <message>"; OK stays OK.
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code() == b.code() && a.message() == b.message();
  }

 private:
  struct Rep {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;  // null when OK: success allocates nothing
};

// Result<T> holds either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(v_).ok()) v_ = Status::Internal("Result constructed from an OK Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  // REQUIRES: ok().
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace fedmesh

#define FM_STATUS_CONCAT_INNER(a, b) a##b
#define FM_STATUS_CONCAT(a, b) FM_STATUS_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define FM_RETURN_IF_ERROR(expr)                       \
  do {                                                 \
    ::fedmesh::Status fm_status_ = (expr);             \
    if (!fm_status_.ok()) return fm_status_;           \
  } while (0)

// `FM_ASSIGN_OR_RETURN(auto x, MakeX());` binds the value or returns the error.
#define FM_ASSIGN_OR_RETURN(lhs, expr) \
  FM_ASSIGN_OR_RETURN_IMPL(FM_STATUS_CONCAT(fm_result_, __LINE__), lhs, expr)
#define FM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
