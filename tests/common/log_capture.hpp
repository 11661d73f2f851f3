// Captures the "dfgnn" logger's lines (at `level` and above) while alive, for tests of what the
// library logs.
#pragma once

#include "logging.hpp"

#include <spdlog/sinks/ostream_sink.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>

namespace dfgnn::test {

class LogCapture {
 public:
  explicit LogCapture(spdlog::level::level_enum level = spdlog::level::info)
      : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(text_)), old_(dfgnn::log().level()) {
    dfgnn::log().set_level(level);
    dfgnn::log().sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = dfgnn::log().sinks();
    sinks.erase(std::find(sinks.begin(), sinks.end(), sink_));
    dfgnn::log().set_level(old_);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  spdlog::level::level_enum old_;
};

}  // namespace dfgnn::test
