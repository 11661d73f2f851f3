// Thin RAII layer over SQLite's C API for the tuning database: a connection with a cache of
// prepared statements, a scoped query that binds values, reads columns by name and always resets
// its statement, and transactions (BEGIN IMMEDIATE with retry on SQLITE_BUSY). Internal to db/.
#pragma once

#include "db_error.hpp"

#include <spdlog/logger.h>
#include <sqlite3.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dfgnn::db::detail {

// dfgnn's named spdlog logger "dfgnn" (shared with runtime/src/logging.cpp: same name, same
// DFGNN_LOG_LEVEL rule); registered here if the runtime has not done so yet. Null only if
// spdlog refuses to make one.
spdlog::logger* db_logger();

template <typename... Args>
void log_warn(fmt::format_string<Args...> format, Args&&... args) {
  if (auto* l = db_logger()) l->warn(format, std::forward<Args>(args)...);
}
template <typename... Args>
void log_info(fmt::format_string<Args...> format, Args&&... args) {
  if (auto* l = db_logger()) l->info(format, std::forward<Args>(args)...);
}
template <typename... Args>
void log_debug(fmt::format_string<Args...> format, Args&&... args) {
  if (auto* l = db_logger()) l->debug(format, std::forward<Args>(args)...);
}

// The kind of failure an SQLite result code (and the system errno behind an I/O error) means.
ErrorKind classify(int rc, int system_errno);

// Throws DbError: "tuning database PATH: WHAT: SQLITE MESSAGE (SQLite code N: KIND[, system
// error])", its kind from classify().
[[noreturn]] void throw_sqlite(sqlite3* db, int rc, const std::string& path, std::string_view what);
// Throws DbError(kind): "tuning database PATH: WHAT".
[[noreturn]] void throw_db(const std::string& path, std::string_view what, ErrorKind kind = ErrorKind::Other);

// Where text read from (or written to) a database holds something a terminal or a log would
// interpret: "" if it is clean UTF-8 without control characters, else what was found (C0 and C1
// controls, DEL, which covers ESC sequences and newlines, Unicode bidirectional controls, or
// malformed UTF-8).
std::string unprintable(std::string_view text);

// True for the result codes that mean "another connection holds the lock".
inline bool is_busy(int rc) { return (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED; }

// A prepared statement and the index of each of its result columns by name (sqlite3_column_name:
// the AS alias, else SQLite's name for the column, which it documents only for a plain column of
// one table: give anything else, and every column of a join, an AS name). Names are unique within
// a statement.
struct Statement {
  // Hashed, not ordered: a decoder's names share long prefixes ("candidate_stats."), which an ordered
  // map compares again at every level. For the same reason the hash reads only a name's length and
  // last eight bytes, which tell a statement's names apart (a clash costs one more comparison, never
  // a wrong column): hashing every byte was a tenth of a process's first dispatch decision, which
  // looks up some 20000 columns.
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view name) const noexcept {
      uint64_t tail = 0;
      const size_t n = name.size() < 8 ? name.size() : 8;
      if (n > 0) std::memcpy(&tail, name.data() + name.size() - n, n);
      return static_cast<size_t>((tail ^ (name.size() * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull);
    }
  };
  sqlite3_stmt* stmt = nullptr;
  std::unordered_map<std::string, int, NameHash, std::equal_to<>> columns;
};

class Connection {
 public:
  // Takes ownership of handle; display_path is used in messages.
  Connection(sqlite3* handle, std::string display_path);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  sqlite3* get() const { return db_; }
  const std::string& path() const { return path_; }

  // A cached prepared statement for SQL text that lives as long as the connection (a literal or a
  // function-local static string: it is keyed by its address). Throws if two result columns share
  // a name, so that reading by name is never ambiguous.
  const Statement& statement(const char* sql);
  // Runs SQL text that carries no values (DDL, PRAGMA, BEGIN/COMMIT). Throws on error.
  void exec(const char* sql);
  // Same, returning the SQLite result code instead of throwing (for busy handling).
  int try_exec(const char* sql);

  [[noreturn]] void fail(int rc, std::string_view what) const { throw_sqlite(db_, rc, path_, what); }

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
  std::unordered_map<const char*, Statement> cache_;
};

// One use of a cached statement: bind (1-based, the ?N of the SQL text), step, read columns by
// name. There is no positional column access: a decoder names the columns it reads, so the order
// of a SELECT list cannot matter, and a name the statement lacks throws DbError naming the query
// and the column (a defect found on the first run of that query). Resets on destruction so no
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

  // The current row's values, by column name. No type checks (RowReader checks them).
  bool is_null(std::string_view column) const { return column_type(column) == SQLITE_NULL; }
  int64_t i64(std::string_view column) const { return i64_at(index(column)); }
  // NULL reads as NaN.
  double f64(std::string_view column) const { return f64_at(index(column)); }
  std::string text(std::string_view column) const { return text_at(index(column)); }
  std::vector<char> blob(std::string_view column) const { return blob_at(index(column)); }
  int column_type(std::string_view column) const { return type_at(index(column)); }

 private:
  friend class RowReader;  // looks a column up once per value it reads
  int index(std::string_view column) const;
  int type_at(int col) const { return sqlite3_column_type(stmt_, col); }
  int64_t i64_at(int col) const { return sqlite3_column_int64(stmt_, col); }
  double f64_at(int col) const;
  std::string text_at(int col) const;
  std::vector<char> blob_at(int col) const;
  Connection& conn_;
  const Statement& statement_;
  sqlite3_stmt* stmt_;
};

// Reads the named columns of one row checking each value's storage class against the column's meaning:
// a TEXT where a number belongs ('fast' in median_ms), a REAL in an INTEGER column, a BLOB in a text
// column, or text with control characters (see unprintable()). The first such value becomes the
// row's problem() and reads as NULL would (0, NaN, ""). NULL itself is not a problem here.
class RowReader {
 public:
  explicit RowReader(const Query& q) : q_(q) {}
  int64_t integer(std::string_view column);
  int32_t int32(std::string_view column);  // an integer that must fit 32 bits
  double real(std::string_view column);
  std::string text(std::string_view column);
  bool is_null(std::string_view column) const { return q_.is_null(column); }
  const std::string& problem() const { return problem_; }

 private:
  void note(std::string_view column, std::string why);
  const Query& q_;
  std::string problem_;
};

// Runs body inside BEGIN IMMEDIATE ... COMMIT, rolling back on any exception. When the write lock
// stays busy past the busy timeout (or a statement reports SQLITE_BUSY), the whole transaction is
// retried up to `attempts` times with a growing pause.
void write_transaction(Connection& conn, int attempts, const std::function<void()>& body);
// Runs body inside a deferred (read) transaction: one consistent snapshot for several queries.
void read_transaction(Connection& conn, const std::function<void()>& body);

// A SELECT list naming each column "table.column", the names RowReader decoders read a table's
// columns by, whatever query selected them: select_list("e", "environments", {"id", "sm_count"}) is
// `e.id AS "environments.id", e.sm_count AS "environments.sm_count"`.
std::string select_list(std::string_view alias, std::string_view table,
                        std::initializer_list<std::string_view> columns);

// Percent-encodes a filesystem path for a "file:" URI.
std::string uri_path(const std::string& path);

}  // namespace dfgnn::db::detail
