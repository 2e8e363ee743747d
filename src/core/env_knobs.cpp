// env_knobs.cpp - reading the environment's knobs (env_knobs.hpp).
#include "core/env_knobs.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "sdm/error.hpp"

namespace sdm::core {

int env_choice(const char* variable, std::initializer_list<const char*> choices) {
  const char* value = std::getenv(variable);
  if (value == nullptr) return -1;
  int index = 0;
  std::string names;
  for (const char* choice : choices) {
    if (std::strcmp(value, choice) == 0) return index;
    names += (index == 0 ? "" : index + 1 == static_cast<int>(choices.size()) ? " or " : ", ");
    names += std::string("\"") + choice + "\"";
    ++index;
  }
  throw ValueError(variable, std::string(variable) + " must be " + names + " (or unset), got \"" + value + "\"");
}

std::int64_t env_count(const char* variable, std::int64_t most) {
  const char* value = std::getenv(variable);
  if (value == nullptr) return 0;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(value, &end, 10);  // digits only: no sign, no blanks
  if (*value < '0' || *value > '9' || *end != '\0' || errno == ERANGE || n < 1 || n > most) {
    throw ValueError(variable, std::string(variable) + " must be an integer in 1.." + std::to_string(most) +
                                   ", got \"" + value + "\"");
  }
  return static_cast<std::int64_t>(n);
}

}  // namespace sdm::core
