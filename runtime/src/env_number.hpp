// Numbers read from environment variables (DFGNN_TUNE_BUDGET, DFGNN_NEAREST_MAX_DISTANCE).
#pragma once

#include <cmath>
#include <cstdlib>
#include <optional>

namespace dfgnn {

// The text as a whole finite number, or nullopt: empty text, trailing text ("20s"), NaN and
// infinity are refused, so a typo is reported instead of read as a prefix.
inline std::optional<double> parse_env_number(const char* text) {
  if (text == nullptr) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(d)) return std::nullopt;
  return d;
}

}  // namespace dfgnn
