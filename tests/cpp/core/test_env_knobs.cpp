// The environment's knobs (src/core/env_knobs.hpp): unset reads as "not set", every named choice
// and every count in range reads as itself, and any other value (the empty one too) is refused
// with sdm::ValueError naming the variable and what it takes.
#include <gtest/gtest.h>

#include <string>

#include "core/env_knobs.hpp"
#include "sdm/error.hpp"
#include "support/scoped_env.hpp"

namespace sdm::core {
namespace {

constexpr const char* kVariable = "SDM_TEST_ENV_KNOB";

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
  const testing::ScopedEnv env(kVariable, nullptr);
  EXPECT_EQ(env_choice(kVariable, {"walk", "sums"}), -1);
}

TEST(EnvKnobs, ChoiceNamesItsIndex) {
  const char* names[] = {"automatic", "positions", "staged", "staged_du_only"};
  for (int i = 0; i < 4; ++i) {
    const testing::ScopedEnv env(kVariable, names[i]);
    EXPECT_EQ(env_choice(kVariable, {"automatic", "positions", "staged", "staged_du_only"}), i) << names[i];
  }
}

TEST(EnvKnobs, ChoiceRefusesAnyOtherValue) {
  for (const char* bad : {"", "stagd", "Staged", "staged ", " staged", "2", "staged_du_onl", "positionsx"}) {
    const testing::ScopedEnv env(kVariable, bad);
    const std::string message = refusal([] { env_choice(kVariable, {"positions", "staged", "staged_du_only"}); });
    EXPECT_EQ(message, std::string(kVariable) + " must be \"positions\", \"staged\" or \"staged_du_only\" (or unset), got \"" +
                           bad + "\"");
  }
  const testing::ScopedEnv env(kVariable, "1");
  EXPECT_EQ(refusal([] { env_choice(kVariable, {"0"}); }),
            std::string(kVariable) + " must be \"0\" (or unset), got \"1\"");
}

TEST(EnvKnobs, CountUnsetIsZeroAndReadsItsValue) {
  {
    const testing::ScopedEnv env(kVariable, nullptr);
    EXPECT_EQ(env_count(kVariable, 8), 0);
  }
  for (int n = 1; n <= 8; ++n) {
    const testing::ScopedEnv env(kVariable, std::to_string(n).c_str());
    EXPECT_EQ(env_count(kVariable, 8), n);
  }
}

TEST(EnvKnobs, CountRefusesOutOfRangeAndNonIntegers) {
  for (const char* bad : {"", "0", "-1", "+3", "9", "3x", "x", " 3", "3 ", "1.5", "99999999999999999999999"}) {
    const testing::ScopedEnv env(kVariable, bad);
    EXPECT_EQ(refusal([] { env_count(kVariable, 8); }),
              std::string(kVariable) + " must be an integer in 1..8, got \"" + bad + "\"")
        << bad;
  }
}

}  // namespace
}  // namespace sdm::core
