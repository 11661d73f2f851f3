// Unicode bidirectional controls: U+061C, U+200E, U+200F, U+202A..U+202E, U+2066..U+2069. They
// reorder what a terminal shows after them, so text holding one can display as other text. The
// database's row check (unprintable) refuses them as it refuses control characters, and dfgnn-db's
// output escapes them (tools/printable.hpp). Header-only, no dependencies.
#pragma once

#include <cstdint>

namespace dfgnn::db {

inline bool is_bidi_control(uint32_t cp) {
  return cp == 0x061c || cp == 0x200e || cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) ||
         (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace dfgnn::db
