// Maintenance: merge, export, prune, verify, list, stats.
#include "db_internal.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <signal.h>

namespace dfgnn::db {

namespace fs = std::filesystem;
using namespace detail;

// ------------------------------------------------------------------ merge

namespace {

struct SourceRun {
  RunInfo run;  // environment_id: unused (an id of the source)
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
    static const std::string sql =
        "SELECT " +
        select_list("ru", "runs", {"id", "uuid", "default_schedule", "host", "unix_time", "tool_version"}) + ", " +
        environment_columns("e") + ", " +
        select_list("r", "results",
                    {"id", "env_class", "template_hash", "library_version", "model", "dtype", "heads", "dim",
                     "direction", "key_bits"}) +
        ", " + select_list("f", "fingerprints", {"id", "hash", "bucket_key", "text"}) +
        " FROM runs ru LEFT JOIN results r ON r.id = ru.result_id "
        "LEFT JOIN environments e ON e.id = ru.environment_id "
        "LEFT JOIN fingerprints f ON f.id = r.fingerprint_id WHERE ru.uuid > ?1 ORDER BY ru.uuid LIMIT ?2";
    Query q(src, sql.c_str());
    q.bind(1, after).bind(2, static_cast<int64_t>(limit));
    while (q.step()) {
      RowReader in(q);
      SourceRun s;
      s.run.uuid = q.text("runs.uuid");  // the paging key, as stored; checked below
      s.run.default_schedule = in.text("runs.default_schedule");
      s.run.host = in.text("runs.host");
      s.run.unix_time = in.integer("runs.unix_time");
      s.run.tool_version = in.text("runs.tool_version");
      s.env = read_environment(in);
      s.env_row_class = in.text("environments.env_class");
      s.result_class = in.text("results.env_class");
      s.result_template = in.text("results.template_hash");
      s.result_library = in.text("results.library_version");
      s.op = read_op_key(in);
      s.fp_hash = in.text("fingerprints.hash");
      s.fp_bucket = in.text("fingerprints.bucket_key");
      s.fp_text = in.text("fingerprints.text");
      in.text("runs.uuid");
      if (q.is_null("environments.id") || q.is_null("results.id") || q.is_null("fingerprints.id"))
        s.problem = "dangling environment, result or fingerprint";
      if (s.problem.empty()) s.problem = in.problem();
      by_row[q.i64("runs.id")] = out.size();
      out.push_back(std::move(s));
    }
  }
  if (out.empty()) return out;
  static const std::string candidates_sql =
      "SELECT cs.run_id AS run_id, " + candidate_columns("cs") +
      " FROM candidate_stats cs JOIN runs ru ON ru.id = cs.run_id WHERE ru.uuid > ?1 AND ru.uuid <= ?2 "
      "ORDER BY cs.run_id, cs.schedule";
  Query c(src, candidates_sql.c_str());
  c.bind(1, after).bind(2, out.back().run.uuid);
  while (c.step()) {
    auto it = by_row.find(c.i64("run_id"));
    if (it == by_row.end()) continue;
    RowReader in(c);
    CandidateStat stat = read_candidate(in);
    out[it->second].candidates.emplace_back(std::move(stat), in.problem());
  }
  return out;
}

// "" or why a source run is unusable.
std::string check_source_run(const SourceRun& s) {
  if (!s.problem.empty()) return s.problem;
  if (s.run.uuid.empty()) return "empty run id";
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
  // Its own -wal read as a database would be "nothing to merge" at best.
  if (const std::string suffix = own_sidecar(path_, other); !suffix.empty())
    throw DbError(ErrorKind::InvalidArgument, fmt::format("merge_from: {} is this database's {} file, not a database "
                                                          "to merge", other.string(), suffix));
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
  read_transaction(sconn, [&] {
    write_transaction(conn, options_.write_attempts, [&] {
      report = MergeReport{};  // a retried transaction starts over
      std::set<int64_t> touched;
      std::string after;
      for (;;) {
        const std::vector<SourceRun> chunk = read_source_runs(sconn, after, kChunk);
        if (chunk.empty()) break;
        after = chunk.back().run.uuid;
        for (const SourceRun& s : chunk) {
          if (std::string why = check_source_run(s); !why.empty()) {
            log_warn("merging {}: run {} skipped: {}", spath, s.run.uuid, why);
            ++report.runs_rejected;
            continue;
          }
          {
            Query q(conn, "SELECT 1 FROM runs WHERE uuid = ?1");
            q.bind(1, s.run.uuid);
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
          view.host = s.run.host;
          view.unix_time = s.run.unix_time;
          view.tool_version = s.run.tool_version;
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
              log_warn("merging {}: run {} candidate {} dropped: {}", spath, s.run.uuid, c.schedule, why);
              ++report.candidates_rejected;
              continue;
            }
            keep.push_back(&c);
          }
          if (keep.empty()) {
            log_warn("merging {}: run {} skipped: no usable candidate", spath, s.run.uuid);
            ++report.runs_rejected;
            continue;
          }
          const int64_t env_id = upsert_environment(conn, s.env);
          const int64_t fp_id = upsert_fingerprint(conn, s.fp_hash, s.fp_bucket, s.fp_text);
          const int64_t result_id =
              upsert_result(conn, ProblemKey{s.result_class, s.result_template, s.result_library, s.op, fp_id});
          const int64_t run_row = insert_run(conn, result_id, env_id, s.run);
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
        static const std::string sql = module_select() + "WHERE m.key > ?1 ORDER BY m.key LIMIT 16";
        Query q(sconn, sql.c_str());
        q.bind(1, after_key);
        std::vector<ModuleRecord> modules;
        while (q.step()) {
          ++rows;
          after_key = q.text("modules.key");
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

std::string own_sidecar(const fs::path& database, const fs::path& file) {
  for (const char* suffix : {"-wal", "-shm", "-journal"}) {
    fs::path sidecar = database;
    sidecar += suffix;
    std::error_code e1, e2;
    const fs::path a = fs::weakly_canonical(file, e1), b = fs::weakly_canonical(sidecar, e2);
    if (!e1 && !e2 && a == b) return suffix;
  }
  return {};
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
  // Renamed over the live -wal, the snapshot would throw away the writes not yet checkpointed.
  if (const std::string suffix = own_sidecar(path_, target); !suffix.empty())
    throw DbError(ErrorKind::InvalidArgument,
                  fmt::format("export_to: {} is this database's {} file, not a place for a snapshot", t, suffix));
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

int64_t TuningDb::restamp(const std::string& from, const std::string& to) {
  std::lock_guard lock(mutex_);
  Impl::require_writable(*this);
  if (from.empty() || to.empty() || from == to)
    throw DbError(ErrorKind::InvalidArgument, fmt::format("restamp: '{}' to '{}' is not a change of kernel source", from, to));
  int64_t changed = 0;
  write_transaction(*conn_, options_.write_attempts, [&] {
    Query r(*conn_, "UPDATE results SET template_hash = ?2 WHERE template_hash = ?1");
    changed = r.bind(1, from).bind(2, to).run();
    Query e(*conn_, "UPDATE environments SET template_hash = ?2 WHERE template_hash = ?1");
    e.bind(1, from).bind(2, to).run();
  });
  return changed;
}

PruneReport TuningDb::prune(const PruneFilter& f) {
  std::lock_guard lock(mutex_);
  Impl::require_writable(*this);
  if (!f.env_class && !f.older_than && !f.library_version && !f.template_hash)
    throw DbError(ErrorKind::InvalidArgument, "prune: give at least one filter");
  PruneReport report;
  Connection& conn = *conn_;
  write_transaction(conn, options_.write_attempts, [&] {
    report = PruneReport{};
    std::vector<std::pair<int64_t, int64_t>> doomed;  // run id, result id
    {
      Query q(conn,
              "SELECT ru.id AS id, ru.result_id AS result_id FROM runs ru JOIN results r ON r.id = ru.result_id "
              "WHERE (?1 IS NULL OR r.env_class = ?1) AND (?2 IS NULL OR ru.unix_time < ?2) AND "
              "(?3 IS NULL OR r.library_version = ?3) AND (?4 IS NULL OR r.template_hash = ?4)");
      if (f.env_class) q.bind(1, *f.env_class); else q.bind_null(1);
      if (f.older_than) q.bind(2, *f.older_than); else q.bind_null(2);
      if (f.library_version) q.bind(3, *f.library_version); else q.bind_null(3);
      if (f.template_hash) q.bind(4, *f.template_hash); else q.bind_null(4);
      while (q.step()) doomed.emplace_back(q.i64("id"), q.i64("result_id"));
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
        if (q.text("integrity_check") != "ok") problems.push_back("integrity: " + q.text("integrity_check"));
    }
    {
      Query q(conn, "PRAGMA foreign_key_check");
      while (q.step())
        problems.push_back(fmt::format("foreign key: row {} of {} refers to a missing row of {}", q.i64("rowid"),
                                       q.text("table"), q.text("parent")));
    }
    for (const std::string& d : schema_differences(conn, steps_of(options_))) problems.push_back("schema: " + d);
    read_transaction(conn, [&] {
      {
        static const std::string sql =
            "SELECT " + select_list("f", "fingerprints", {"id", "hash", "bucket_key", "text"}) +
            " FROM fingerprints f ORDER BY f.id";
        Query q(conn, sql.c_str());
        while (q.step()) {
          RowReader in(q);
          const std::string hash = in.text("fingerprints.hash"), text = in.text("fingerprints.text");
          in.text("fingerprints.bucket_key");
          std::string why = in.problem();
          if (why.empty()) why = check_fingerprint(text, hash);
          if (!why.empty()) problems.push_back(fmt::format("fingerprint {}: {}", q.i64("fingerprints.id"), why));
        }
      }
      {
        static const std::string sql = "SELECT " + environment_columns("e") + " FROM environments e ORDER BY e.id";
        Query q(conn, sql.c_str());
        while (q.step()) {
          RowReader in(q);
          const std::string cls = in.text("environments.env_class");
          const EnvironmentInfo e = read_environment(in);
          std::string why = in.problem();
          if (why.empty()) why = check_environment(e);
          if (why.empty() && environment_class(e) != cls)
            why = fmt::format("class \"{}\" does not match its fields (\"{}\")", cls, environment_class(e));
          if (!why.empty()) problems.push_back(fmt::format("environment {}: {}", q.i64("environments.id"), why));
        }
      }
      {
        static const std::string sql =
            "SELECT " +
            select_list("ru", "runs", {"uuid", "result_id", "default_schedule", "host", "unix_time", "tool_version"}) +
            ", " + select_list("e", "environments", {"env_class", "template_hash", "library_version"}) + ", " +
            select_list("r", "results", {"env_class", "template_hash", "library_version"}) +
            ", (SELECT count(*) FROM candidate_stats cs WHERE cs.run_id = ru.id) AS candidates FROM runs ru "
            "LEFT JOIN results r ON r.id = ru.result_id LEFT JOIN environments e ON e.id = ru.environment_id "
            "ORDER BY ru.uuid";
        Query q(conn, sql.c_str());
        while (q.step()) {
          RowReader in(q);
          const std::string uuid = in.text("runs.uuid");
          in.text("runs.default_schedule");
          in.text("runs.host");
          in.integer("runs.unix_time");
          in.text("runs.tool_version");
          const int64_t result_id = q.i64("runs.result_id");
          const std::string name = uuid.empty() ? fmt::format("of result {}", result_id) : uuid;
          if (!in.problem().empty()) problems.push_back(fmt::format("run {}: {}", name, in.problem()));
          for (const char* column : {"env_class", "template_hash", "library_version"})
            if (q.text(std::string("environments.") + column) != q.text(std::string("results.") + column)) {
              problems.push_back(fmt::format("run {}: its environment does not match result {}", name, result_id));
              break;
            }
          if (q.i64("candidates") == 0) problems.push_back(fmt::format("run {}: no candidate statistics", name));
        }
      }
      std::vector<int64_t> ids;
      {
        static const std::string sql = result_select() + "ORDER BY r.id";
        Query q(conn, sql.c_str());
        while (q.step()) {
          TuningResult r;
          const std::string why = decode_result(q, path_.string(), validator, r);
          ids.push_back(r.id);
          // A row without a winner but with runs is a problem no candidate of which is eligible: not damage.
          if (!why.empty() && !(q.is_null("results.schedule") && r.runs > 0))
            problems.push_back(fmt::format("result {} {}: {}", r.id, describe(r), why));
        }
      }
      for (int64_t id : ids) {
        // Every candidate row, as a write would judge it before pooling it (checks and validator).
        TuningResult view;
        const bool have_view = result_key_view(conn, id, view).empty();
        static const std::string sql = "SELECT ru.uuid AS run, " + candidate_columns("cs") +
                                       " FROM candidate_stats cs JOIN runs ru ON ru.id = cs.run_id "
                                       "WHERE ru.result_id = ?1 ORDER BY ru.uuid, cs.schedule";
        Query c(conn, sql.c_str());
        c.bind(1, id);
        while (c.step()) {
          RowReader in(c);
          const CandidateStat cs = read_candidate(in);
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
          if (!why.empty()) problems.push_back(fmt::format("run {} of result {}: {}", c.text("run"), id, why));
        }
      }
      for (int64_t id : ids) {
        const Winner w = compute_winner(conn, id, validator, options_.policy);
        Query q(conn, "SELECT schedule, count, mean_ms, runs FROM results WHERE id = ?1");
        q.bind(1, id);
        if (!q.step()) continue;
        const std::string stored = q.is_null("schedule") ? std::string("(none)") : q.text("schedule");
        const std::string derived = w.winner ? w.winner->schedule : std::string("(none)");
        const bool same = stored == derived && q.i64("runs") == w.runs &&
                          (!w.winner || (q.i64("count") == w.winner->count && q.f64("mean_ms") == w.winner->mean_ms));
        if (!same)
          problems.push_back(fmt::format("result {}: stored winner {} (runs {}) disagrees with its runs, which give "
                                         "{} (runs {})",
                                         id, stored, q.i64("runs"), derived, w.runs));
      }
      {
        static const std::string sql = module_select() + "ORDER BY m.key";
        Query q(conn, sql.c_str());
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

std::string TuningDb::quick_check() {
  std::lock_guard lock(mutex_);
  std::string found;
  try {
    Query q(*conn_, "PRAGMA quick_check(3)");  // the first few findings say enough
    while (q.step()) {
      std::istringstream lines(q.text("quick_check"));  // a row may hold several lines
      for (std::string line; std::getline(lines, line);)
        if (line != "ok" && line != "*** in database main ***") found += (found.empty() ? "" : "; ") + line;
    }
  } catch (const std::exception& e) {
    found += (found.empty() ? "" : "; ") + std::string(e.what());
  }
  return found;
}

std::vector<ListedResult> TuningDb::list(const std::optional<std::string>& env_class) {
  std::lock_guard lock(mutex_);
  std::vector<ListedResult> out;
  read_transaction(*conn_, [&] {
    static const std::string sql = result_select() +
                                   "WHERE (?1 IS NULL OR r.env_class = ?1) ORDER BY r.env_class, r.model, r.dtype, "
                                   "r.heads, r.dim, r.direction, r.key_bits, f.hash, r.id";
    Query q(*conn_, sql.c_str());
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
  read_transaction(*conn_, [&] {
    auto count = [&](const char* sql) {  // SQL of one value named n
      Query q(*conn_, sql);
      return q.step() ? q.i64("n") : 0;
    };
    s.environments = count("SELECT count(*) AS n FROM environments");
    s.fingerprints = count("SELECT count(*) AS n FROM fingerprints");
    s.results = count("SELECT count(*) AS n FROM results");
    s.results_without_winner = count("SELECT count(*) AS n FROM results WHERE schedule IS NULL");
    s.runs = count("SELECT count(*) AS n FROM runs");
    s.candidate_stats = count("SELECT count(*) AS n FROM candidate_stats");
    s.modules = count("SELECT count(*) AS n FROM modules");
    s.module_bytes = count("SELECT coalesce(sum(length(image)), 0) AS n FROM modules");
  });
  return s;
}

bool TuningDb::has_results() {
  std::lock_guard lock(mutex_);
  bool found = false;
  read_transaction(*conn_, [&] {
    Query q(*conn_, "SELECT 1 FROM results LIMIT 1");
    found = q.step();
  });
  return found;
}

std::vector<std::string> TuningDb::result_classes() {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  read_transaction(*conn_, [&] {
    out.clear();
    // A skip scan of the unique index (env_class leads it): one seek per class, where DISTINCT steps
    // over every row, which was most of opening a shipped layer (a layer is opened for each process).
    Query q(*conn_,
            "WITH RECURSIVE c(env_class) AS (SELECT min(env_class) FROM results UNION ALL "
            "SELECT (SELECT min(env_class) FROM results WHERE env_class > c.env_class) FROM c WHERE c.env_class IS NOT NULL) "
            "SELECT env_class FROM c WHERE env_class IS NOT NULL");
    while (q.step()) out.push_back(q.text("env_class"));
  });
  return out;
}

int64_t TuningDb::build_results(const std::string& env_class, const std::string& library_version,
                                const std::string& template_hash, int64_t at_most) {
  std::lock_guard lock(mutex_);
  int64_t n = 0;
  read_transaction(*conn_, [&] {
    Query q(*conn_,
            "SELECT count(*) AS n FROM (SELECT 1 FROM results WHERE env_class = ?1 AND (?2 = '' OR template_hash = ?2) "
            "AND (?3 = '' OR library_version = ?3) LIMIT ?4)");
    q.bind(1, env_class).bind(2, template_hash).bind(3, library_version).bind(4, at_most);
    n = q.step() ? q.i64("n") : 0;
  });
  return n;
}

std::vector<BuildStamp> TuningDb::build_stamps() {
  std::lock_guard lock(mutex_);
  std::vector<BuildStamp> out;
  read_transaction(*conn_, [&] {
    out.clear();
    Query q(*conn_,
            "SELECT env_class, library_version, template_hash, count(*) AS results FROM results "
            "GROUP BY env_class, library_version, template_hash ORDER BY count(*) DESC, env_class, library_version");
    while (q.step())
      out.push_back({q.text("env_class"), q.text("library_version"), q.text("template_hash"), q.i64("results")});
  });
  return out;
}

}  // namespace dfgnn::db
