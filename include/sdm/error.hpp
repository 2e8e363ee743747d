// sdm/error.hpp - the exceptions of the C++ API (docs/spec.md §8).
//
// Every error the library reports is an sdm::Error. Bad arguments are also
// std::invalid_argument (kind value or type); device failures are std::runtime_error
// (kind runtime). The message names the argument, what was expected and what was given.
// The PyTorch binding maps the kinds to ValueError / TypeError / RuntimeError.
#pragma once

#include <stdexcept>
#include <string>

namespace sdm {

enum class ErrorKind { value, type, runtime };

class Error {
 public:
  virtual ~Error() = default;
  ErrorKind kind() const { return kind_; }
  const std::string& argument() const { return argument_; }  // offending argument, may be ""
  virtual const char* message() const noexcept = 0;

 protected:
  Error(ErrorKind kind, std::string argument) : kind_(kind), argument_(std::move(argument)) {}

 private:
  ErrorKind kind_;
  std::string argument_;
};

// A bad value, shape, device or index (Python: ValueError).
class ValueError : public std::invalid_argument, public Error {
 public:
  ValueError(std::string argument, const std::string& message)
      : std::invalid_argument(message), Error(ErrorKind::value, std::move(argument)) {}
  const char* message() const noexcept override { return what(); }
};

// A bad dtype (Python: TypeError).
class TypeError : public std::invalid_argument, public Error {
 public:
  TypeError(std::string argument, const std::string& message)
      : std::invalid_argument(message), Error(ErrorKind::type, std::move(argument)) {}
  const char* message() const noexcept override { return what(); }
};

// A device or internal failure (Python: RuntimeError).
class RuntimeError : public std::runtime_error, public Error {
 public:
  explicit RuntimeError(const std::string& message)
      : std::runtime_error(message), Error(ErrorKind::runtime, "") {}
  const char* message() const noexcept override { return what(); }
};

}  // namespace sdm
