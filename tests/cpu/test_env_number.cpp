// Numbers read from the environment (env_number.hpp: DFGNN_NEAREST_MAX_DISTANCE, DFGNN_TUNE_BUDGET).
#include "test_util.hpp"

#include "env_number.hpp"

namespace dfgnn {
namespace {

// Environment numbers are whole finite numbers: "20s", "nan" and "1e400" are none (the sign is the
// caller's rule).
TEST(EnvNumber, WholeFiniteNumbersOnly) {
  for (const char* bad : {"", "20s", "far", "nan", "inf", "1e400", " "}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(parse_env_number(bad).has_value());
  }
  EXPECT_FALSE(parse_env_number(nullptr).has_value());
  EXPECT_EQ(parse_env_number("20"), 20.0);
  EXPECT_EQ(parse_env_number("0.25"), 0.25);
  EXPECT_EQ(parse_env_number("-3"), -3.0);  // the sign is the caller's rule
}

}  // namespace
}  // namespace dfgnn
