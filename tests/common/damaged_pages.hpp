// Damaged database pages for tests (issue 26): garbage written over exactly the pages a query of
// one table must read, found through SQLite's dbstat table.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace dfgnn::test {

// Overwrites every leaf page of `table` (or index) of an SQLite file with fixed garbage; returns
// how many pages were damaged (0 if dbstat could not list them).
inline int damage_leaf_pages(const std::filesystem::path& path, const std::string& table) {
  sqlite3* h = nullptr;
  std::vector<int64_t> pages;
  int64_t page_size = 0;
  if (sqlite3_open_v2(path.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(h, "PRAGMA page_size", -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
      page_size = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    s = nullptr;
    if (sqlite3_prepare_v2(h, "SELECT pageno FROM dbstat WHERE name = ?1 AND pagetype = 'leaf'", -1, &s, nullptr) ==
        SQLITE_OK) {
      sqlite3_bind_text(s, 1, table.c_str(), -1, SQLITE_TRANSIENT);
      while (sqlite3_step(s) == SQLITE_ROW) pages.push_back(sqlite3_column_int64(s, 0));
    }
    sqlite3_finalize(s);
  }
  sqlite3_close(h);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  std::mt19937 garbage(26);
  std::string bytes(static_cast<size_t>(page_size), '\0');
  for (int64_t n : pages) {
    for (char& c : bytes) c = static_cast<char>(garbage());
    f.seekp((n - 1) * page_size);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  return f.good() ? static_cast<int>(pages.size()) : 0;
}

}  // namespace dfgnn::test
