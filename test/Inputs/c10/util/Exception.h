#pragma once
#include <exception>
#include <string>

namespace c10 {
class Error : public std::exception {
public:
  Error(std::string msg);
  const char *what() const noexcept override;
  const std::string &msg() const;
};
class OutOfMemoryError : public Error {
  using Error::Error;
};
namespace detail {
[[noreturn]] void torchCheckFail(const char *func, const char *file, unsigned line,
                                 const char *msg);
}
} // namespace c10

// The real macro expands to a branch that throws c10::Error.
#define TORCH_CHECK(cond, ...)                                                 \
  if (!(cond)) {                                                               \
    ::c10::detail::torchCheckFail(__func__, __FILE__, __LINE__, #cond);        \
  }
