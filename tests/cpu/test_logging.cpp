// The library's logger (logging.hpp): the level's spelling, and the spans that time one-time steps.
#include "test_util.hpp"

#include "log_capture.hpp"
#include "logging.hpp"

#include <chrono>
#include <optional>
#include <regex>
#include <thread>

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

// What the logger received while body ran at level.
template <typename Body>
std::string logged_at(spdlog::level::level_enum level, Body&& body) {
  test::LogCapture captured(level);
  body();
  return captured.text();
}

TEST(Logging, SpanLogsItsDurationAtDebugAndNothingAbove) {
  const std::string debug = logged_at(spdlog::level::debug, [] {
    const Span span("a test step");
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  });
  std::smatch m;
  ASSERT_TRUE(std::regex_search(debug, m, std::regex(R"(span a test step: (\d+) us)"))) << debug;
  EXPECT_GE(std::stol(m[1]), 3000);  // the sleep is inside the span
  EXPECT_LT(std::stol(m[1]), 3'000'000);
  const std::string info = logged_at(spdlog::level::info, [] { const Span span("a quiet step"); });
  EXPECT_EQ(info, "");
}

}  // namespace
}  // namespace dfgnn
