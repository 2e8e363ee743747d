// errors.hpp - sdm::Error -> c10 exceptions, so that Python sees the C++ message as
// ValueError / TypeError / RuntimeError (docs/spec.md §8).
#pragma once

#include <c10/util/Exception.h>

#include <utility>

#include "sdm/error.hpp"

namespace sdm::torch_bindings {

// Runs `body` (a call into the sdm C++ API) and rethrows its sdm::Error as the c10 error
// that PyTorch maps to the matching Python exception, with the same message.
template <typename Body>
decltype(auto) translate_errors(Body&& body) {
  try {
    return std::forward<Body>(body)();
  } catch (const sdm::TypeError& e) {
    C10_THROW_ERROR(TypeError, e.what());
  } catch (const sdm::ValueError& e) {
    C10_THROW_ERROR(ValueError, e.what());
  } catch (const sdm::RuntimeError& e) {
    C10_THROW_ERROR(Error, e.what());
  }
}

}  // namespace sdm::torch_bindings
