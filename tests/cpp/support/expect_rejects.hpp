// expect_rejects: the check every validation test makes (docs/spec.md §8): `call` throws ErrorT whose
// argument() is `argument` and whose message names `argument` and contains every fragment.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <initializer_list>
#include <string>

namespace sdm::testing {

template <typename ErrorT>
void expect_rejects(const std::function<void()>& call, const std::string& argument,
                    std::initializer_list<std::string> fragments = {}) {
  try {
    call();
  } catch (const ErrorT& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.argument(), argument) << message;
    EXPECT_NE(message.find(argument), std::string::npos) << "message does not name " << argument << ": " << message;
    for (const std::string& fragment : fragments) {
      EXPECT_NE(message.find(fragment), std::string::npos) << "missing \"" << fragment << "\" in: " << message;
    }
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type for " << argument << ": " << e.what();
    return;
  }
  ADD_FAILURE() << "no exception; expected one naming " << argument;
}

}  // namespace sdm::testing
