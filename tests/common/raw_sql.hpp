// Direct SQL on a database file, bypassing dfgnn: the tests that build foreign, hostile or
// tampered files (tests/cpu/test_db_*.cpp, test_cli.cpp).
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <string>

namespace dfgnn::test {

inline void raw_exec(const std::filesystem::path& p, const std::string& sql) {
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(p.c_str(), &h), SQLITE_OK);
  sqlite3_busy_timeout(h, 10000);
  char* err = nullptr;
  const int rc = sqlite3_exec(h, sql.c_str(), nullptr, nullptr, &err);
  const std::string message = err != nullptr ? err : "";
  sqlite3_free(err);
  sqlite3_close(h);
  ASSERT_EQ(rc, SQLITE_OK) << sql << ": " << message;
}

inline int64_t raw_int(const std::filesystem::path& p, const std::string& sql) {
  sqlite3* h = nullptr;
  sqlite3_open_v2(p.c_str(), &h, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* s = nullptr;
  int64_t v = -1;
  if (sqlite3_prepare_v2(h, sql.c_str(), -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
    v = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  sqlite3_close(h);
  return v;
}

}  // namespace dfgnn::test
