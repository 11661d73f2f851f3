#include "sqlite_util.hpp"

#include "bidi.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <limits>
#include <set>
#include <thread>

namespace dfgnn::db {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Other: return "error";
    case ErrorKind::InvalidArgument: return "invalid argument";
    case ErrorKind::Busy: return "locked by another connection";
    case ErrorKind::DiskFull: return "the disk is full";
    case ErrorKind::ReadOnly: return "read-only (the filesystem or the file does not allow writing)";
    case ErrorKind::Corrupt: return "the file is damaged";
    case ErrorKind::NotADatabase: return "not an SQLite database";
    case ErrorKind::Foreign: return "not a dfgnn tuning database";
    case ErrorKind::NewerSchema: return "schema newer than this build";
    case ErrorKind::Schema: return "schema differs from dfgnn's";
    case ErrorKind::Io: return "I/O error";
  }
  return "error";
}

}  // namespace dfgnn::db

namespace dfgnn::db::detail {

spdlog::logger* db_logger() {
  static std::shared_ptr<spdlog::logger> instance = []() -> std::shared_ptr<spdlog::logger> {
    if (auto existing = spdlog::get("dfgnn")) return existing;  // the application's or the runtime's
    try {
      auto made = spdlog::stderr_color_mt("dfgnn");
      const char* level = std::getenv("DFGNN_LOG_LEVEL");
      made->set_level(level != nullptr ? spdlog::level::from_str(level) : spdlog::level::warn);
      return made;
    } catch (const std::exception&) {
      return spdlog::get("dfgnn");  // registered concurrently by the runtime
    }
  }();
  return instance.get();
}

ErrorKind classify(int rc, int system_errno) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return ErrorKind::Busy;
    case SQLITE_FULL: return ErrorKind::DiskFull;
    case SQLITE_READONLY: return ErrorKind::ReadOnly;
    case SQLITE_CORRUPT: return ErrorKind::Corrupt;
    case SQLITE_NOTADB: return ErrorKind::NotADatabase;
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
      // The errno behind it tells a full or read-only disk from other I/O failures. SQLite keeps no
      // errno when the WAL index (-shm) cannot grow: on Linux that is a full filesystem.
      if (rc == SQLITE_IOERR_SHMSIZE) return ErrorKind::DiskFull;
      if (system_errno == ENOSPC || system_errno == EDQUOT) return ErrorKind::DiskFull;
      if (system_errno == EROFS || system_errno == EACCES || system_errno == EPERM) return ErrorKind::ReadOnly;
      return ErrorKind::Io;
  }
  return ErrorKind::Other;
}

void throw_sqlite(sqlite3* db, int rc, const std::string& path, std::string_view what) {
  const char* message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  // sqlite3_errmsg may describe an older error when rc came from elsewhere; add errstr if differs.
  std::string text = message != nullptr ? message : "";
  const char* generic = sqlite3_errstr(rc);
  if (generic != nullptr && text.find(generic) == std::string::npos && text != generic)
    text += fmt::format(" [{}]", generic);
  const int sys = db != nullptr ? sqlite3_system_errno(db) : 0;
  const ErrorKind kind = classify(rc, sys);
  std::string cause = kind == ErrorKind::Other ? std::string() : std::string(": ") + error_kind_name(kind);
  if (sys != 0 && ((rc & 0xff) == SQLITE_IOERR || (rc & 0xff) == SQLITE_CANTOPEN || (rc & 0xff) == SQLITE_FULL))
    cause += fmt::format(" (system error: {})", std::strerror(sys));
  throw DbError(kind, fmt::format("tuning database {}: {}: {} (SQLite code {}{})", path, what, text, rc, cause), rc);
}

void throw_db(const std::string& path, std::string_view what, ErrorKind kind) {
  throw DbError(kind, fmt::format("tuning database {}: {}", path, what));
}

std::string unprintable(std::string_view text) {
  // Most text is printable ASCII (schedules, uuids, fingerprints): eight bytes at a time, none
  // below 0x20, none with the top bit, none 0x7f; the first other word goes the byte-wise way.
  size_t start = 0;
  for (; start + 8 <= text.size(); start += 8) {
    uint64_t w;
    std::memcpy(&w, text.data() + start, 8);
    constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
    const uint64_t below_space = (w - kOnes * 0x20) & ~w & kHigh;  // some byte < 0x20 (or >= 0x80)
    const uint64_t is_del = ((w ^ (kOnes * 0x7f)) - kOnes) & ~(w ^ (kOnes * 0x7f)) & kHigh;  // some byte 0x7f
    if ((w & kHigh) | below_space | is_del) break;
  }
  for (size_t i = start; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) return fmt::format("control character {:#04x} at byte {}", c, i);
    if (c < 0x80) {
      ++i;
      continue;
    }
    // A UTF-8 sequence: its length from the lead byte, continuation bytes 10xxxxxx, no overlong
    // 2-byte form; U+0080..U+009F (C2 80..C2 9F) are the C1 controls.
    const size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (n == 0 || i + n > text.size()) return fmt::format("malformed UTF-8 at byte {}", i);
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(text[i + k]) & 0xc0) != 0x80) return fmt::format("malformed UTF-8 at byte {}", i);
    if (c == 0xc2 && static_cast<unsigned char>(text[i + 1]) < 0xa0)
      return fmt::format("C1 control character U+{:04X} at byte {}", static_cast<unsigned char>(text[i + 1]), i);
    if (n == 2 || n == 3) {  // every bidirectional control is a 2- or 3-byte sequence
      uint32_t cp = n == 2 ? c & 0x1f : c & 0x0f;
      for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3f);
      if (is_bidi_control(cp)) return fmt::format("bidirectional control U+{:04X} at byte {}", cp, i);
    }
    i += n;
  }
  return {};
}

void RowReader::note(std::string_view column, std::string why) {
  if (problem_.empty()) problem_ = fmt::format("column {}: {}", column, why);
}

namespace {
const char* storage_class(int type) {
  switch (type) {
    case SQLITE_INTEGER: return "an INTEGER";
    case SQLITE_FLOAT: return "a REAL";
    case SQLITE_TEXT: return "a TEXT";
    case SQLITE_BLOB: return "a BLOB";
  }
  return "NULL";
}
}  // namespace

int64_t RowReader::integer(std::string_view column) {
  const int col = q_.index(column);
  const int type = q_.type_at(col);
  if (type == SQLITE_INTEGER) return q_.i64_at(col);
  if (type != SQLITE_NULL) note(column, fmt::format("holds {} value, not an integer", storage_class(type)));
  return 0;
}

int32_t RowReader::int32(std::string_view column) {
  const int64_t v = integer(column);
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
    note(column, fmt::format("{} does not fit 32 bits", v));
    return 0;
  }
  return static_cast<int32_t>(v);
}

double RowReader::real(std::string_view column) {
  const int col = q_.index(column);
  const int type = q_.type_at(col);
  if (type == SQLITE_FLOAT || type == SQLITE_INTEGER) return q_.f64_at(col);
  if (type != SQLITE_NULL) note(column, fmt::format("holds {} value, not a number", storage_class(type)));
  return std::numeric_limits<double>::quiet_NaN();
}

std::string RowReader::text(std::string_view column) {
  const int col = q_.index(column);
  const int type = q_.type_at(col);
  if (type == SQLITE_NULL) return {};
  if (type != SQLITE_TEXT) {
    note(column, fmt::format("holds {} value, not text", storage_class(type)));
    return {};
  }
  std::string value = q_.text_at(col);
  if (std::string why = unprintable(value); !why.empty()) {
    note(column, why);
    return {};
  }
  return value;
}

Connection::Connection(sqlite3* handle, std::string display_path) : db_(handle), path_(std::move(display_path)) {}

Connection::~Connection() {
  for (auto& [sql, s] : cache_) sqlite3_finalize(s.stmt);
  sqlite3_close_v2(db_);
}

const Statement& Connection::statement(const char* sql) {
  auto it = cache_.find(sql);
  if (it != cache_.end()) return it->second;
  Statement s;
  const int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &s.stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(s.stmt);
    fail(rc, fmt::format("preparing \"{}\"", sql));
  }
  for (int i = 0, n = sqlite3_column_count(s.stmt); i < n; ++i) {
    const char* name = sqlite3_column_name(s.stmt, i);
    if (name == nullptr) {
      sqlite3_finalize(s.stmt);
      throw_db(path_, "out of memory naming the columns of a query");
    }
    if (!s.columns.emplace(name, i).second) {
      const std::string duplicate = name;  // owned by the statement
      sqlite3_finalize(s.stmt);
      throw_db(path_, fmt::format("query \"{}\" has two columns named \"{}\" (give each its own name with AS)", sql,
                                  duplicate));
    }
  }
  return cache_.emplace(sql, std::move(s)).first->second;
}

int Connection::try_exec(const char* sql) { return sqlite3_exec(db_, sql, nullptr, nullptr, nullptr); }

void Connection::exec(const char* sql) {
  const int rc = try_exec(sql);
  if (rc != SQLITE_OK) fail(rc, sql);
}

Query::Query(Connection& conn, const char* sql)
    : conn_(conn), statement_(conn.statement(sql)), stmt_(statement_.stmt) {}

int Query::index(std::string_view column) const {
  const auto it = statement_.columns.find(column);
  if (it == statement_.columns.end()) {
    std::set<std::string_view> sorted;  // by name, whatever the hash's order
    for (const auto& [name, i] : statement_.columns) sorted.insert(name);
    std::string known;
    for (const std::string_view name : sorted) known += fmt::format("{}{}", known.empty() ? "" : ", ", name);
    throw_db(conn_.path(), fmt::format("query \"{}\" has no column \"{}\" (it has: {})", sqlite3_sql(stmt_), column,
                                       known));
  }
  return it->second;
}

Query::~Query() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

Query& Query::bind(int index, int64_t value) {
  const int rc = sqlite3_bind_int64(stmt_, index, value);
  if (rc != SQLITE_OK) conn_.fail(rc, "binding a value");
  return *this;
}

Query& Query::bind(int index, double value) {
  // SQLite stores NaN as NULL; keep that explicit.
  const int rc = std::isnan(value) ? sqlite3_bind_null(stmt_, index) : sqlite3_bind_double(stmt_, index, value);
  if (rc != SQLITE_OK) conn_.fail(rc, "binding a value");
  return *this;
}

Query& Query::bind(int index, std::string_view text) {
  const int rc = sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK) conn_.fail(rc, "binding a value");
  return *this;
}

Query& Query::bind_blob(int index, const void* data, size_t size) {
  const int rc = sqlite3_bind_blob64(stmt_, index, size == 0 ? "" : data, size, SQLITE_TRANSIENT);
  if (rc != SQLITE_OK) conn_.fail(rc, "binding a value");
  return *this;
}

Query& Query::bind_null(int index) {
  const int rc = sqlite3_bind_null(stmt_, index);
  if (rc != SQLITE_OK) conn_.fail(rc, "binding a value");
  return *this;
}

bool Query::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  std::string sql = sqlite3_sql(stmt_);
  if (sql.size() > 60) sql = sql.substr(0, 57) + "...";
  conn_.fail(rc, fmt::format("running \"{}\"", sql));
}

int64_t Query::run() {
  while (step()) {
  }
  return sqlite3_changes64(conn_.get());
}

double Query::f64_at(int col) const {
  if (sqlite3_column_type(stmt_, col) == SQLITE_NULL) return std::numeric_limits<double>::quiet_NaN();
  return sqlite3_column_double(stmt_, col);
}

std::string Query::text_at(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  const int n = sqlite3_column_bytes(stmt_, col);
  return p == nullptr ? std::string() : std::string(p, static_cast<size_t>(n));
}

std::vector<char> Query::blob_at(int col) const {
  const auto* p = static_cast<const char*>(sqlite3_column_blob(stmt_, col));
  const int n = sqlite3_column_bytes(stmt_, col);
  return p == nullptr ? std::vector<char>() : std::vector<char>(p, p + n);
}

void write_transaction(Connection& conn, int attempts, const std::function<void()>& body) {
  if (attempts < 1) attempts = 1;
  for (int attempt = 1;; ++attempt) {
    const int rc = conn.try_exec("BEGIN IMMEDIATE");
    if (rc != SQLITE_OK) {
      if (is_busy(rc) && attempt < attempts) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10 * attempt));
        continue;
      }
      conn.fail(rc, fmt::format("starting a write transaction (attempt {} of {})", attempt, attempts));
    }
    try {
      body();
      conn.exec("COMMIT");
      return;
    } catch (const DbError& e) {
      // A busy statement inside the body: roll back and run the whole transaction again.
      if (!sqlite3_get_autocommit(conn.get())) conn.try_exec("ROLLBACK");
      if (e.kind() != ErrorKind::Busy || attempt >= attempts) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(10 * attempt));
    } catch (...) {
      if (!sqlite3_get_autocommit(conn.get())) conn.try_exec("ROLLBACK");
      throw;
    }
  }
}

void read_transaction(Connection& conn, const std::function<void()>& body) {
  if (!sqlite3_get_autocommit(conn.get())) {  // already inside one
    body();
    return;
  }
  conn.exec("BEGIN");
  try {
    body();
  } catch (...) {
    conn.try_exec("ROLLBACK");
    throw;
  }
  conn.exec("COMMIT");
}

std::string select_list(std::string_view alias, std::string_view table,
                        std::initializer_list<std::string_view> columns) {
  std::string out;
  for (std::string_view c : columns)
    out += fmt::format("{}{}.{} AS \"{}.{}\"", out.empty() ? "" : ", ", alias, c, table, c);
  return out;
}

std::string uri_path(const std::string& path) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : path) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '/' ||
                       c == '.' || c == '-' || c == '_' || c == '~';
    if (plain) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace dfgnn::db::detail
