#include "tuning_db.hpp"

#include "db_error.hpp"
#include "schema.hpp"
#include "sqlite_util.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <signal.h>

namespace dfgnn::db {

namespace fs = std::filesystem;
using detail::Connection;
using detail::Query;
using detail::RowReader;
using detail::throw_db;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ------------------------------------------------------------------ logging

spdlog::logger* logger() { return detail::db_logger(); }

template <typename... Args>
void log_warn(fmt::format_string<Args...> format, Args&&... args) {
  if (auto* l = logger()) l->warn(format, std::forward<Args>(args)...);
}
template <typename... Args>
void log_debug(fmt::format_string<Args...> format, Args&&... args) {
  if (auto* l = logger()) l->debug(format, std::forward<Args>(args)...);
}
template <typename... Args>
void log_info(fmt::format_string<Args...> format, Args&&... args) {
  if (auto* l = logger()) l->info(format, std::forward<Args>(args)...);
}

// ------------------------------------------------------------------ small helpers

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buffer[256] = {};
  if (gethostname(buffer, sizeof(buffer) - 1) != 0) return "unknown";
  return buffer;
}

uint64_t splitmix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// 128 random bits (random_device mixed with time and pid, so forked children differ).
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

bool finite_nonneg(double x) { return std::isfinite(x) && x >= 0.0; }

// Plausible measurements: nothing a GPU launches takes under a nanosecond, no tuned pass a day;
// a per-candidate sample count beyond 1e9 is not a measurement either (and keeps pooled sums of
// counts far from overflow).
constexpr double kMinTimeMs = 1e-6, kMaxTimeMs = 8.64e7;
constexpr int64_t kMaxCount = 1'000'000'000;

// "" or why a mean / median / minimum (ms) and spread (M2 or variance) cannot be a measurement.
std::string check_times(double mean, double median, double min, double spread, const char* spread_name) {
  const std::pair<const char*, double> times[] = {{"mean", mean}, {"median", median}, {"min", min}};
  for (const auto& [name, value] : times)
    if (!(value >= kMinTimeMs && value <= kMaxTimeMs))
      return fmt::format("{} {} ms is not a plausible time (finite, {} to {} ms)", name, value, kMinTimeMs, kMaxTimeMs);
  if (!finite_nonneg(spread)) return fmt::format("{} {} is not finite and non-negative", spread_name, spread);
  constexpr double kRounding = 1 + 1e-9;  // pooling rounds the mean
  if (min > mean * kRounding || min > median * kRounding)
    return fmt::format("min {} ms exceeds the mean {} ms or the median {} ms", min, mean, median);
  return {};
}

// "" or why text given to be stored is unfit (see detail::unprintable), naming the field.
std::string check_text(const char* field, const std::string& text) {
  if (std::string why = detail::unprintable(text); !why.empty()) return fmt::format("{}: {}", field, why);
  return {};
}

std::string op_text(const OpKey& op) {
  return fmt::format("model={} dtype={} heads={} dim={} direction={} key_bits={}", op.model, op.dtype, op.heads, op.dim,
                     op.direction, op.key_bits);
}

// Checks a stored fingerprint as far as the database can: a text that hashes to the stored hash.
// What the text says is the validator's to judge. Returns "" or the problem.
std::string check_fingerprint(const std::string& text, const std::string& hash) {
  if (text.empty()) return "fingerprint text is empty";
  if (fingerprint_hash(text) != hash) return "fingerprint hash does not match its text";
  return {};
}

std::string call_validator(const RowValidator& validator, const TuningResult& r) {
  if (!validator) return {};
  try {
    return validator(r);
  } catch (const std::exception& e) {
    return std::string("validator threw: ") + e.what();
  } catch (...) {
    return "validator threw";
  }
}

// The winner's statistics of a result row (pooled over runs).
std::string check_stats(const ScheduleStats& s) {
  if (s.count < 1) return fmt::format("statistics: count {} < 1", s.count);
  if (std::string why = check_times(s.mean_ms, s.median_ms, s.min_ms, s.variance, "variance"); !why.empty())
    return "statistics: " + why;
  return {};
}

// One candidate's statistics of one run: what put_result accepts, merge imports, pooling uses
// and verify expects of every candidate row.
std::string check_candidate(const CandidateStat& c) {
  if (c.schedule.empty()) return "empty schedule text";
  if (std::string why = check_text("schedule", c.schedule); !why.empty()) return "candidate " + why;
  if (c.solver_id < 1) return fmt::format("candidate {}: solver id {} is not a solver id (>= 1)", c.schedule, c.solver_id);
  if (c.count < 1 || c.count > kMaxCount)
    return fmt::format("candidate {}: count {} is not a sample count (1 to {})", c.schedule, c.count, kMaxCount);
  if (std::string why = check_times(c.mean_ms, c.median_ms, c.min_ms, c.m2, "m2"); !why.empty())
    return fmt::format("candidate {}: {}", c.schedule, why);
  return {};
}

std::string check_environment(const EnvironmentInfo& e) {
  if (e.gpu_name.empty()) return "environment: empty gpu_name";
  for (const auto& [field, text] : {std::pair<const char*, const std::string&>{"gpu_name", e.gpu_name},
                                    {"library_version", e.library_version},
                                    {"template_hash", e.template_hash}})
    if (std::string why = check_text(field, text); !why.empty()) return "environment: " + why;
  if (e.compute_capability <= 0 || e.sm_count <= 0)
    return fmt::format("environment: compute capability {} / SM count {} not positive", e.compute_capability,
                       e.sm_count);
  if (e.library_version.empty() || e.template_hash.empty()) return "environment: empty library_version or template_hash";
  return {};
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

const std::vector<detail::Migration>& steps_of(const TuningDb::Options& options) {
  return options.migrations != nullptr ? *options.migrations : detail::builtin_migrations();
}

std::string joined(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

// Refuses a file whose schema objects differ from dfgnn's (an injected trigger would run on our
// writes, and a snapshot would carry it on): `doing` says what was refused.
void require_expected_schema(Connection& conn, const std::vector<detail::Migration>& steps, const char* doing) {
  const std::vector<std::string> diffs = detail::schema_differences(conn, steps);
  if (!diffs.empty())
    throw_db(conn.path(),
             fmt::format("{} refused: its schema differs from dfgnn's ({}); the file was left untouched (dfgnn-db "
                         "verify lists every problem)",
                         doing, joined(diffs)),
             ErrorKind::Schema);
}

// Reads the schema version and refuses foreign or newer files, from one consistent snapshot (another
// process may be creating the schema at this moment). A failure says which kind it is: a full or
// read-only disk is not a damaged file.
int read_checked_version(Connection& conn, int supported) {
  int version = 0;
  try {
    detail::read_transaction(conn, [&] {
      version = detail::read_user_version(conn);
      detail::check_version(conn, version, supported);
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
    if (detail::is_busy(rc) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(attempt, 20)));
      continue;
    }
    conn.fail(rc, "setting WAL journal mode");
  }
}

// ------------------------------------------------------------------ row decoding

// Columns of a results row with its fingerprint and environment (LEFT JOINs so broken references
// can be reported).
#define DFGNN_RESULT_SELECT                                                                                   \
  "SELECT r.id, r.env_class, r.template_hash, r.library_version, r.model, r.dtype, r.heads, r.dim, "          \
  "r.direction, r.key_bits, f.hash, f.bucket_key, f.text, r.solver_id, r.schedule, r.count, r.median_ms, "     \
  "r.mean_ms, r.variance, r.min_ms, r.default_schedule, r.default_median_ms, r.runner_up_schedule, "          \
  "r.runner_up_median_ms, r.runs, r.host, r.unix_time, r.tool_version, r.environment_id, e.env_class, "       \
  "e.gpu_name, e.compute_capability, e.sm_count, e.driver_version, e.nvrtc_version, e.library_version, "      \
  "e.template_hash, e.id "                                                                                    \
  "FROM results r LEFT JOIN fingerprints f ON f.id = r.fingerprint_id "                                       \
  "LEFT JOIN environments e ON e.id = r.environment_id "

// The six OpKey columns (model, dtype, heads, dim, direction, key_bits) starting at column `first`.
OpKey read_op_key(RowReader& in, int first) {
  return OpKey{in.int32(first, "model"),     in.int32(first + 1, "dtype"),     in.int32(first + 2, "heads"),
               in.int32(first + 3, "dim"),   in.int32(first + 4, "direction"), in.int32(first + 5, "key_bits")};
}

// Decodes the current row of a DFGNN_RESULT_SELECT query and checks it; returns "" or the reason
// it must not be used. Dispatch (find_exact, candidates_for) and verify both judge a result row
// here, so no row that verify rejects is ever used.
std::string decode_result(const Query& q, const std::string& source, const RowValidator& validator,
                          TuningResult& r) {
  r = TuningResult{};
  RowReader in(q);
  r.id = in.integer(0, "results.id");
  r.env_class = in.text(1, "results.env_class");
  r.template_hash = in.text(2, "results.template_hash");
  r.library_version = in.text(3, "results.library_version");
  r.op = read_op_key(in, 4);
  r.fingerprint_hash = in.text(10, "fingerprints.hash");
  r.bucket_key = in.text(11, "fingerprints.bucket_key");
  const bool has_fp = !q.is_null(12);
  r.fingerprint_text = in.text(12, "fingerprints.text");
  r.solver_id = in.int32(13, "results.solver_id");
  const bool has_schedule = !q.is_null(14);
  r.schedule = in.text(14, "results.schedule");
  r.stats.count = in.integer(15, "results.count");
  r.stats.median_ms = in.real(16, "results.median_ms");
  r.stats.mean_ms = in.real(17, "results.mean_ms");
  r.stats.variance = in.real(18, "results.variance");
  r.stats.min_ms = in.real(19, "results.min_ms");
  r.default_schedule = in.text(20, "results.default_schedule");
  r.default_median_ms = in.real(21, "results.default_median_ms");
  r.runner_up_schedule = in.text(22, "results.runner_up_schedule");
  r.runner_up_median_ms = in.real(23, "results.runner_up_median_ms");
  r.runs = in.integer(24, "results.runs");
  r.host = in.text(25, "results.host");
  r.unix_time = in.integer(26, "results.unix_time");
  r.tool_version = in.text(27, "results.tool_version");
  r.environment_id = in.integer(28, "results.environment_id");
  const bool has_env = !q.is_null(37);
  const std::string env_row_class = in.text(29, "environments.env_class");
  r.environment.gpu_name = in.text(30, "environments.gpu_name");
  r.environment.compute_capability = in.int32(31, "environments.compute_capability");
  r.environment.sm_count = in.int32(32, "environments.sm_count");
  r.environment.driver_version = in.int32(33, "environments.driver_version");
  r.environment.nvrtc_version = in.int32(34, "environments.nvrtc_version");
  r.environment.library_version = in.text(35, "environments.library_version");
  r.environment.template_hash = in.text(36, "environments.template_hash");
  r.source = source;

  // The key (with its fingerprint) first: a write recomputes a broken row from its runs.
  if (!has_fp) return "fingerprint row is missing";
  if (std::string why = check_fingerprint(r.fingerprint_text, r.fingerprint_hash); !why.empty()) return why;
  if (!in.problem().empty()) return in.problem();
  if (!has_schedule || r.schedule.empty()) return "no eligible candidate (no winner)";
  if (!has_env) return "environment row is missing";
  const std::string computed = environment_class(r.environment);
  if (computed != r.env_class || env_row_class != r.env_class)
    return fmt::format("environment class mismatch: the row says \"{}\", its environment is \"{}\"", r.env_class,
                       computed);
  if (r.environment.template_hash != r.template_hash || r.environment.library_version != r.library_version)
    return "build stamp of the row and of its environment differ";
  if (r.op.heads < 1 || r.op.dim < 1) return fmt::format("op key out of range ({})", op_text(r.op));
  if (r.runs < 1) return "no measurement runs";
  if (r.solver_id < 1) return fmt::format("solver id {} is not a solver id (>= 1)", r.solver_id);
  if (std::string why = check_stats(r.stats); !why.empty()) return why;
  if (std::string why = call_validator(validator, r); !why.empty()) return "rejected by validator: " + why;
  return {};
}

std::string describe(const TuningResult& r) {
  return fmt::format("[{} | {} | fingerprint {} | template {} | library {}]", r.env_class, op_text(r.op),
                     r.fingerprint_hash, r.template_hash, r.library_version);
}

// Whether a row's build stamp / class answers a query for `current`.
bool matches_current(const TuningResult& r, const std::string& current_class, const EnvironmentInfo& current) {
  if (r.env_class != current_class) return false;
  if (!current.template_hash.empty() && r.template_hash != current.template_hash) return false;
  if (!current.library_version.empty() && r.library_version != current.library_version) return false;
  return true;
}

// ------------------------------------------------------------------ pooling and the winner

// The candidate_stats columns schedule, solver_id, count, mean_ms, m2, min_ms, median_ms from `first`.
CandidateStat read_candidate(RowReader& in, int first) {
  CandidateStat c;
  c.schedule = in.text(first, "candidate_stats.schedule");
  c.solver_id = in.int32(first + 1, "candidate_stats.solver_id");
  c.count = in.integer(first + 2, "candidate_stats.count");
  c.mean_ms = in.real(first + 3, "candidate_stats.mean_ms");
  c.m2 = in.real(first + 4, "candidate_stats.m2");
  c.min_ms = in.real(first + 5, "candidate_stats.min_ms");
  c.median_ms = in.real(first + 6, "candidate_stats.median_ms");
  return c;
}

struct Pooled {
  CandidateStat stat;
  int64_t latest_time = std::numeric_limits<int64_t>::min();
  std::string latest_uuid;
};

struct RunInfo {
  std::string uuid;
  int64_t unix_time = 0;
  std::string host, tool_version, default_schedule;
  int64_t environment_id = 0;
};

bool later(int64_t t1, const std::string& u1, int64_t t2, const std::string& u2) {
  return t1 != t2 ? t1 > t2 : u1 > u2;
}

// Per schedule: statistics pooled over runs in run-id order (Chan et al.), min over runs, median
// the count-weighted mean of the runs' medians, solver id of the most recent run. Rows with broken
// statistics are skipped.
std::vector<Pooled> pool_candidates(Connection& conn, int64_t result_id) {
  std::vector<Pooled> out;
  Query q(conn,
          "SELECT cs.schedule, cs.solver_id, cs.count, cs.mean_ms, cs.m2, cs.min_ms, cs.median_ms, r.uuid, "
          "r.unix_time FROM candidate_stats cs JOIN runs r ON r.id = cs.run_id WHERE r.result_id = ?1 "
          "ORDER BY cs.schedule, r.uuid");
  q.bind(1, result_id);
  while (q.step()) {
    RowReader in(q);
    const CandidateStat c = read_candidate(in, 0);
    const std::string uuid = in.text(7, "runs.uuid");
    const int64_t time = in.integer(8, "runs.unix_time");
    if (!in.problem().empty() || !check_candidate(c).empty()) continue;
    if (out.empty() || out.back().stat.schedule != c.schedule) {
      Pooled p;
      p.stat = c;
      p.latest_time = time;
      p.latest_uuid = uuid;
      out.push_back(std::move(p));
      continue;
    }
    Pooled& p = out.back();
    CandidateStat& a = p.stat;
    stats::Summary pooled = a.summary();
    pooled.pool(c.summary());
    a.median_ms += (c.median_ms - a.median_ms) * static_cast<double>(c.count) / static_cast<double>(pooled.count);
    a.count = pooled.count;
    a.mean_ms = pooled.mean;
    a.m2 = pooled.m2;
    a.min_ms = pooled.min;
    if (later(time, uuid, p.latest_time, p.latest_uuid)) {
      p.latest_time = time;
      p.latest_uuid = uuid;
      a.solver_id = c.solver_id;
    }
  }
  return out;
}

std::vector<RunInfo> runs_of(Connection& conn, int64_t result_id) {
  std::vector<RunInfo> out;
  Query q(conn,
          "SELECT uuid, unix_time, host, tool_version, default_schedule, environment_id FROM runs "
          "WHERE result_id = ?1 ORDER BY uuid");
  q.bind(1, result_id);
  while (q.step()) out.push_back(RunInfo{q.text(0), q.i64(1), q.text(2), q.text(3), q.text(4), q.i64(5)});
  return out;
}

ScheduleStats to_stats(const CandidateStat& c) {
  return ScheduleStats{c.count, c.median_ms, c.mean_ms, c.variance(), c.min_ms};
}

struct Winner {
  bool has_runs = false;
  RunInfo latest;
  int64_t runs = 0;
  std::optional<CandidateStat> winner, runner_up;
  double default_median_ms = kNaN;
};

// The problem key of a result row as a TuningResult (for the validator), or "" + reason.
std::string result_key_view(Connection& conn, int64_t result_id, TuningResult& view) {
  Query q(conn, DFGNN_RESULT_SELECT "WHERE r.id = ?1");
  q.bind(1, result_id);
  if (!q.step()) return "no such result";
  decode_result(q, conn.path(), {}, view);
  if (std::string why = check_fingerprint(view.fingerprint_text, view.fingerprint_hash); !why.empty())
    return "fingerprint of the result: " + why;
  return {};
}

Winner compute_winner(Connection& conn, int64_t result_id, const RowValidator& validator, const WinnerPolicy& policy) {
  Winner w;
  const std::vector<RunInfo> runs = runs_of(conn, result_id);
  if (runs.empty()) return w;
  w.has_runs = true;
  w.runs = static_cast<int64_t>(runs.size());
  w.latest = runs.front();
  for (const RunInfo& r : runs)
    if (later(r.unix_time, r.uuid, w.latest.unix_time, w.latest.uuid)) w.latest = r;

  const std::vector<Pooled> pooled = pool_candidates(conn, result_id);
  TuningResult view;
  const bool have_view = result_key_view(conn, result_id, view).empty();
  if (have_view) {
    Query e(conn,
            "SELECT gpu_name, compute_capability, sm_count, driver_version, nvrtc_version, library_version, "
            "template_hash FROM environments WHERE id = ?1");
    e.bind(1, w.latest.environment_id);
    if (e.step())
      view.environment = EnvironmentInfo{e.text(0), static_cast<int32_t>(e.i64(1)), static_cast<int32_t>(e.i64(2)),
                                         static_cast<int32_t>(e.i64(3)), static_cast<int32_t>(e.i64(4)), e.text(5),
                                         e.text(6)};
    view.environment_id = w.latest.environment_id;
    view.host = w.latest.host;
    view.unix_time = w.latest.unix_time;
    view.tool_version = w.latest.tool_version;
    view.runs = w.runs;
    view.default_schedule = w.latest.default_schedule;
  }
  std::vector<const CandidateStat*> eligible;
  const CandidateStat* def = nullptr;
  for (const Pooled& p : pooled) {
    const CandidateStat& c = p.stat;
    if (c.schedule == w.latest.default_schedule) w.default_median_ms = c.median_ms;
    if (c.count < policy.min_count) continue;
    if (validator) {
      if (!have_view) continue;
      view.solver_id = c.solver_id;
      view.schedule = c.schedule;
      view.stats = to_stats(c);
      if (std::string why = call_validator(validator, view); !why.empty()) {
        log_debug("tuning database {}: candidate {} of result {} not eligible: {}", conn.path(), c.schedule,
                  result_id, why);
        continue;
      }
    }
    eligible.push_back(&c);
    if (c.schedule == w.latest.default_schedule) def = &c;
  }
  if (eligible.empty()) return w;
  // Best first, so that the runner-up is the first other than the winner.
  std::sort(eligible.begin(), eligible.end(), [](const CandidateStat* a, const CandidateStat* b) {
    return a->median_ms != b->median_ms ? a->median_ms < b->median_ms : a->schedule < b->schedule;
  });
  std::vector<stats::Named> named;
  std::size_t def_index = stats::Choice::npos;
  for (const CandidateStat* c : eligible) {
    if (c == def) def_index = named.size();
    named.push_back({c->schedule, c->summary()});
  }
  const CandidateStat* winner = eligible[stats::choose_winner(named, def_index, policy.tie).winner];
  w.winner = *winner;
  for (const CandidateStat* c : eligible)
    if (c != winner) {
      w.runner_up = *c;
      break;
    }
  return w;
}

// Writes the derived columns of a result from its runs; deletes it when it has none. Returns
// false if it was deleted.
bool store_winner(Connection& conn, int64_t result_id, const Winner& w) {
  if (!w.has_runs) {
    Query d(conn, "DELETE FROM results WHERE id = ?1");
    d.bind(1, result_id).run();
    return false;
  }
  Query u(conn,
          "UPDATE results SET solver_id = ?2, schedule = ?3, count = ?4, median_ms = ?5, mean_ms = ?6, "
          "variance = ?7, min_ms = ?8, default_schedule = ?9, default_median_ms = ?10, runner_up_schedule = ?11, "
          "runner_up_median_ms = ?12, runs = ?13, host = ?14, unix_time = ?15, tool_version = ?16, "
          "environment_id = ?17 WHERE id = ?1");
  u.bind(1, result_id);
  if (w.winner) {
    const ScheduleStats s = to_stats(*w.winner);
    u.bind(2, w.winner->solver_id).bind(3, w.winner->schedule).bind(4, s.count).bind(5, s.median_ms);
    u.bind(6, s.mean_ms).bind(7, s.variance).bind(8, s.min_ms);
  } else {
    for (int i = 2; i <= 8; ++i) u.bind_null(i);
  }
  u.bind(9, w.latest.default_schedule).bind(10, w.default_median_ms);
  if (w.runner_up)
    u.bind(11, w.runner_up->schedule).bind(12, w.runner_up->median_ms);
  else
    u.bind_null(11).bind_null(12);
  u.bind(13, w.runs).bind(14, w.latest.host).bind(15, w.latest.unix_time).bind(16, w.latest.tool_version);
  u.bind(17, w.latest.environment_id);
  u.run();
  return true;
}

// ------------------------------------------------------------------ upserts

int64_t upsert_environment(Connection& conn, const EnvironmentInfo& e) {
  Query ins(conn,
            "INSERT INTO environments (env_class, gpu_name, compute_capability, sm_count, driver_version, "
            "nvrtc_version, library_version, template_hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) "
            "ON CONFLICT DO NOTHING");
  ins.bind(1, environment_class(e)).bind(2, e.gpu_name).bind(3, e.compute_capability).bind(4, e.sm_count);
  ins.bind(5, e.driver_version).bind(6, e.nvrtc_version).bind(7, e.library_version).bind(8, e.template_hash);
  ins.run();
  Query sel(conn,
            "SELECT id FROM environments WHERE gpu_name = ?1 AND compute_capability = ?2 AND sm_count = ?3 AND "
            "driver_version = ?4 AND nvrtc_version = ?5 AND library_version = ?6 AND template_hash = ?7");
  sel.bind(1, e.gpu_name).bind(2, e.compute_capability).bind(3, e.sm_count).bind(4, e.driver_version);
  sel.bind(5, e.nvrtc_version).bind(6, e.library_version).bind(7, e.template_hash);
  if (!sel.step()) throw_db(conn.path(), "environment row vanished after insert");
  return sel.i64(0);
}

int64_t upsert_fingerprint(Connection& conn, const std::string& hash, const std::string& bucket,
                           const std::string& text) {
  Query ins(conn, "INSERT INTO fingerprints (hash, bucket_key, text) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING");
  ins.bind(1, hash).bind(2, bucket).bind(3, text).run();
  Query sel(conn, "SELECT id, text FROM fingerprints WHERE hash = ?1");
  sel.bind(1, hash);
  if (!sel.step()) throw_db(conn.path(), "fingerprint row vanished after insert");
  if (sel.text(1) != text)
    throw_db(conn.path(), fmt::format("fingerprint hash {} is stored with a different text (collision or a "
                                      "tampered row); run verify",
                                      hash));
  return sel.i64(0);
}

struct ProblemKey {
  std::string env_class, template_hash, library_version;
  OpKey op;
  int64_t fingerprint_id = 0;
};

int64_t upsert_result(Connection& conn, const ProblemKey& k) {
  Query ins(conn,
            "INSERT INTO results (env_class, template_hash, library_version, model, dtype, heads, dim, direction, "
            "key_bits, fingerprint_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) ON CONFLICT DO NOTHING");
  ins.bind(1, k.env_class).bind(2, k.template_hash).bind(3, k.library_version).bind(4, k.op.model);
  ins.bind(5, k.op.dtype).bind(6, k.op.heads).bind(7, k.op.dim).bind(8, k.op.direction).bind(9, k.op.key_bits);
  ins.bind(10, k.fingerprint_id).run();
  Query sel(conn,
            "SELECT id FROM results WHERE env_class = ?1 AND template_hash = ?2 AND library_version = ?3 AND "
            "model = ?4 AND dtype = ?5 AND heads = ?6 AND dim = ?7 AND direction = ?8 AND key_bits = ?9 AND "
            "fingerprint_id = ?10");
  sel.bind(1, k.env_class).bind(2, k.template_hash).bind(3, k.library_version).bind(4, k.op.model);
  sel.bind(5, k.op.dtype).bind(6, k.op.heads).bind(7, k.op.dim).bind(8, k.op.direction).bind(9, k.op.key_bits);
  sel.bind(10, k.fingerprint_id);
  if (!sel.step()) throw_db(conn.path(), "result row vanished after insert");
  return sel.i64(0);
}

// Inserts a run unless its id is present. Returns the new run row id, or 0 if it was present
// (for the same problem; a run id reused for another problem is an error).
int64_t insert_run(Connection& conn, int64_t result_id, int64_t environment_id, const std::string& uuid,
                   const std::string& default_schedule, const std::string& host, int64_t unix_time,
                   const std::string& tool_version) {
  Query ins(conn,
            "INSERT INTO runs (uuid, result_id, environment_id, default_schedule, host, unix_time, tool_version) "
            "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (uuid) DO NOTHING");
  ins.bind(1, uuid).bind(2, result_id).bind(3, environment_id).bind(4, default_schedule).bind(5, host);
  ins.bind(6, unix_time).bind(7, tool_version);
  if (ins.run() == 1) return sqlite3_last_insert_rowid(conn.get());
  Query sel(conn, "SELECT result_id FROM runs WHERE uuid = ?1");
  sel.bind(1, uuid);
  if (sel.step() && sel.i64(0) != result_id)
    throw DbError(ErrorKind::InvalidArgument,
                fmt::format("tuning database {}: run id {} is already used for a different problem", conn.path(), uuid));
  return 0;
}

void insert_candidate(Connection& conn, int64_t run_id, const CandidateStat& c) {
  Query ins(conn,
            "INSERT INTO candidate_stats (run_id, schedule, solver_id, count, mean_ms, m2, min_ms, median_ms) "
            "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  ins.bind(1, run_id).bind(2, c.schedule).bind(3, c.solver_id).bind(4, c.count).bind(5, c.mean_ms);
  ins.bind(6, c.m2).bind(7, c.min_ms).bind(8, c.median_ms).run();
}

std::optional<TuningResult> load_valid(Connection& conn, int64_t result_id, const RowValidator& validator) {
  Query q(conn, DFGNN_RESULT_SELECT "WHERE r.id = ?1");
  q.bind(1, result_id);
  if (!q.step()) return std::nullopt;
  TuningResult r;
  if (std::string why = decode_result(q, conn.path(), validator, r); !why.empty()) {
    log_debug("tuning database {}: result {} {} has no usable winner: {}", conn.path(), result_id, describe(r), why);
    return std::nullopt;
  }
  return r;
}

// ------------------------------------------------------------------ modules

std::string lowered_json(const ModuleRecord& m) {
  nlohmann::json j = nlohmann::json::array();
  for (size_t i = 0; i < m.names.size(); ++i) j.push_back({m.names[i], m.lowered[i]});
  return j.dump();
}

// "" or the problem.
std::string decode_lowered(const std::string& text, ModuleRecord& m) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array()) return "lowered names are not a JSON array";
  m.names.clear();
  m.lowered.clear();
  for (const auto& pair : j) {
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string())
      return "lowered names: an entry is not a [name, lowered] pair of strings";
    m.names.push_back(pair[0].get<std::string>());
    m.lowered.push_back(pair[1].get<std::string>());
  }
  return {};
}

#define DFGNN_MODULE_SELECT "SELECT key, image, lowered_names, arch, nvrtc_version, template_hash, created FROM modules "

std::string decode_module(const Query& q, ModuleRecord& m) {
  m = ModuleRecord{};
  RowReader in(q);
  m.key = in.text(0, "modules.key");
  if (q.column_type(1) != SQLITE_BLOB) return "image is not a blob";
  m.image = q.blob(1);
  const std::string lowered = in.text(2, "modules.lowered_names");
  m.arch = in.int32(3, "modules.arch");
  m.nvrtc_version = in.int32(4, "modules.nvrtc_version");
  m.template_hash = in.text(5, "modules.template_hash");
  m.created = in.integer(6, "modules.created");
  if (!in.problem().empty()) return in.problem();
  if (m.key.empty()) return "empty key";
  if (m.image.empty()) return "empty image";
  if (std::string why = decode_lowered(lowered, m); !why.empty()) return why;
  if (m.names.empty()) return "no kernel names";
  for (size_t i = 0; i < m.names.size(); ++i)  // JSON escapes could have hidden control characters
    if (std::string why = detail::unprintable(m.names[i] + m.lowered[i]); !why.empty())
      return "lowered names: " + why;
  return {};
}

void insert_module(Connection& conn, const ModuleRecord& m, int64_t& added) {
  Query ins(conn,
            "INSERT INTO modules (key, image, lowered_names, arch, nvrtc_version, template_hash, created) "
            "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (key) DO NOTHING");
  ins.bind(1, m.key).bind_blob(2, m.image.data(), m.image.size()).bind(3, lowered_json(m)).bind(4, m.arch);
  ins.bind(5, m.nvrtc_version).bind(6, m.template_hash).bind(7, m.created != 0 ? m.created : now_unix());
  added += ins.run();
}

}  // namespace

// ================================================================== free functions

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

// ================================================================== TuningDb

struct TuningDb::Impl {
  static Connection& conn(TuningDb& db) { return *db.conn_; }

  static void require_writable(TuningDb& db) {
    if (db.read_only_) throw_db(db.path_.string(), "is open read-only (a site database); writes go to the user database");
  }
};

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
  const int supported = detail::target_version(steps);
  int version = read_checked_version(conn, supported);  // before anything is written
  if (version == supported) {
    detail::check_tables(conn);
    require_expected_schema(conn, steps, "opening for writing");
  } else if (version > 0) {
    // An older file is judged against its own version's schema before the journal switch and the
    // migration write to it, so a refused file is left untouched.
    std::vector<detail::Migration> applied;
    for (const detail::Migration& m : steps)
      if (m.from < version) applied.push_back(m);
    require_expected_schema(conn, applied, "opening for writing");
  }
  // An older file keeps its rollback journal until its migration committed: a migration that fails
  // (a damaged page) rolls back and leaves the file as it was, journal mode included.
  const bool older = version > 0 && version < supported;
  if (!older) set_wal(conn, db->options_.busy_timeout_ms);
  conn.exec("PRAGMA synchronous = NORMAL");
  conn.exec("PRAGMA foreign_keys = ON");
  if (version < supported) {
    const int from = version;
    version = detail::migrate(conn, steps, db->options_.write_attempts);
    if (from != 0 && version != from) log_info("tuning database {}: migrated schema {} -> {}", p, from, version);
    detail::check_tables(conn);
    require_expected_schema(conn, steps, "opening for writing");
  }
  if (older) set_wal(conn, db->options_.busy_timeout_ms);
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
  const std::string uri = "file:" + detail::uri_path(fs::absolute(path).string()) + "?immutable=1";
  std::unique_ptr<TuningDb> db(new TuningDb(path, true, std::move(options)));
  db->conn_ = std::make_unique<Connection>(open_handle(uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, p), p);
  const auto& steps = steps_of(db->options_);
  const int supported = detail::target_version(steps);
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
    version = detail::migrate(*db->conn_, steps, 1);
    log_info("tuning database {}: read-only schema {} migrated in memory to {}", p, version, supported);
  }
  detail::check_tables(*db->conn_);
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
    const std::string uri = "file:" + detail::uri_path(fs::absolute(path).string()) + "?mode=ro";
    std::unique_ptr<TuningDb> db(new TuningDb(path, true, options));
    db->conn_ = std::make_unique<Connection>(open_handle(uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, p), p);
    sqlite3_busy_timeout(db->conn_->get(), db->options_.busy_timeout_ms);
    const int version = read_checked_version(*db->conn_, detail::target_version(steps_of(db->options_)));
    if (version == detail::target_version(steps_of(db->options_))) {
      detail::check_tables(*db->conn_);
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

std::optional<TuningResult> TuningDb::put_result(const TuningRun& run_in) {
  std::lock_guard lock(mutex_);
  Impl::require_writable(*this);
  TuningRun run = run_in;
  auto invalid = [&](const std::string& why) {
    throw DbError(ErrorKind::InvalidArgument, fmt::format("tuning database {}: put_result: {}", path_.string(), why));
  };
  if (std::string why = check_environment(run.environment); !why.empty()) invalid(why);
  if (run.op.heads < 1 || run.op.dim < 1) invalid("op key out of range: " + op_text(run.op));
  if (run.candidates.empty()) invalid("no candidates");
  std::set<std::string> seen;
  for (const CandidateStat& c : run.candidates) {
    if (std::string why = check_candidate(c); !why.empty()) invalid(why);
    if (!seen.insert(c.schedule).second) invalid("duplicate candidate " + c.schedule);
  }
  const std::string& text = run.fingerprint.text;
  const std::string& bucket = run.fingerprint.bucket_key;
  if (text.empty() || bucket.empty()) invalid("fingerprint text and bucket key must not be empty");
  const std::string hash = fingerprint_hash(text);
  if (run.host.empty()) run.host = host_name();
  if (run.unix_time == 0) run.unix_time = now_unix();
  if (run.tool_version.empty()) run.tool_version = run.environment.library_version;
  if (run.run_id.empty()) run.run_id = new_run_id();
  for (const auto& [field, text] : {std::pair<const char*, const std::string&>{"host", run.host},
                                    {"tool_version", run.tool_version},
                                    {"run_id", run.run_id},
                                    {"default_schedule", run.default_schedule},
                                    {"fingerprint text", text},
                                    {"fingerprint bucket key", bucket}})
    if (std::string why = check_text(field, text); !why.empty()) invalid(why);

  Connection& conn = *conn_;
  int64_t result_id = 0;
  detail::write_transaction(conn, options_.write_attempts, [&] {
    const int64_t env_id = upsert_environment(conn, run.environment);
    const int64_t fp_id = upsert_fingerprint(conn, hash, bucket, text);
    result_id = upsert_result(conn, ProblemKey{environment_class(run.environment), run.environment.template_hash,
                                               run.environment.library_version, run.op, fp_id});
    const int64_t run_row = insert_run(conn, result_id, env_id, run.run_id, run.default_schedule, run.host,
                                       run.unix_time, run.tool_version);
    if (run_row == 0) return;  // this run is already recorded
    for (const CandidateStat& c : run.candidates) insert_candidate(conn, run_row, c);
    store_winner(conn, result_id, compute_winner(conn, result_id, options_.validator, options_.policy));
  });
  return load_valid(conn, result_id, options_.validator);
}

std::optional<TuningResult> TuningDb::find_exact(const EnvironmentInfo& current, const OpKey& op,
                                                 const std::string& fp_hash) {
  std::lock_guard lock(mutex_);
  Connection& conn = *conn_;
  const std::string cls = environment_class(current);
  std::optional<TuningResult> found;
  detail::read_transaction(conn, [&] {
    Query q(conn, DFGNN_RESULT_SELECT
            "WHERE r.env_class = ?1 AND r.model = ?2 AND r.dtype = ?3 AND r.heads = ?4 AND r.dim = ?5 AND "
            "r.direction = ?6 AND r.key_bits = ?7 AND f.hash = ?8 ORDER BY r.unix_time DESC, r.id");
    q.bind(1, cls).bind(2, op.model).bind(3, op.dtype).bind(4, op.heads).bind(5, op.dim).bind(6, op.direction);
    q.bind(7, op.key_bits).bind(8, fp_hash);
    while (q.step()) {
      TuningResult r;
      const std::string why = decode_result(q, path_.string(), options_.validator, r);
      if (!matches_current(r, cls, current)) {
        log_debug("tuning database {}: stale result {} for build template {} library {} (current: {} {}); miss",
                  path_.string(), r.id, r.template_hash, r.library_version, current.template_hash,
                  current.library_version);
        continue;
      }
      if (!why.empty()) {
        log_warn("tuning database {}: result {} {} rejected: {}", path_.string(), r.id, describe(r), why);
        continue;
      }
      found = std::move(r);
      return;
    }
  });
  return found;
}

std::vector<TuningResult> TuningDb::candidates_for(const EnvironmentInfo& current, const OpKey& op,
                                                   const std::optional<std::string>& bucket_key) {
  std::lock_guard lock(mutex_);
  Connection& conn = *conn_;
  const std::string cls = environment_class(current);
  std::vector<TuningResult> out;
  detail::read_transaction(conn, [&] {
    Query q(conn, DFGNN_RESULT_SELECT
            "WHERE r.env_class = ?1 AND r.model = ?2 AND r.dtype = ?3 AND r.heads = ?4 AND r.dim = ?5 AND "
            "r.direction = ?6 AND r.key_bits = ?7 AND (?8 IS NULL OR f.bucket_key = ?8) "
            "ORDER BY f.hash, r.unix_time DESC, r.id");
    q.bind(1, cls).bind(2, op.model).bind(3, op.dtype).bind(4, op.heads).bind(5, op.dim).bind(6, op.direction);
    q.bind(7, op.key_bits);
    if (bucket_key)
      q.bind(8, *bucket_key);
    else
      q.bind_null(8);
    while (q.step()) {
      TuningResult r;
      const std::string why = decode_result(q, path_.string(), options_.validator, r);
      if (!matches_current(r, cls, current)) continue;  // stale build: silently a miss
      if (!why.empty()) {
        log_warn("tuning database {}: result {} {} rejected: {}", path_.string(), r.id, describe(r), why);
        continue;
      }
      if (!out.empty() && out.back().fingerprint_hash == r.fingerprint_hash) continue;  // older build of same
      out.push_back(std::move(r));
    }
  });
  return out;
}

std::vector<CandidateStat> TuningDb::pooled_candidates(int64_t result_id) {
  std::lock_guard lock(mutex_);
  std::vector<CandidateStat> out;
  detail::read_transaction(*conn_, [&] {
    for (Pooled& p : pool_candidates(*conn_, result_id)) out.push_back(std::move(p.stat));
  });
  std::sort(out.begin(), out.end(), [](const CandidateStat& a, const CandidateStat& b) {
    return a.mean_ms != b.mean_ms ? a.mean_ms < b.mean_ms : a.schedule < b.schedule;
  });
  return out;
}

void TuningDb::put_module(const ModuleRecord& module) {
  std::lock_guard lock(mutex_);
  Impl::require_writable(*this);
  if (module.key.empty() || module.image.empty() || module.names.empty() ||
      module.names.size() != module.lowered.size())
    throw DbError(ErrorKind::InvalidArgument,
                fmt::format("tuning database {}: put_module: empty key, image or names, or names ({}) and lowered "
                            "names ({}) differ in length",
                            path_.string(), module.names.size(), module.lowered.size()));
  int64_t added = 0;
  detail::write_transaction(*conn_, options_.write_attempts, [&] { insert_module(*conn_, module, added); });
}

std::optional<ModuleRecord> TuningDb::get_module(const std::string& key, const std::string& template_hash,
                                                 int32_t nvrtc_version, int32_t arch) {
  std::lock_guard lock(mutex_);
  Query q(*conn_, DFGNN_MODULE_SELECT "WHERE key = ?1");
  q.bind(1, key);
  if (!q.step()) return std::nullopt;
  ModuleRecord m;
  if (std::string why = decode_module(q, m); !why.empty()) {
    log_warn("tuning database {}: module {} rejected: {}", path_.string(), key, why);
    return std::nullopt;
  }
  if ((!template_hash.empty() && m.template_hash != template_hash) ||
      (nvrtc_version != 0 && m.nvrtc_version != nvrtc_version) || (arch != 0 && m.arch != arch)) {
    log_warn("tuning database {}: module {} was built for template {} NVRTC {} sm_{}, not {} {} sm_{}; miss",
             path_.string(), key, m.template_hash, m.nvrtc_version, m.arch, template_hash, nvrtc_version, arch);
    return std::nullopt;
  }
  return m;
}

// ------------------------------------------------------------------ merge

namespace {

struct SourceRun {
  std::string uuid, default_schedule, host, tool_version;
  int64_t unix_time = 0;
  EnvironmentInfo env;
  std::string env_row_class, result_class, result_template, result_library;
  OpKey op;
  std::string fp_hash, fp_bucket, fp_text;
  std::vector<std::pair<CandidateStat, std::string>> candidates;  // with the row's type problem, if any
  std::string problem;  // "" if consistent
};

// Reads up to `limit` runs with uuid > after, in uuid order.
std::vector<SourceRun> read_source_runs(Connection& src, const std::string& after, int limit) {
  std::vector<SourceRun> out;
  std::map<int64_t, size_t> by_row;
  {
    Query q(src,
            "SELECT ru.id, ru.uuid, ru.default_schedule, ru.host, ru.unix_time, ru.tool_version, e.gpu_name, "
            "e.compute_capability, e.sm_count, e.driver_version, e.nvrtc_version, e.library_version, "
            "e.template_hash, e.env_class, r.env_class, r.template_hash, r.library_version, r.model, r.dtype, "
            "r.heads, r.dim, r.direction, r.key_bits, f.hash, f.bucket_key, f.text, e.id, r.id, f.id "
            "FROM runs ru LEFT JOIN results r ON r.id = ru.result_id "
            "LEFT JOIN environments e ON e.id = ru.environment_id "
            "LEFT JOIN fingerprints f ON f.id = r.fingerprint_id WHERE ru.uuid > ?1 ORDER BY ru.uuid LIMIT ?2");
    q.bind(1, after).bind(2, static_cast<int64_t>(limit));
    while (q.step()) {
      RowReader in(q);
      SourceRun s;
      s.uuid = q.text(1);  // the paging key, as stored; checked below
      s.default_schedule = in.text(2, "runs.default_schedule");
      s.host = in.text(3, "runs.host");
      s.unix_time = in.integer(4, "runs.unix_time");
      s.tool_version = in.text(5, "runs.tool_version");
      s.env = EnvironmentInfo{in.text(6, "environments.gpu_name"),
                              in.int32(7, "environments.compute_capability"),
                              in.int32(8, "environments.sm_count"),
                              in.int32(9, "environments.driver_version"),
                              in.int32(10, "environments.nvrtc_version"),
                              in.text(11, "environments.library_version"),
                              in.text(12, "environments.template_hash")};
      s.env_row_class = in.text(13, "environments.env_class");
      s.result_class = in.text(14, "results.env_class");
      s.result_template = in.text(15, "results.template_hash");
      s.result_library = in.text(16, "results.library_version");
      s.op = read_op_key(in, 17);
      s.fp_hash = in.text(23, "fingerprints.hash");
      s.fp_bucket = in.text(24, "fingerprints.bucket_key");
      s.fp_text = in.text(25, "fingerprints.text");
      in.text(1, "runs.uuid");
      if (q.is_null(26) || q.is_null(27) || q.is_null(28)) s.problem = "dangling environment, result or fingerprint";
      if (s.problem.empty()) s.problem = in.problem();
      by_row[q.i64(0)] = out.size();
      out.push_back(std::move(s));
    }
  }
  if (out.empty()) return out;
  Query c(src,
          "SELECT cs.run_id, cs.schedule, cs.solver_id, cs.count, cs.mean_ms, cs.m2, cs.min_ms, cs.median_ms "
          "FROM candidate_stats cs JOIN runs ru ON ru.id = cs.run_id WHERE ru.uuid > ?1 AND ru.uuid <= ?2 "
          "ORDER BY cs.run_id, cs.schedule");
  c.bind(1, after).bind(2, out.back().uuid);
  while (c.step()) {
    auto it = by_row.find(c.i64(0));
    if (it == by_row.end()) continue;
    RowReader in(c);
    CandidateStat stat = read_candidate(in, 1);
    out[it->second].candidates.emplace_back(std::move(stat), in.problem());
  }
  return out;
}

// "" or why a source run is unusable.
std::string check_source_run(const SourceRun& s) {
  if (!s.problem.empty()) return s.problem;
  if (s.uuid.empty()) return "empty run id";
  if (std::string why = check_environment(s.env); !why.empty()) return why;
  const std::string cls = environment_class(s.env);
  if (cls != s.env_row_class || cls != s.result_class)
    return fmt::format("environment class mismatch (result \"{}\", environment \"{}\")", s.result_class, cls);
  if (s.env.template_hash != s.result_template || s.env.library_version != s.result_library)
    return "build stamp of the result and of its environment differ";
  if (s.op.heads < 1 || s.op.dim < 1) return "op key out of range: " + op_text(s.op);
  return check_fingerprint(s.fp_text, s.fp_hash);
}

}  // namespace

// All or nothing: the source is read from one snapshot and everything is written in one
// transaction, so a failure midway (a full disk, a damaged page of the source) commits nothing and
// the error the caller gets is the whole truth.
MergeReport TuningDb::merge_from(const fs::path& other) {
  Impl::require_writable(*this);
  Options source_options;
  source_options.migrations = options_.migrations;
  std::unique_ptr<TuningDb> src = open_merge_source(other, source_options);
  MergeReport report;
  if (!src) {
    log_warn("merging {}: the file has no tuning schema (a process killed while creating it leaves such a file): "
             "nothing to merge",
             other.string());
    report.source_empty = true;
    return report;
  }
  std::lock_guard lock(mutex_);
  Connection& conn = *conn_;
  Connection& sconn = *src->conn_;
  const std::string spath = other.string();
  constexpr int kChunk = 128;  // source runs held in memory at a time
  detail::read_transaction(sconn, [&] {
    detail::write_transaction(conn, options_.write_attempts, [&] {
      report = MergeReport{};  // a retried transaction starts over
      std::set<int64_t> touched;
      std::string after;
      for (;;) {
        const std::vector<SourceRun> chunk = read_source_runs(sconn, after, kChunk);
        if (chunk.empty()) break;
        after = chunk.back().uuid;
        for (const SourceRun& s : chunk) {
          if (std::string why = check_source_run(s); !why.empty()) {
            log_warn("merging {}: run {} skipped: {}", spath, s.uuid, why);
            ++report.runs_rejected;
            continue;
          }
          {
            Query q(conn, "SELECT 1 FROM runs WHERE uuid = ?1");
            q.bind(1, s.uuid);
            if (q.step()) {
              ++report.runs_present;
              continue;
            }
          }
          // Candidate checks, including this database's validator.
          TuningResult view;
          view.env_class = s.result_class;
          view.template_hash = s.result_template;
          view.library_version = s.result_library;
          view.op = s.op;
          view.fingerprint_text = s.fp_text;
          view.fingerprint_hash = s.fp_hash;
          view.bucket_key = s.fp_bucket;
          view.environment = s.env;
          view.host = s.host;
          view.unix_time = s.unix_time;
          view.tool_version = s.tool_version;
          view.runs = 1;
          view.source = spath;
          std::vector<const CandidateStat*> keep;
          for (const auto& [c, stored_problem] : s.candidates) {
            std::string why = stored_problem.empty() ? check_candidate(c) : stored_problem;
            if (why.empty()) {
              view.solver_id = c.solver_id;
              view.schedule = c.schedule;
              view.stats = to_stats(c);
              why = call_validator(options_.validator, view);
            }
            if (!why.empty()) {
              log_warn("merging {}: run {} candidate {} dropped: {}", spath, s.uuid, c.schedule, why);
              ++report.candidates_rejected;
              continue;
            }
            keep.push_back(&c);
          }
          if (keep.empty()) {
            log_warn("merging {}: run {} skipped: no usable candidate", spath, s.uuid);
            ++report.runs_rejected;
            continue;
          }
          const int64_t env_id = upsert_environment(conn, s.env);
          const int64_t fp_id = upsert_fingerprint(conn, s.fp_hash, s.fp_bucket, s.fp_text);
          const int64_t result_id =
              upsert_result(conn, ProblemKey{s.result_class, s.result_template, s.result_library, s.op, fp_id});
          const int64_t run_row =
              insert_run(conn, result_id, env_id, s.uuid, s.default_schedule, s.host, s.unix_time, s.tool_version);
          if (run_row == 0) {
            ++report.runs_present;
            continue;
          }
          for (const CandidateStat* c : keep) insert_candidate(conn, run_row, *c);
          ++report.runs_added;
          touched.insert(result_id);
        }
      }
      for (int64_t id : touched) store_winner(conn, id, compute_winner(conn, id, options_.validator, options_.policy));
      report.results_updated = static_cast<int64_t>(touched.size());
      // Modules, a few at a time (they can be large).
      std::string after_key;
      for (;;) {
        int rows = 0;
        Query q(sconn, DFGNN_MODULE_SELECT "WHERE key > ?1 ORDER BY key LIMIT 16");
        q.bind(1, after_key);
        std::vector<ModuleRecord> modules;
        while (q.step()) {
          ++rows;
          after_key = q.text(0);
          ModuleRecord m;
          if (const std::string why = decode_module(q, m); !why.empty()) {
            log_warn("merging {}: module {} skipped: {}", spath, after_key, why);
            ++report.modules_rejected;
            continue;
          }
          modules.push_back(std::move(m));
        }
        if (rows == 0) break;
        for (const ModuleRecord& m : modules) insert_module(conn, m, report.modules_added);
      }
    });
  });
  return report;
}

// ------------------------------------------------------------------ export, prune, verify, list

namespace {

// The host part of snapshot temp names: the host name, with anything but letters, digits, '.'
// and '_' replaced, so the name stays one plain path component.
std::string temp_host() {
  std::string h = host_name();
  for (char& c : h)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_') c = '_';
  return h;
}

// Whether process pid, started at start_ticks (0: unknown), still runs. A running pid with another
// start time is a new process that reuses the number (pid_max is often 32768, and numbers wrap
// within minutes on a busy host). Where it cannot be told, the process is taken to run.
bool process_runs(int64_t pid, int64_t start_ticks) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  if (start_ticks == 0) return true;
  const int64_t now = process_start_ticks(pid);
  return now == 0 || now == start_ticks;
}

// Removes a snapshot temp file and the journal, WAL and shared-memory files SQLite may have made
// beside it.
void remove_with_sidecars(const fs::path& file) {
  std::error_code ec;
  for (const char* suffix : {"", "-journal", "-wal", "-shm"}) fs::remove(fs::path(file.string() + suffix), ec);
}

// Removes the leftovers of killed exports to target: files named as export_temp_path() names them
// (plus SQLite's -journal / -wal / -shm of such a file) for this host and a process that no longer
// runs. A live writer's file, another host's (its pid means nothing here) and any other name are
// left alone.
void remove_stale_temps(const fs::path& target) {
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = target.filename().string() + ".tmp-" + temp_host() + "-";
  auto all = [](const std::string& text, int (*test)(int)) {
    return !text.empty() &&
           std::all_of(text.begin(), text.end(), [&](char c) { return test(static_cast<unsigned char>(c)) != 0; });
  };
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    std::string rest = name.substr(prefix.size());  // PID-START-TAG[-journal|-wal|-shm]
    for (const char* suffix : {"-journal", "-wal", "-shm"}) {
      const std::string s = suffix;
      if (rest.size() > s.size() && rest.compare(rest.size() - s.size(), s.size(), s) == 0) {
        rest.resize(rest.size() - s.size());
        break;
      }
    }
    const size_t dash1 = rest.find('-');
    const size_t dash2 = dash1 == std::string::npos ? dash1 : rest.find('-', dash1 + 1);
    if (dash2 == std::string::npos) continue;
    const std::string pid_text = rest.substr(0, dash1), start_text = rest.substr(dash1 + 1, dash2 - dash1 - 1),
                      tag = rest.substr(dash2 + 1);
    if (pid_text.size() > 9 || start_text.size() > 18 || !all(pid_text, ::isdigit) || !all(start_text, ::isdigit) ||
        !all(tag, ::isxdigit))
      continue;
    const int64_t pid = std::stoll(pid_text);
    if (pid <= 1 || process_runs(pid, std::stoll(start_text))) continue;
    std::error_code rm;
    if (fs::remove(it->path(), rm))
      log_info("tuning database export {}: removed {}, left by process {} that no longer runs", target.string(),
               it->path().string(), pid);
  }
}

}  // namespace

int64_t process_start_ticks(int64_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(in, line)) return 0;
  const size_t paren = line.rfind(')');  // the command name before it may hold spaces and ')'
  if (paren == std::string::npos) return 0;
  std::istringstream fields(line.substr(paren + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)  // fields 3..22 follow; starttime is field 22 (proc(5))
    if (!(fields >> field)) return 0;
  if (field.size() > 18 || field.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::stoll(field);
}

fs::path export_temp_path(const fs::path& target, int64_t pid, int64_t start_ticks, const std::string& tag) {
  fs::path tmp = target;
  tmp += fmt::format(".tmp-{}-{}-{}-{}", temp_host(), pid, start_ticks, tag);
  return tmp;
}

void TuningDb::export_to(const fs::path& target) {
  std::lock_guard lock(mutex_);
  const std::string t = target.string();
  if (t.empty()) throw DbError(ErrorKind::InvalidArgument, "export_to: empty path");
  std::error_code ec;
  if (fs::equivalent(target, path_, ec))
    throw DbError(ErrorKind::InvalidArgument, fmt::format("export_to: {} is this database itself", t));
  // A snapshot made by VACUUM INTO would carry injected triggers or views to every site.
  require_expected_schema(*conn_, steps_of(options_), "export");
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  if (ec) throw_db(t, fmt::format("cannot create directory: {}", ec.message()));
  remove_stale_temps(target);
  const fs::path tmp =
      export_temp_path(target, getpid(), process_start_ticks(getpid()), new_run_id().substr(0, 12));
  try {
    {
      Query q(*conn_, "VACUUM INTO ?1");
      q.bind(1, tmp.string());
      q.run();
    }
    // Rollback journal, so the snapshot opens immutable anywhere.
    Connection out(open_handle(tmp.string(), SQLITE_OPEN_READWRITE, t), t);
    out.exec("PRAGMA journal_mode = DELETE");
  } catch (...) {
    remove_with_sidecars(tmp);  // a failed VACUUM INTO (a full disk) can leave its journal
    throw;
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    remove_with_sidecars(tmp);
    throw_db(t, fmt::format("cannot move the snapshot into place: {}", ec.message()));
  }
}

PruneReport TuningDb::prune(const PruneFilter& f) {
  std::lock_guard lock(mutex_);
  Impl::require_writable(*this);
  if (!f.env_class && !f.older_than && !f.library_version && !f.template_hash)
    throw DbError(ErrorKind::InvalidArgument, "prune: give at least one filter");
  PruneReport report;
  Connection& conn = *conn_;
  detail::write_transaction(conn, options_.write_attempts, [&] {
    report = PruneReport{};
    std::vector<std::pair<int64_t, int64_t>> doomed;  // run id, result id
    {
      Query q(conn,
              "SELECT ru.id, ru.result_id FROM runs ru JOIN results r ON r.id = ru.result_id "
              "WHERE (?1 IS NULL OR r.env_class = ?1) AND (?2 IS NULL OR ru.unix_time < ?2) AND "
              "(?3 IS NULL OR r.library_version = ?3) AND (?4 IS NULL OR r.template_hash = ?4)");
      if (f.env_class) q.bind(1, *f.env_class); else q.bind_null(1);
      if (f.older_than) q.bind(2, *f.older_than); else q.bind_null(2);
      if (f.library_version) q.bind(3, *f.library_version); else q.bind_null(3);
      if (f.template_hash) q.bind(4, *f.template_hash); else q.bind_null(4);
      while (q.step()) doomed.emplace_back(q.i64(0), q.i64(1));
    }
    std::set<int64_t> touched;
    for (auto [run, result] : doomed) {
      Query d(conn, "DELETE FROM runs WHERE id = ?1");
      report.runs += d.bind(1, run).run();
      touched.insert(result);
    }
    for (int64_t id : touched)
      if (!store_winner(conn, id, compute_winner(conn, id, options_.validator, options_.policy))) ++report.results;
    {
      Query d(conn, "DELETE FROM results WHERE id NOT IN (SELECT result_id FROM runs)");
      report.results += d.run();
    }
    Query(conn, "DELETE FROM fingerprints WHERE id NOT IN (SELECT fingerprint_id FROM results)").run();
    Query(conn,
          "DELETE FROM environments WHERE id NOT IN (SELECT environment_id FROM runs) AND id NOT IN "
          "(SELECT environment_id FROM results WHERE environment_id IS NOT NULL)")
        .run();
    if (!f.env_class && !f.library_version) {
      Query d(conn, "DELETE FROM modules WHERE (?1 IS NULL OR created < ?1) AND (?2 IS NULL OR template_hash = ?2)");
      if (f.older_than) d.bind(1, *f.older_than); else d.bind_null(1);
      if (f.template_hash) d.bind(2, *f.template_hash); else d.bind_null(2);
      report.modules = d.run();
    }
  });
  return report;
}

std::vector<std::string> TuningDb::verify(const RowValidator& validator_in) {
  std::lock_guard lock(mutex_);
  const RowValidator& validator = validator_in ? validator_in : options_.validator;
  Connection& conn = *conn_;
  std::vector<std::string> problems;
  try {
    {
      Query q(conn, "PRAGMA integrity_check");
      while (q.step())
        if (q.text(0) != "ok") problems.push_back("integrity: " + q.text(0));
    }
    {
      Query q(conn, "PRAGMA foreign_key_check");
      while (q.step())
        problems.push_back(fmt::format("foreign key: row {} of {} refers to a missing row of {}", q.i64(1), q.text(0),
                                       q.text(2)));
    }
    for (const std::string& d : detail::schema_differences(conn, steps_of(options_))) problems.push_back("schema: " + d);
    detail::read_transaction(conn, [&] {
      {
        Query q(conn, "SELECT id, hash, bucket_key, text FROM fingerprints ORDER BY id");
        while (q.step()) {
          RowReader in(q);
          const std::string hash = in.text(1, "fingerprints.hash"), text = in.text(3, "fingerprints.text");
          in.text(2, "fingerprints.bucket_key");
          std::string why = in.problem();
          if (why.empty()) why = check_fingerprint(text, hash);
          if (!why.empty()) problems.push_back(fmt::format("fingerprint {}: {}", q.i64(0), why));
        }
      }
      {
        Query q(conn,
                "SELECT id, env_class, gpu_name, compute_capability, sm_count, driver_version, nvrtc_version, "
                "library_version, template_hash FROM environments ORDER BY id");
        while (q.step()) {
          RowReader in(q);
          const std::string cls = in.text(1, "environments.env_class");
          EnvironmentInfo e{in.text(2, "environments.gpu_name"),       in.int32(3, "environments.compute_capability"),
                            in.int32(4, "environments.sm_count"),      in.int32(5, "environments.driver_version"),
                            in.int32(6, "environments.nvrtc_version"), in.text(7, "environments.library_version"),
                            in.text(8, "environments.template_hash")};
          std::string why = in.problem();
          if (why.empty()) why = check_environment(e);
          if (why.empty() && environment_class(e) != cls)
            why = fmt::format("class \"{}\" does not match its fields (\"{}\")", cls, environment_class(e));
          if (!why.empty()) problems.push_back(fmt::format("environment {}: {}", q.i64(0), why));
        }
      }
      {
        Query q(conn,
                "SELECT ru.uuid, ru.result_id, e.env_class, r.env_class, e.template_hash, r.template_hash, "
                "e.library_version, r.library_version, (SELECT count(*) FROM candidate_stats cs WHERE "
                "cs.run_id = ru.id), ru.default_schedule, ru.host, ru.unix_time, ru.tool_version FROM runs ru "
                "LEFT JOIN results r ON r.id = ru.result_id LEFT JOIN environments e ON e.id = ru.environment_id "
                "ORDER BY ru.uuid");
        while (q.step()) {
          RowReader in(q);
          const std::string uuid = in.text(0, "runs.uuid");
          in.text(9, "runs.default_schedule");
          in.text(10, "runs.host");
          in.integer(11, "runs.unix_time");
          in.text(12, "runs.tool_version");
          const std::string name = uuid.empty() ? fmt::format("of result {}", q.i64(1)) : uuid;
          if (!in.problem().empty()) problems.push_back(fmt::format("run {}: {}", name, in.problem()));
          if (q.text(2) != q.text(3) || q.text(4) != q.text(5) || q.text(6) != q.text(7))
            problems.push_back(fmt::format("run {}: its environment does not match result {}", name, q.i64(1)));
          if (q.i64(8) == 0) problems.push_back(fmt::format("run {}: no candidate statistics", name));
        }
      }
      std::vector<int64_t> ids;
      {
        Query q(conn, DFGNN_RESULT_SELECT "ORDER BY r.id");
        while (q.step()) {
          TuningResult r;
          const std::string why = decode_result(q, path_.string(), validator, r);
          ids.push_back(r.id);
          if (!why.empty() && !(q.is_null(14) && r.runs > 0))
            problems.push_back(fmt::format("result {} {}: {}", r.id, describe(r), why));
        }
      }
      for (int64_t id : ids) {
        // Every candidate row, as a write would judge it before pooling it (checks and validator).
        TuningResult view;
        const bool have_view = result_key_view(conn, id, view).empty();
        Query c(conn,
                "SELECT ru.uuid, cs.schedule, cs.solver_id, cs.count, cs.mean_ms, cs.m2, cs.min_ms, cs.median_ms "
                "FROM candidate_stats cs JOIN runs ru ON ru.id = cs.run_id WHERE ru.result_id = ?1 "
                "ORDER BY ru.uuid, cs.schedule");
        c.bind(1, id);
        while (c.step()) {
          RowReader in(c);
          const CandidateStat cs = read_candidate(in, 1);
          std::string why;  // "candidate SCHEDULE: ..."
          if (!in.problem().empty()) {
            why = fmt::format("candidate {}: {}", cs.schedule, in.problem());
          } else if (why = check_candidate(cs); why.empty() && validator && have_view) {
            view.solver_id = cs.solver_id;
            view.schedule = cs.schedule;
            view.stats = to_stats(cs);
            if (std::string v = call_validator(validator, view); !v.empty())
              why = fmt::format("candidate {}: rejected by validator: {}", cs.schedule, v);
          }
          if (!why.empty()) problems.push_back(fmt::format("run {} of result {}: {}", c.text(0), id, why));
        }
      }
      for (int64_t id : ids) {
        const Winner w = compute_winner(conn, id, validator, options_.policy);
        Query q(conn, "SELECT schedule, count, mean_ms, runs FROM results WHERE id = ?1");
        q.bind(1, id);
        if (!q.step()) continue;
        const std::string stored = q.is_null(0) ? std::string("(none)") : q.text(0);
        const std::string derived = w.winner ? w.winner->schedule : std::string("(none)");
        const bool same = stored == derived && q.i64(3) == w.runs &&
                          (!w.winner || (q.i64(1) == w.winner->count && q.f64(2) == w.winner->mean_ms));
        if (!same)
          problems.push_back(fmt::format("result {}: stored winner {} (runs {}) disagrees with its runs, which give "
                                         "{} (runs {})",
                                         id, stored, q.i64(3), derived, w.runs));
      }
      {
        Query q(conn, DFGNN_MODULE_SELECT "ORDER BY key");
        while (q.step()) {
          ModuleRecord m;
          if (std::string why = decode_module(q, m); !why.empty())
            problems.push_back(fmt::format("module {}: {}", m.key.empty() ? "(key unreadable)" : m.key, why));
        }
      }
    });
  } catch (const std::exception& e) {
    problems.push_back(std::string("verification stopped: ") + e.what());
  }
  return problems;
}

std::vector<ListedResult> TuningDb::list(const std::optional<std::string>& env_class) {
  std::lock_guard lock(mutex_);
  std::vector<ListedResult> out;
  detail::read_transaction(*conn_, [&] {
    Query q(*conn_, DFGNN_RESULT_SELECT "WHERE (?1 IS NULL OR r.env_class = ?1) ORDER BY r.env_class, r.model, "
                                        "r.dtype, r.heads, r.dim, r.direction, r.key_bits, f.hash, r.id");
    if (env_class) q.bind(1, *env_class); else q.bind_null(1);
    while (q.step()) {
      ListedResult l;
      l.problem = decode_result(q, path_.string(), options_.validator, l.result);
      out.push_back(std::move(l));
    }
  });
  return out;
}

DbStats TuningDb::stats() {
  std::lock_guard lock(mutex_);
  DbStats s;
  s.path = path_.string();
  s.schema_version = schema_version_;
  s.read_only = read_only_;
  detail::read_transaction(*conn_, [&] {
    auto count = [&](const char* sql) {
      Query q(*conn_, sql);
      return q.step() ? q.i64(0) : 0;
    };
    s.environments = count("SELECT count(*) FROM environments");
    s.fingerprints = count("SELECT count(*) FROM fingerprints");
    s.results = count("SELECT count(*) FROM results");
    s.results_without_winner = count("SELECT count(*) FROM results WHERE schedule IS NULL");
    s.runs = count("SELECT count(*) FROM runs");
    s.candidate_stats = count("SELECT count(*) FROM candidate_stats");
    s.modules = count("SELECT count(*) FROM modules");
    s.module_bytes = count("SELECT coalesce(sum(length(image)), 0) FROM modules");
  });
  return s;
}

std::vector<BuildStamp> TuningDb::build_stamps() {
  std::lock_guard lock(mutex_);
  std::vector<BuildStamp> out;
  detail::read_transaction(*conn_, [&] {
    out.clear();
    Query q(*conn_,
            "SELECT env_class, library_version, template_hash, count(*) FROM results "
            "GROUP BY env_class, library_version, template_hash ORDER BY count(*) DESC, env_class, library_version");
    while (q.step()) out.push_back({q.text(0), q.text(1), q.text(2), q.i64(3)});
  });
  return out;
}

}  // namespace dfgnn::db
