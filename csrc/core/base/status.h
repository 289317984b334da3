// Status and StatusOr<T>: how core reports failure. Core never throws; the torch glue turns a
// non-ok Status into a PyTorch exception in exactly one place (csrc/torch/check.h).
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace ember {

enum class StatusCode {
    kOk = 0,
    kInvalidArgument,
    kOutOfMemory,
    kUnimplemented,
    kInternal,
    kKernelFailed,  // a queued kernel failed; raised at the next synchronizing call
    kFailedPrecondition,  // valid, but not allowed in the current state (a stream that captures)
};

class [[nodiscard]] Status {
  public:
    Status() = default;
    Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

    static Status ok_status() { return {}; }
    bool ok() const { return code_ == StatusCode::kOk; }
    StatusCode code() const { return code_; }
    const std::string& message() const { return message_; }

  private:
    StatusCode code_ = StatusCode::kOk;
    std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status out_of_memory(std::string m) { return {StatusCode::kOutOfMemory, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status failed_precondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }

template <typename T>
class [[nodiscard]] StatusOr {
  public:
    StatusOr(T value) : v_(std::move(value)) {}
    StatusOr(Status status) : v_(std::move(status)) {}

    bool ok() const { return std::holds_alternative<T>(v_); }
    const Status& status() const {
        static const Status kOk;
        return ok() ? kOk : std::get<Status>(v_);
    }
    T& value() { return std::get<T>(v_); }
    const T& value() const { return std::get<T>(v_); }
    T& operator*() { return value(); }
    T* operator->() { return &value(); }

  private:
    std::variant<T, Status> v_;
};

}  // namespace ember

#define EMBER_RETURN_IF_ERROR(expr)               \
    do {                                          \
        ::ember::Status _ember_st = (expr);       \
        if (!_ember_st.ok()) return _ember_st;    \
    } while (0)
