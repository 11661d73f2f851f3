// Results: row checks, row decoding by column name, pooling and the winner, upserts, and the
// TuningDb methods that write and read results (put_result, find_exact, candidates_for,
// pooled_candidates).
#include "db_internal.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

namespace dfgnn::db {

using namespace detail;

namespace {

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

// The winner's statistics of a result row (pooled over runs).
std::string check_stats(const ScheduleStats& s) {
  if (s.count < 1) return fmt::format("statistics: count {} < 1", s.count);
  if (std::string why = check_times(s.mean_ms, s.median_ms, s.min_ms, s.variance, "variance"); !why.empty())
    return "statistics: " + why;
  return {};
}

}  // namespace

// ------------------------------------------------------------------ checks

namespace detail {

std::string check_text(const char* field, const std::string& text) {
  if (std::string why = unprintable(text); !why.empty()) return fmt::format("{}: {}", field, why);
  return {};
}

std::string op_text(const OpKey& op) {
  return fmt::format("model={} dtype={} heads={} dim={} direction={} key_bits={}", op.model, op.dtype, op.heads, op.dim,
                     op.direction, op.key_bits);
}

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

// ------------------------------------------------------------------ decoding

std::string environment_columns(const char* alias) {
  return select_list(alias, "environments",
                     {"id", "env_class", "gpu_name", "compute_capability", "sm_count", "driver_version",
                      "nvrtc_version", "library_version", "template_hash"});
}

EnvironmentInfo read_environment(RowReader& in) {
  EnvironmentInfo e;
  e.gpu_name = in.text("environments.gpu_name");
  e.compute_capability = in.int32("environments.compute_capability");
  e.sm_count = in.int32("environments.sm_count");
  e.driver_version = in.int32("environments.driver_version");
  e.nvrtc_version = in.int32("environments.nvrtc_version");
  e.library_version = in.text("environments.library_version");
  e.template_hash = in.text("environments.template_hash");
  return e;
}

std::string candidate_columns(const char* alias) {
  return select_list(alias, "candidate_stats",
                     {"schedule", "solver_id", "count", "mean_ms", "m2", "min_ms", "median_ms"});
}

CandidateStat read_candidate(RowReader& in) {
  CandidateStat c;
  c.schedule = in.text("candidate_stats.schedule");
  c.solver_id = in.int32("candidate_stats.solver_id");
  c.count = in.integer("candidate_stats.count");
  c.mean_ms = in.real("candidate_stats.mean_ms");
  c.m2 = in.real("candidate_stats.m2");
  c.min_ms = in.real("candidate_stats.min_ms");
  c.median_ms = in.real("candidate_stats.median_ms");
  return c;
}

OpKey read_op_key(RowReader& in) {
  OpKey op;
  op.model = in.int32("results.model");
  op.dtype = in.int32("results.dtype");
  op.heads = in.int32("results.heads");
  op.dim = in.int32("results.dim");
  op.direction = in.int32("results.direction");
  op.key_bits = in.int32("results.key_bits");
  return op;
}

const std::string& result_select() {
  static const std::string sql =
      "SELECT " +
      select_list("r", "results",
                  {"id", "env_class", "template_hash", "library_version", "model", "dtype", "heads", "dim",
                   "direction", "key_bits", "solver_id", "schedule", "count", "median_ms", "mean_ms", "variance",
                   "min_ms", "default_schedule", "default_median_ms", "runner_up_schedule", "runner_up_median_ms",
                   "runs", "host", "unix_time", "tool_version", "environment_id"}) +
      ", " + select_list("f", "fingerprints", {"hash", "bucket_key", "text"}) + ", " + environment_columns("e") +
      " FROM results r LEFT JOIN fingerprints f ON f.id = r.fingerprint_id "
      "LEFT JOIN environments e ON e.id = r.environment_id ";
  return sql;
}

std::string decode_result(const Query& q, const std::string& source, const RowValidator& validator,
                          TuningResult& r) {
  r = TuningResult{};
  RowReader in(q);
  r.id = in.integer("results.id");
  r.env_class = in.text("results.env_class");
  r.template_hash = in.text("results.template_hash");
  r.library_version = in.text("results.library_version");
  r.op = read_op_key(in);
  r.fingerprint_hash = in.text("fingerprints.hash");
  r.bucket_key = in.text("fingerprints.bucket_key");
  const bool has_fp = !q.is_null("fingerprints.text");
  r.fingerprint_text = in.text("fingerprints.text");
  r.solver_id = in.int32("results.solver_id");
  const bool has_schedule = !q.is_null("results.schedule");
  r.schedule = in.text("results.schedule");
  r.stats.count = in.integer("results.count");
  r.stats.median_ms = in.real("results.median_ms");
  r.stats.mean_ms = in.real("results.mean_ms");
  r.stats.variance = in.real("results.variance");
  r.stats.min_ms = in.real("results.min_ms");
  r.default_schedule = in.text("results.default_schedule");
  r.default_median_ms = in.real("results.default_median_ms");
  r.runner_up_schedule = in.text("results.runner_up_schedule");
  r.runner_up_median_ms = in.real("results.runner_up_median_ms");
  r.runs = in.integer("results.runs");
  r.host = in.text("results.host");
  r.unix_time = in.integer("results.unix_time");
  r.tool_version = in.text("results.tool_version");
  r.environment_id = in.integer("results.environment_id");
  const bool has_env = !q.is_null("environments.id");
  const std::string env_row_class = in.text("environments.env_class");
  r.environment = read_environment(in);
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

ScheduleStats to_stats(const CandidateStat& c) {
  return ScheduleStats{c.count, c.median_ms, c.mean_ms, c.variance(), c.min_ms};
}

}  // namespace detail

namespace {

// Whether a row's build stamp / class answers a query for `current`.
bool matches_current(const TuningResult& r, const std::string& current_class, const EnvironmentInfo& current) {
  if (r.env_class != current_class) return false;
  if (!current.template_hash.empty() && r.template_hash != current.template_hash) return false;
  if (!current.library_version.empty() && r.library_version != current.library_version) return false;
  return true;
}

// ------------------------------------------------------------------ pooling and the winner

struct Pooled {
  CandidateStat stat;
  int64_t latest_time = std::numeric_limits<int64_t>::min();
  std::string latest_uuid;
};

bool later(int64_t t1, const std::string& u1, int64_t t2, const std::string& u2) {
  return t1 != t2 ? t1 > t2 : u1 > u2;
}

// Per schedule: statistics pooled over runs in run-id order (Chan et al.), min over runs, median
// the count-weighted mean of the runs' medians, solver id of the most recent run. Rows with broken
// statistics are skipped.
std::vector<Pooled> pool_candidates(Connection& conn, int64_t result_id) {
  struct Row {
    CandidateStat stat;
    std::string uuid;
    int64_t time = 0;
  };
  std::vector<Row> rows;
  // Sorted here rather than by an ORDER BY, whose temporary B-tree was about 40% of the query's
  // time (a first dispatch reads a dozen neighbours' statistics).
  static const std::string sql = "SELECT " + candidate_columns("cs") + ", " +
                                 select_list("r", "runs", {"uuid", "unix_time"}) +
                                 " FROM candidate_stats cs JOIN runs r ON r.id = cs.run_id WHERE r.result_id = ?1";
  Query q(conn, sql.c_str());
  q.bind(1, result_id);
  while (q.step()) {
    RowReader in(q);
    Row row{read_candidate(in), in.text("runs.uuid"), in.integer("runs.unix_time")};
    if (!in.problem().empty() || !check_candidate(row.stat).empty()) continue;
    rows.push_back(std::move(row));
  }
  // SQLite's BINARY order: std::string compares bytes as unsigned, as memcmp does
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.stat.schedule != b.stat.schedule ? a.stat.schedule < b.stat.schedule : a.uuid < b.uuid;
  });
  std::vector<Pooled> out;
  for (const Row& row : rows) {
    const CandidateStat& c = row.stat;
    const std::string& uuid = row.uuid;
    const int64_t time = row.time;
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
  while (q.step())
    out.push_back(RunInfo{q.text("uuid"), q.i64("unix_time"), q.text("host"), q.text("tool_version"),
                          q.text("default_schedule"), q.i64("environment_id")});
  return out;
}

}  // namespace

namespace detail {

std::string result_key_view(Connection& conn, int64_t result_id, TuningResult& view) {
  static const std::string sql = result_select() + "WHERE r.id = ?1";
  Query q(conn, sql.c_str());
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
    static const std::string env_sql = "SELECT " + environment_columns("e") + " FROM environments e WHERE e.id = ?1";
    Query e(conn, env_sql.c_str());
    e.bind(1, w.latest.environment_id);
    if (e.step()) {
      RowReader in(e);
      const EnvironmentInfo env = read_environment(in);
      if (in.problem().empty()) view.environment = env;
    }
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
  return sel.i64("id");
}

int64_t upsert_fingerprint(Connection& conn, const std::string& hash, const std::string& bucket,
                           const std::string& text) {
  Query ins(conn, "INSERT INTO fingerprints (hash, bucket_key, text) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING");
  ins.bind(1, hash).bind(2, bucket).bind(3, text).run();
  Query sel(conn, "SELECT id, text FROM fingerprints WHERE hash = ?1");
  sel.bind(1, hash);
  if (!sel.step()) throw_db(conn.path(), "fingerprint row vanished after insert");
  if (sel.text("text") != text)
    throw_db(conn.path(), fmt::format("fingerprint hash {} is stored with a different text (collision or a "
                                      "tampered row); run verify",
                                      hash));
  return sel.i64("id");
}

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
  return sel.i64("id");
}

int64_t insert_run(Connection& conn, int64_t result_id, int64_t environment_id, const RunInfo& run) {
  Query ins(conn,
            "INSERT INTO runs (uuid, result_id, environment_id, default_schedule, host, unix_time, tool_version) "
            "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (uuid) DO NOTHING");
  ins.bind(1, run.uuid).bind(2, result_id).bind(3, environment_id).bind(4, run.default_schedule).bind(5, run.host);
  ins.bind(6, run.unix_time).bind(7, run.tool_version);
  if (ins.run() == 1) return sqlite3_last_insert_rowid(conn.get());
  Query sel(conn, "SELECT result_id FROM runs WHERE uuid = ?1");
  sel.bind(1, run.uuid);
  if (sel.step() && sel.i64("result_id") != result_id)
    throw DbError(ErrorKind::InvalidArgument, fmt::format("tuning database {}: run id {} is already used for a "
                                                          "different problem",
                                                          conn.path(), run.uuid));
  return 0;
}

void insert_candidate(Connection& conn, int64_t run_id, const CandidateStat& c) {
  Query ins(conn,
            "INSERT INTO candidate_stats (run_id, schedule, solver_id, count, mean_ms, m2, min_ms, median_ms) "
            "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  ins.bind(1, run_id).bind(2, c.schedule).bind(3, c.solver_id).bind(4, c.count).bind(5, c.mean_ms);
  ins.bind(6, c.m2).bind(7, c.min_ms).bind(8, c.median_ms).run();
}

}  // namespace detail

namespace {

std::optional<TuningResult> load_valid(Connection& conn, int64_t result_id, const RowValidator& validator) {
  static const std::string sql = result_select() + "WHERE r.id = ?1";
  Query q(conn, sql.c_str());
  q.bind(1, result_id);
  if (!q.step()) return std::nullopt;
  TuningResult r;
  if (std::string why = decode_result(q, conn.path(), validator, r); !why.empty()) {
    log_debug("tuning database {}: result {} {} has no usable winner: {}", conn.path(), result_id, describe(r), why);
    return std::nullopt;
  }
  return r;
}

}  // namespace

// ------------------------------------------------------------------ TuningDb: results

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
  write_transaction(conn, options_.write_attempts, [&] {
    const int64_t env_id = upsert_environment(conn, run.environment);
    const int64_t fp_id = upsert_fingerprint(conn, hash, bucket, text);
    result_id = upsert_result(conn, ProblemKey{environment_class(run.environment), run.environment.template_hash,
                                               run.environment.library_version, run.op, fp_id});
    const int64_t run_row = insert_run(
        conn, result_id, env_id, RunInfo{run.run_id, run.unix_time, run.host, run.tool_version, run.default_schedule});
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
  read_transaction(conn, [&] {
    static const std::string sql = result_select() +
                                   "WHERE r.env_class = ?1 AND r.model = ?2 AND r.dtype = ?3 AND r.heads = ?4 AND "
                                   "r.dim = ?5 AND r.direction = ?6 AND r.key_bits = ?7 AND f.hash = ?8 "
                                   "ORDER BY r.unix_time DESC, r.id";
    Query q(conn, sql.c_str());
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
  read_transaction(conn, [&] {
    static const std::string sql = result_select() +
                                   "WHERE r.env_class = ?1 AND r.model = ?2 AND r.dtype = ?3 AND r.heads = ?4 AND "
                                   "r.dim = ?5 AND r.direction = ?6 AND r.key_bits = ?7 AND "
                                   "(?8 IS NULL OR f.bucket_key = ?8) ORDER BY f.hash, r.unix_time DESC, r.id";
    Query q(conn, sql.c_str());
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
  read_transaction(*conn_, [&] {
    for (Pooled& p : pool_candidates(*conn_, result_id)) out.push_back(std::move(p.stat));
  });
  std::sort(out.begin(), out.end(), [](const CandidateStat& a, const CandidateStat& b) {
    return a.mean_ms != b.mean_ms ? a.mean_ms < b.mean_ms : a.schedule < b.schedule;
  });
  return out;
}

}  // namespace dfgnn::db
