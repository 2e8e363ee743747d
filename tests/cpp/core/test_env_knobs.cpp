// The environment's knobs (src/core/env_knobs.hpp): unset reads as "not set", every named choice
// and every count in range reads as itself, and any other value (the empty one too) is refused
// with sdm::ValueError naming the variable and what it takes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "core/env_knobs.hpp"
#include "sdm/error.hpp"

namespace sdm::core {
namespace {

constexpr const char* kVariable = "SDM_TEST_ENV_KNOB";

// Sets (or unsets) kVariable for one scope.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::optional<std::string> value) {
    if (value) {
      setenv(kVariable, value->c_str(), 1);
    } else {
      unsetenv(kVariable);
    }
  }
  ~ScopedEnv() { unsetenv(kVariable); }
};

// The error env_choice / env_count raises for the current value, or "" when none.
template <typename Read>
std::string refusal(const Read& read) {
  try {
    read();
  } catch (const ValueError& e) {
    EXPECT_EQ(e.argument(), kVariable);
    return e.what();
  }
  return "";
}

TEST(EnvKnobs, ChoiceUnsetIsNotSet) {
  ScopedEnv env(std::nullopt);
  EXPECT_EQ(env_choice(kVariable, {"walk", "sums"}), -1);
}

TEST(EnvKnobs, ChoiceNamesItsIndex) {
  const char* names[] = {"automatic", "positions", "staged", "staged_du_only"};
  for (int i = 0; i < 4; ++i) {
    ScopedEnv env(std::string(names[i]));
    EXPECT_EQ(env_choice(kVariable, {"automatic", "positions", "staged", "staged_du_only"}), i) << names[i];
  }
}

TEST(EnvKnobs, ChoiceRefusesAnyOtherValue) {
  for (const char* bad : {"", "stagd", "Staged", "staged ", " staged", "2", "staged_du_onl", "positionsx"}) {
    ScopedEnv env(std::string{bad});
    const std::string message = refusal([] { env_choice(kVariable, {"positions", "staged", "staged_du_only"}); });
    EXPECT_EQ(message, std::string(kVariable) + " must be \"positions\", \"staged\" or \"staged_du_only\" (or unset), got \"" +
                           bad + "\"");
  }
  ScopedEnv env(std::string{"1"});
  EXPECT_EQ(refusal([] { env_choice(kVariable, {"0"}); }),
            std::string(kVariable) + " must be \"0\" (or unset), got \"1\"");
}

TEST(EnvKnobs, CountUnsetIsZeroAndReadsItsValue) {
  {
    ScopedEnv env(std::nullopt);
    EXPECT_EQ(env_count(kVariable, 8), 0);
  }
  for (int n = 1; n <= 8; ++n) {
    ScopedEnv env(std::to_string(n));
    EXPECT_EQ(env_count(kVariable, 8), n);
  }
}

TEST(EnvKnobs, CountRefusesOutOfRangeAndNonIntegers) {
  for (const char* bad : {"", "0", "-1", "+3", "9", "3x", "x", " 3", "3 ", "1.5", "99999999999999999999999"}) {
    ScopedEnv env(std::string{bad});
    EXPECT_EQ(refusal([] { env_count(kVariable, 8); }),
              std::string(kVariable) + " must be an integer in 1..8, got \"" + bad + "\"")
        << bad;
  }
}

}  // namespace
}  // namespace sdm::core
