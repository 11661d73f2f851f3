#include "sqlite_util.hpp"

#include "error.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>
#include <cmath>
#include <limits>
#include <thread>

namespace dfgnn::db::detail {

namespace {

// Busy inside a transaction body: rethrown as this so write_transaction can retry.
struct BusyError : Error {
  using Error::Error;
};

}  // namespace

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

void throw_sqlite(sqlite3* db, int rc, const std::string& path, std::string_view what) {
  const char* message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  // sqlite3_errmsg may describe an older error when rc came from elsewhere; add errstr if differs.
  std::string text = message != nullptr ? message : "";
  const char* generic = sqlite3_errstr(rc);
  if (generic != nullptr && text.find(generic) == std::string::npos && text != generic)
    text += fmt::format(" [{}]", generic);
  std::string full = fmt::format("tuning database {}: {}: {} (SQLite code {})", path, what, text, rc);
  if (is_busy(rc)) throw BusyError(DFGNN_STATUS_DATABASE_ERROR, full);
  throw Error(DFGNN_STATUS_DATABASE_ERROR, full);
}

void throw_db(const std::string& path, std::string_view what) {
  throw Error(DFGNN_STATUS_DATABASE_ERROR, fmt::format("tuning database {}: {}", path, what));
}

Connection::Connection(sqlite3* handle, std::string display_path) : db_(handle), path_(std::move(display_path)) {}

Connection::~Connection() {
  for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
  sqlite3_close_v2(db_);
}

sqlite3_stmt* Connection::statement(const char* sql) {
  auto it = cache_.find(sql);
  if (it != cache_.end()) return it->second;
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    fail(rc, fmt::format("preparing \"{}\"", sql));
  }
  cache_.emplace(sql, stmt);
  return stmt;
}

int Connection::try_exec(const char* sql) { return sqlite3_exec(db_, sql, nullptr, nullptr, nullptr); }

void Connection::exec(const char* sql) {
  const int rc = try_exec(sql);
  if (rc != SQLITE_OK) fail(rc, sql);
}

Query::Query(Connection& conn, const char* sql) : conn_(conn), stmt_(conn.statement(sql)) {}

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

double Query::f64(int col) const {
  if (is_null(col)) return std::numeric_limits<double>::quiet_NaN();
  return sqlite3_column_double(stmt_, col);
}

std::string Query::text(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  const int n = sqlite3_column_bytes(stmt_, col);
  return p == nullptr ? std::string() : std::string(p, static_cast<size_t>(n));
}

std::vector<char> Query::blob(int col) const {
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
    } catch (const BusyError&) {
      conn.try_exec("ROLLBACK");
      if (attempt >= attempts) throw;
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
