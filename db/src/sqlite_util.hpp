// Thin RAII layer over SQLite's C API for the tuning database: a connection with a cache of
// prepared statements, a scoped query that binds values and always resets its statement, and
// transactions (BEGIN IMMEDIATE with retry on SQLITE_BUSY). Internal to db/.
#pragma once

#include "db_error.hpp"

#include <spdlog/logger.h>
#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dfgnn::db::detail {

// dfgnn's named spdlog logger "dfgnn" (shared with runtime/src/logging.cpp: same name, same
// DFGNN_LOG_LEVEL rule); registered here if the runtime has not done so yet. Null only if
// spdlog refuses to make one.
spdlog::logger* db_logger();

// The kind of failure an SQLite result code (and the system errno behind an I/O error) means.
ErrorKind classify(int rc, int system_errno);

// Throws DbError: "tuning database PATH: WHAT: SQLITE MESSAGE (SQLite code N: KIND[, system
// error])", its kind from classify().
[[noreturn]] void throw_sqlite(sqlite3* db, int rc, const std::string& path, std::string_view what);
// Throws DbError(kind): "tuning database PATH: WHAT".
[[noreturn]] void throw_db(const std::string& path, std::string_view what, ErrorKind kind = ErrorKind::Other);

// Where text read from (or written to) a database holds something a terminal or a log would
// interpret: "" if it is clean UTF-8 without control characters, else what was found (C0 and C1
// controls, DEL, which covers ESC sequences and newlines, or malformed UTF-8).
std::string unprintable(std::string_view text);

// True for the result codes that mean "another connection holds the lock".
inline bool is_busy(int rc) { return (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED; }

class Connection {
 public:
  // Takes ownership of handle; display_path is used in messages.
  Connection(sqlite3* handle, std::string display_path);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  sqlite3* get() const { return db_; }
  const std::string& path() const { return path_; }

  // A cached prepared statement for a string literal (keyed by its address).
  sqlite3_stmt* statement(const char* sql);
  // Runs SQL text that carries no values (DDL, PRAGMA, BEGIN/COMMIT). Throws on error.
  void exec(const char* sql);
  // Same, returning the SQLite result code instead of throwing (for busy handling).
  int try_exec(const char* sql);

  [[noreturn]] void fail(int rc, std::string_view what) const { throw_sqlite(db_, rc, path_, what); }

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
  std::unordered_map<const char*, sqlite3_stmt*> cache_;
};

// One use of a cached statement: bind (1-based), step, read columns. Resets on destruction so no
// statement keeps a read transaction open.
class Query {
 public:
  Query(Connection& conn, const char* sql);
  ~Query();
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;

  Query& bind(int index, int64_t value);
  Query& bind(int index, int32_t value) { return bind(index, static_cast<int64_t>(value)); }
  Query& bind(int index, double value);
  Query& bind(int index, std::string_view text);
  Query& bind(int index, const char* text) { return bind(index, std::string_view(text)); }
  Query& bind(int index, const std::string& text) { return bind(index, std::string_view(text)); }
  Query& bind_blob(int index, const void* data, size_t size);
  Query& bind_null(int index);

  // True while a row is available; throws on error.
  bool step();
  // Steps to completion (a statement without rows); returns sqlite3_changes().
  int64_t run();

  bool is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  int64_t i64(int col) const { return sqlite3_column_int64(stmt_, col); }
  // NULL reads as NaN.
  double f64(int col) const;
  std::string text(int col) const;
  std::vector<char> blob(int col) const;
  int column_type(int col) const { return sqlite3_column_type(stmt_, col); }

 private:
  Connection& conn_;
  sqlite3_stmt* stmt_;
};

// Reads the columns of one row checking each value's storage class against the column's meaning:
// a TEXT where a number belongs ('fast' in median_ms), a REAL in an INTEGER column, a BLOB in a text
// column, or text with control characters (see unprintable()). The first such value becomes the
// row's problem() and reads as NULL would (0, NaN, ""). NULL itself is not a problem here.
class RowReader {
 public:
  explicit RowReader(const Query& q) : q_(q) {}
  int64_t integer(int col, const char* name);
  int32_t int32(int col, const char* name);  // an integer that must fit 32 bits
  double real(int col, const char* name);
  std::string text(int col, const char* name);
  bool is_null(int col) const { return q_.is_null(col); }
  const std::string& problem() const { return problem_; }

 private:
  void note(const char* name, std::string why);
  const Query& q_;
  std::string problem_;
};

// Runs body inside BEGIN IMMEDIATE ... COMMIT, rolling back on any exception. When the write lock
// stays busy past the busy timeout (or a statement reports SQLITE_BUSY), the whole transaction is
// retried up to `attempts` times with a growing pause.
void write_transaction(Connection& conn, int attempts, const std::function<void()>& body);
// Runs body inside a deferred (read) transaction: one consistent snapshot for several queries.
void read_transaction(Connection& conn, const std::function<void()>& body);

// Percent-encodes a filesystem path for a "file:" URI.
std::string uri_path(const std::string& path);

}  // namespace dfgnn::db::detail
