// The library's logger (logging.hpp): the level's spelling.
#include "test_util.hpp"

#include "logging.hpp"

#include <optional>

namespace dfgnn {
namespace {

TEST(Logging, LevelIsCaseInsensitiveAndUnknownIsRefused) {
  EXPECT_EQ(parse_log_level("WARN"), spdlog::level::warn);
  EXPECT_EQ(parse_log_level("warn"), spdlog::level::warn);
  EXPECT_EQ(parse_log_level("Warning"), spdlog::level::warn);
  EXPECT_EQ(parse_log_level("DEBUG"), spdlog::level::debug);
  EXPECT_EQ(parse_log_level("Off"), spdlog::level::off);
  EXPECT_EQ(parse_log_level("loud"), std::nullopt);  // spdlog alone reads this as "off"
  EXPECT_EQ(parse_log_level(""), std::nullopt);
}

}  // namespace
}  // namespace dfgnn
