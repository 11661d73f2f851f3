// The tuning database's keys and ids, file checks, open and migrate. The rest of TuningDb lives in
// results.cpp, modules.cpp and maintenance.cpp (db_internal.hpp says what each holds).
#include "db_internal.hpp"

#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

namespace dfgnn::db {

namespace fs = std::filesystem;
using namespace detail;

namespace {

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

uint64_t splitmix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// ------------------------------------------------------------------ file checks

uint32_t be32(const unsigned char* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

// Cheap checks before SQLite touches the file: an existing file must start with SQLite's header
// and not be shorter than the header says (a truncated copy), unless a WAL file may complete it.
// The size and the header come from one open file: an export may rename a new snapshot over the
// path at any moment, and two lookups by path could compare one file's size with another's header.
// Never modifies anything.
void check_file(const fs::path& path, bool must_exist) {
  const std::string p = path.string();
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno != ENOENT) throw_db(p, fmt::format("cannot open the file for reading: {}", std::strerror(errno)));
    if (must_exist) throw_db(p, "file does not exist");
    return;
  }
  const struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_db(p, fmt::format("cannot read the file size: {}", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw_db(p, "not a regular file");
  const auto size = static_cast<uintmax_t>(st.st_size);
  if (size == 0) return;  // an empty file is an empty database
  std::array<unsigned char, 100> header{};
  size_t got = 0;
  while (got < header.size()) {
    const ssize_t n = ::pread(fd, header.data() + got, header.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_db(p, fmt::format("cannot read the file: {}", std::strerror(errno)));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got < header.size() || std::memcmp(header.data(), "SQLite format 3", 16) != 0)
    throw_db(p, fmt::format("not an SQLite database (bad file header: garbage or a truncated file of {} bytes); "
                            "the file was left untouched",
                            size));
  uint32_t page_size = (uint32_t(header[16]) << 8) | header[17];
  if (page_size == 1) page_size = 65536;
  if (page_size < 512 || page_size > 65536 || (page_size & (page_size - 1)) != 0)
    throw_db(p, fmt::format("corrupt SQLite header (page size {}); the file was left untouched", page_size));
  const uint32_t change_counter = be32(&header[24]);
  const uint32_t pages = be32(&header[28]);
  const uint32_t valid_for = be32(&header[92]);
  fs::path wal = path;
  wal += "-wal";
  std::error_code ec;
  const bool wal_has_frames = fs::exists(wal, ec) && fs::file_size(wal, ec) > 0 && !ec;
  if (!wal_has_frames && valid_for == change_counter && pages > 0 &&
      size < static_cast<uintmax_t>(pages) * page_size)
    throw_db(p, fmt::format("truncated file: the header says {} pages of {} bytes but the file has {} bytes; the "
                            "file was left untouched",
                            pages, page_size, size));
}

}  // namespace

namespace detail {

int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buffer[256] = {};
  if (gethostname(buffer, sizeof(buffer) - 1) != 0) return "unknown";
  return buffer;
}

std::string new_run_id() {
  std::random_device rd;
  uint64_t state = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  state ^= static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  state ^= static_cast<uint64_t>(getpid()) << 40;
  static thread_local uint64_t counter = 0;
  state += ++counter * 0x2545f4914f6cdd1dULL;
  const uint64_t a = splitmix(state) ^ ((static_cast<uint64_t>(rd()) << 32) ^ rd());
  const uint64_t b = splitmix(state);
  return hex64(a) + hex64(b);
}

sqlite3* open_handle(const std::string& name, int flags, const std::string& display) {
  sqlite3* handle = nullptr;
  const int rc = sqlite3_open_v2(name.c_str(), &handle, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = handle != nullptr ? sqlite3_errmsg(handle) : sqlite3_errstr(rc);
    sqlite3_close_v2(handle);
    throw_db(display, fmt::format("cannot open: {} (SQLite code {})", message, rc));
  }
  sqlite3_extended_result_codes(handle, 1);
  return handle;
}

const std::vector<Migration>& steps_of(const TuningDb::Options& options) {
  return options.migrations != nullptr ? *options.migrations : builtin_migrations();
}

void require_expected_schema(Connection& conn, const std::vector<Migration>& steps, const char* doing) {
  const std::vector<std::string> diffs = schema_differences(conn, steps);
  if (!diffs.empty())
    throw_db(conn.path(),
             fmt::format("{} refused: its schema differs from dfgnn's ({}); the file was left untouched (dfgnn-db "
                         "verify lists every problem)",
                         doing, joined(diffs)),
             ErrorKind::Schema);
}

}  // namespace detail

namespace {

// Reads the schema version and refuses foreign or newer files, from one consistent snapshot (another
// process may be creating the schema at this moment). A failure says which kind it is: a full or
// read-only disk is not a damaged file.
int read_checked_version(Connection& conn, int supported) {
  int version = 0;
  try {
    read_transaction(conn, [&] {
      version = read_user_version(conn);
      check_version(conn, version, supported);
    });
  } catch (const DbError& e) {
    switch (e.kind()) {
      case ErrorKind::Foreign:
      case ErrorKind::NewerSchema: throw;
      case ErrorKind::Corrupt:
      case ErrorKind::NotADatabase:
      case ErrorKind::Other:
        throw DbError(e.kind(), std::string(e.what()) + " (unreadable database; the file was left untouched)",
                      e.sqlite_code());
      default: throw DbError(e.kind(), std::string(e.what()) + " (the file was left untouched)", e.sqlite_code());
    }
  }
  return version;
}

// Switching a file to WAL needs an exclusive lock; while other processes create or open the same
// file at the same moment SQLite may answer SQLITE_BUSY at once (without its busy handler, to avoid
// deadlock), so retry with a growing pause up to the busy timeout.
void set_wal(Connection& conn, int busy_timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(busy_timeout_ms, 100));
  for (int attempt = 1;; ++attempt) {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(conn.get(), "PRAGMA journal_mode = WAL", -1, &raw, nullptr);
    std::string mode;
    if (rc == SQLITE_OK) {
      rc = sqlite3_step(raw);
      if (rc == SQLITE_ROW) {
        const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(raw, 0));
        mode = t != nullptr ? t : "";
        rc = SQLITE_OK;
      }
    }
    sqlite3_finalize(raw);
    if (rc == SQLITE_OK || rc == SQLITE_DONE) {
      if (mode != "wal")
        log_warn("tuning database {}: journal mode is \"{}\", not WAL (filesystem without shared memory?)",
                 conn.path(), mode);
      return;
    }
    if (is_busy(rc) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(attempt, 20)));
      continue;
    }
    conn.fail(rc, "setting WAL journal mode");
  }
}

}  // namespace

// ------------------------------------------------------------------ keys

std::string environment_class(const EnvironmentInfo& env) {
  return fmt::format("{}|sm_{}|{}", env.gpu_name, env.compute_capability, env.sm_count);
}

std::string fingerprint_hash(const std::string& text) { return hex64(XXH64(text.data(), text.size(), 0)); }

CandidateStat summarize_samples(std::string schedule, int32_t solver_id, const std::vector<double>& samples_ms) {
  CandidateStat c;
  c.schedule = std::move(schedule);
  c.solver_id = solver_id;
  const stats::Summary s = stats::summarize(samples_ms);
  c.count = s.count;
  c.mean_ms = s.mean;
  c.m2 = s.m2;
  c.min_ms = s.min;
  c.median_ms = s.median;
  return c;
}

// ------------------------------------------------------------------ open

void TuningDb::Impl::require_writable(const TuningDb& db) {
  if (db.read_only_) throw_db(db.path_.string(), "is open read-only (a site database); writes go to the user database");
}


TuningDb::TuningDb(fs::path path, bool read_only, Options options)
    : path_(std::move(path)), read_only_(read_only), options_(std::move(options)) {}

TuningDb::~TuningDb() = default;

std::unique_ptr<TuningDb> TuningDb::open_user(const fs::path& path, Options options) {
  const std::string p = path.string();
  if (p.empty()) throw_db("(empty path)", "no path given");
  if (path.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    if (ec) throw_db(p, fmt::format("cannot create directory {}: {}", path.parent_path().string(), ec.message()));
  }
  check_file(path, /*must_exist=*/false);
  std::unique_ptr<TuningDb> db(new TuningDb(path, false, std::move(options)));
  db->conn_ = std::make_unique<Connection>(open_handle(p, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, p), p);
  Connection& conn = *db->conn_;
  sqlite3_busy_timeout(conn.get(), db->options_.busy_timeout_ms);
  const auto& steps = steps_of(db->options_);
  const int supported = target_version(steps);
  int version = 0;
  try {
    version = read_checked_version(conn, supported);  // before anything is written
  } catch (const DbError& e) {
    // A WAL file whose -shm is gone cannot be opened where it cannot be created, and SQLite then keeps
    // ENOENT, not EROFS: a read-only directory is the cause to name.
    const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
    if (e.kind() != ErrorKind::Io || (e.sqlite_code() & 0xff) != SQLITE_CANTOPEN || access(dir.c_str(), W_OK) == 0)
      throw;
    const int why = errno;
    throw DbError(ErrorKind::ReadOnly,
                  fmt::format("{}; the cause: its directory {} is read-only ({}), and a user database writes its "
                              "-wal and -shm files there",
                              e.what(), dir.string(), std::strerror(why)),
                  e.sqlite_code());
  }
  if (version == supported) {
    check_tables(conn);
    require_expected_schema(conn, steps, "opening for writing");
  } else if (version > 0) {
    // An older file is judged against its own version's schema before the journal switch and the
    // migration write to it, so a refused file is left untouched.
    std::vector<Migration> applied;
    for (const Migration& m : steps)
      if (m.from < version) applied.push_back(m);
    require_expected_schema(conn, applied, "opening for writing");
  }
  // The file keeps its rollback journal until the migration committed: the migration is the only
  // write, and one that fails (a damaged page, a schema that does not come out as dfgnn's) rolls
  // back and leaves the file as it was, journal mode included.
  conn.exec("PRAGMA synchronous = NORMAL");
  conn.exec("PRAGMA foreign_keys = ON");
  if (version < supported) {
    const int from = version;
    version = migrate(conn, steps, db->options_.write_attempts);
    if (from != 0 && version != from) log_info("tuning database {}: migrated schema {} -> {}", p, from, version);
  }
  set_wal(conn, db->options_.busy_timeout_ms);
  db->schema_version_ = version;
  return db;
}

std::unique_ptr<TuningDb> TuningDb::open_site(const fs::path& path, Options options) {
  const std::string p = path.string();
  check_file(path, /*must_exist=*/true);
  {
    std::error_code ec;
    fs::path wal = path;
    wal += "-wal";
    if (fs::exists(wal, ec) && fs::file_size(wal, ec) > 0 && !ec)
      log_warn("tuning database {}: has a non-empty WAL file, which a read-only (immutable) open ignores; ship a "
               "snapshot made with export (dfgnn-db export) instead of a live user database",
               p);
  }
  const std::string uri = "file:" + uri_path(fs::absolute(path).string()) + "?immutable=1";
  std::unique_ptr<TuningDb> db(new TuningDb(path, true, std::move(options)));
  db->conn_ = std::make_unique<Connection>(open_handle(uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, p), p);
  const auto& steps = steps_of(db->options_);
  const int supported = target_version(steps);
  int version = read_checked_version(*db->conn_, supported);
  if (version == 0) throw_db(p, "empty file: not a tuning database");
  if (version < supported) {
    // Migrate a private in-memory copy; the file stays as it is.
    const std::string display = fmt::format("{} (schema {} migrated in memory)", p, version);
    auto mem = std::make_unique<Connection>(open_handle(":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, display),
                                            display);
    sqlite3_backup* backup = sqlite3_backup_init(mem->get(), "main", db->conn_->get(), "main");
    if (backup == nullptr) mem->fail(sqlite3_errcode(mem->get()), "copying into memory");
    const int rc = sqlite3_backup_step(backup, -1);
    sqlite3_backup_finish(backup);
    if (rc != SQLITE_DONE) db->conn_->fail(rc, "copying into memory");
    db->conn_ = std::move(mem);
    db->conn_->exec("PRAGMA foreign_keys = ON");
    version = migrate(*db->conn_, steps, 1);
    log_info("tuning database {}: read-only schema {} migrated in memory to {}", p, version, supported);
  }
  check_tables(*db->conn_);
  db->schema_version_ = version;
  return db;
}

std::unique_ptr<TuningDb> TuningDb::open_read_only(const fs::path& path, Options options) {
  std::unique_ptr<TuningDb> db = open_merge_source(path, options);
  if (!db) throw_db(path.string(), "empty file: not a tuning database");
  return db;
}

std::unique_ptr<TuningDb> TuningDb::open_merge_source(const fs::path& path, Options options) {
  const std::string p = path.string();
  check_file(path, /*must_exist=*/true);
  try {
    const std::string uri = "file:" + uri_path(fs::absolute(path).string()) + "?mode=ro";
    std::unique_ptr<TuningDb> db(new TuningDb(path, true, options));
    db->conn_ = std::make_unique<Connection>(open_handle(uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, p), p);
    sqlite3_busy_timeout(db->conn_->get(), db->options_.busy_timeout_ms);
    const int version = read_checked_version(*db->conn_, target_version(steps_of(db->options_)));
    if (version == target_version(steps_of(db->options_))) {
      check_tables(*db->conn_);
      db->schema_version_ = version;
      return db;
    }
    if (version == 0) return nullptr;  // and no tables (read_checked_version refuses tables without a version)
  } catch (const DbError& e) {
    if (e.kind() == ErrorKind::Foreign || e.kind() == ErrorKind::NewerSchema) throw;
    log_debug("tuning database {}: read-only open with locking failed ({}); trying immutable", p, e.what());
  }
  return open_site(path, std::move(options));
}

}  // namespace dfgnn::db
