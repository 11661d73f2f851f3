// Text from outside (a database's hosts, schedules, GPU names; messages that quote them) made safe
// for a terminal or a log: control characters are shown as escapes instead of being sent raw, so a
// hostile row cannot clear the screen, recolour it or forge lines of a table.
#pragma once

#include "bidi.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace cli {

// C0 controls (newline, tab, ESC and the rest), DEL, C1 controls (U+0080..U+009F) and
// bidirectional controls (bidi.hpp) become \n, \t, \r, \e, \xNN or \uNNNN; a byte that is not part of
// well-formed UTF-8 becomes \xNN. Everything else, including other UTF-8 characters, passes
// unchanged.
inline std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    switch (c) {
      case '\n': out += "\\n"; ++i; continue;
      case '\t': out += "\\t"; ++i; continue;
      case '\r': out += "\\r"; ++i; continue;
      case 0x1b: out += "\\e"; ++i; continue;
    }
    if (c < 0x80) {  // other C0 controls and DEL
      out += fmt::format("\\x{:02x}", c);
      ++i;
      continue;
    }
    const size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    bool ok = n != 0 && i + n <= text.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
    if (!ok) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
      continue;
    }
    uint32_t cp = n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3f);
    if ((cp >= 0x80 && cp < 0xa0) || dfgnn::db::is_bidi_control(cp)) {
      out += fmt::format("\\u{:04x}", cp);
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

}  // namespace cli
