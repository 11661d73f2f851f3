// The SQLite tuning database (db/): results and pooled candidate statistics, schema versions and
// migrations, validation of hostile rows, robustness against garbage / truncated / corrupted files
// and killed writers, concurrent processes on one file, merge / export / prune / verify, and the
// user-over-site layering.
#include "test_util.hpp"
#include "damaged_pages.hpp"

#include "api_guard.hpp"
#include "db_error.hpp"
#include "dispatch.hpp"
#include "schema.hpp"
#include "sqlite_util.hpp"
#include "tuning_db.hpp"

#include <spdlog/sinks/ostream_sink.h>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using dfgnn::db::CandidateStat;
using dfgnn::db::EnvironmentInfo;
using dfgnn::db::LayeredDb;
using dfgnn::db::ModuleRecord;
using dfgnn::db::OpKey;
using dfgnn::db::TuningDb;
using dfgnn::db::TuningResult;
using dfgnn::db::TuningRun;

// ------------------------------------------------------------------ helpers

struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    std::random_device rd;
    path = fs::temp_directory_path() /
           ("dfgnn-db-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path operator/(const std::string& name) const { return path / name; }
};

// Fingerprint k, as the runtime hands it to the database (db_fingerprint), and its identity.
dfgnn_fingerprint_t fp_struct(int k) {
  dfgnn_fingerprint_t fp{};
  fp.version = DFGNN_FINGERPRINT_VERSION;
  fp.num_nodes = 1000 * (k + 1);
  fp.num_edges = 8000 * (k + 1) + k;
  fp.mean_degree = static_cast<double>(fp.num_edges) / static_cast<double>(fp.num_nodes);
  fp.max_degree = int64_t{64} << (k % 8);
  fp.p50 = 8;
  fp.p90 = 16;
  fp.p99 = 32 + k;
  fp.p999 = 64 + k;
  fp.cv = 0.5 + 0.1 * k;
  fp.gini = 0.3 + 0.001 * k;
  fp.hist[3] = 0.25;
  fp.hist[4] = 0.75;
  fp.top1pct_edge_share = 0.05;
  fp.hub_rows[0] = k;
  return fp;
}
dfgnn::db::FingerprintText make_fp(int k) { return dfgnn::db_fingerprint(fp_struct(k)); }
std::string fp_hash(int k) { return dfgnn::db::fingerprint_hash(make_fp(k).text); }

EnvironmentInfo h200() { return EnvironmentInfo{"NVIDIA H200", 90, 132, 12040, 12080, "0.1.0", "t-hash-1"}; }
EnvironmentInfo a100() { return EnvironmentInfo{"NVIDIA A100-SXM4-80GB", 80, 108, 12040, 12080, "0.1.0", "t-hash-1"}; }

OpKey op_gat(int direction = 0) { return OpKey{0, 0, 4, 64, direction, 0}; }

std::string sched(int lanes, const char* solver = "subwarp") {
  return std::string(solver) + ":lanes=" + std::to_string(lanes) + ",groups=8,team=1,vec=1,mid=0,threshold=0,chunk=0";
}

CandidateStat cand(const std::string& schedule, double mean, int64_t count = 10, double sd = 0.01) {
  CandidateStat c;
  c.schedule = schedule;
  c.solver_id = 1;
  c.count = count;
  c.mean_ms = mean;
  c.m2 = sd * sd * static_cast<double>(count - 1);
  c.min_ms = mean * 0.97;
  c.median_ms = mean * 0.99;
  return c;
}

TuningRun make_run(const EnvironmentInfo& env, const OpKey& op, int fp, std::vector<CandidateStat> candidates,
                   std::string run_id = {}, int64_t time = 0, std::string host = "host-test") {
  TuningRun r;
  r.environment = env;
  r.op = op;
  r.fingerprint = make_fp(fp);
  r.default_schedule = sched(32);
  r.candidates = std::move(candidates);
  r.run_id = std::move(run_id);
  r.unix_time = time;
  r.host = std::move(host);
  r.tool_version = "dfgnn-test";
  return r;
}

// A validator that emulates "known solver ids and parameter ranges": only the sub-warp solver,
// lanes in {4, 8, 16, 32}.
std::string subwarp_only(const TuningResult& r) {
  if (r.schedule.rfind("subwarp:", 0) != 0) return "unknown solver in \"" + r.schedule + "\"";
  const size_t pos = r.schedule.find("lanes=");
  if (pos == std::string::npos) return "no lanes";
  const int lanes = std::atoi(r.schedule.c_str() + pos + 6);
  if (lanes != 4 && lanes != 8 && lanes != 16 && lanes != 32) return "lanes " + std::to_string(lanes) + " out of range";
  return {};
}

TuningDb::Options with_validator() {
  TuningDb::Options o;
  o.validator = subwarp_only;
  return o;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Direct SQL on a file, bypassing dfgnn (to build foreign, hostile or tampered files).
void raw_exec(const fs::path& p, const std::string& sql) {
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

int64_t raw_int(const fs::path& p, const std::string& sql) {
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

std::string raw_text(const fs::path& p, const std::string& sql) {
  sqlite3* h = nullptr;
  sqlite3_open_v2(p.c_str(), &h, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* s = nullptr;
  std::string v = "(no row)";
  if (sqlite3_prepare_v2(h, sql.c_str(), -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
    if (const unsigned char* t = sqlite3_column_text(s, 0)) v = reinterpret_cast<const char*>(t);
  sqlite3_finalize(s);
  sqlite3_close(h);
  return v;
}

// A caught database error with the C API status the runtime reports for it (db_status).
struct CaughtDbError : dfgnn::db::DbError {
  explicit CaughtDbError(const dfgnn::db::DbError& e) : DbError(e) {}
  dfgnn_status_t status() const { return dfgnn::db_status(*this); }
};

// Runs f, which must throw the database's error; returns it (its status(), kind() and message).
template <typename F>
CaughtDbError expect_error(F&& f) {
  try {
    f();
  } catch (const dfgnn::db::DbError& e) {
    return CaughtDbError(e);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a dfgnn::db::DbError, got: " << e.what();
    return CaughtDbError(dfgnn::db::DbError(dfgnn::db::ErrorKind::Other, ""));
  }
  ADD_FAILURE() << "expected a dfgnn::db::DbError";
  return CaughtDbError(dfgnn::db::DbError(dfgnn::db::ErrorKind::Other, ""));
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Everything observable about a database's results and modules, with exact floats, without row ids.
std::map<std::string, std::string> snapshot(TuningDb& db) {
  std::map<std::string, std::string> out;
  for (const auto& l : db.list()) {
    const TuningResult& r = l.result;
    std::ostringstream k, v;
    k << r.env_class << '|' << r.template_hash << '|' << r.library_version << '|' << r.op.model << ',' << r.op.dtype
      << ',' << r.op.heads << ',' << r.op.dim << ',' << r.op.direction << ',' << r.op.key_bits << '|'
      << r.fingerprint_hash;
    v << std::hexfloat << l.problem << '|' << r.solver_id << '|' << r.schedule << '|' << r.stats.count << ','
      << r.stats.median_ms << ',' << r.stats.mean_ms << ',' << r.stats.variance << ',' << r.stats.min_ms << '|'
      << r.default_schedule << ',' << r.default_median_ms << '|' << r.runner_up_schedule << ','
      << r.runner_up_median_ms << '|' << r.runs << '|' << r.host << ',' << r.unix_time << ',' << r.tool_version
      << '|' << r.environment.gpu_name << ',' << r.environment.driver_version << ',' << r.environment.template_hash;
    for (const CandidateStat& c : db.pooled_candidates(r.id))
      v << '\n'
        << c.schedule << ' ' << c.solver_id << ' ' << c.count << ' ' << c.mean_ms << ' ' << c.m2 << ' ' << c.min_ms
        << ' ' << c.median_ms;
    out[k.str()] = v.str();
  }
  return out;
}

// Runs body in a forked child; returns its pid. The child exits with body's return value and never
// returns into the test framework.
pid_t spawn(const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    int code = 1;
    try {
      code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child %d: %s\n", static_cast<int>(getpid()), e.what());
      code = 2;
    } catch (...) {
      code = 3;
    }
    std::fflush(stderr);
    _exit(code);
  }
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// ------------------------------------------------------------------ basics

TEST(TuningDbBasic, EnvironmentClassKeepsGpusApart) {
  EXPECT_EQ(dfgnn::db::environment_class(h200()), "NVIDIA H200|sm_90|132");
  EnvironmentInfo other = h200();
  other.driver_version = 13000;
  other.nvrtc_version = 13000;
  EXPECT_EQ(dfgnn::db::environment_class(other), dfgnn::db::environment_class(h200()));
  other.sm_count = 114;  // a cut-down part of the same name
  EXPECT_NE(dfgnn::db::environment_class(other), dfgnn::db::environment_class(h200()));
  EXPECT_NE(dfgnn::db::environment_class(a100()), dfgnn::db::environment_class(h200()));
}

TEST(TuningDbBasic, PutThenFindExact) {
  TempDir dir;
  auto db = TuningDb::open_user(dir / "sub/dir/tuning.db");  // creates directories
  ASSERT_EQ(db->schema_version(), dfgnn::db::kSchemaVersion);
  auto put = db->put_result(make_run(h200(), op_gat(), 1,
                                     {cand(sched(32), 1.00), cand(sched(16), 0.80), cand(sched(8), 0.90)}, "run-1",
                                     1700000000));
  ASSERT_TRUE(put.has_value());
  EXPECT_EQ(put->schedule, sched(16));
  EXPECT_EQ(put->solver_id, 1);
  EXPECT_EQ(put->stats.count, 10);
  EXPECT_DOUBLE_EQ(put->stats.mean_ms, 0.80);
  EXPECT_DOUBLE_EQ(put->stats.median_ms, 0.80 * 0.99);
  EXPECT_NEAR(put->stats.variance, 0.0001, 1e-12);
  EXPECT_EQ(put->default_schedule, sched(32));
  EXPECT_DOUBLE_EQ(put->default_median_ms, 0.99);
  EXPECT_EQ(put->runner_up_schedule, sched(8));
  EXPECT_DOUBLE_EQ(put->runner_up_median_ms, 0.90 * 0.99);
  EXPECT_EQ(put->host, "host-test");
  EXPECT_EQ(put->unix_time, 1700000000);
  EXPECT_EQ(put->tool_version, "dfgnn-test");
  EXPECT_EQ(put->environment, h200());
  EXPECT_EQ(put->runs, 1);
  EXPECT_EQ(put->env_class, "NVIDIA H200|sm_90|132");
  EXPECT_EQ(put->fingerprint_hash, fp_hash(1));
  EXPECT_EQ(put->bucket_key, make_fp(1).bucket_key);
  EXPECT_EQ(put->source, (dir / "sub/dir/tuning.db").string());

  auto hit = db->find_exact(h200(), op_gat(), fp_hash(1));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->schedule, sched(16));
  EXPECT_EQ(hit->fingerprint_text, make_fp(1).text);  // the caller's text, returned as given
  EXPECT_EQ(dfgnn::db::fingerprint_hash(hit->fingerprint_text), hit->fingerprint_hash);

  // Misses: another fingerprint, op, direction, GPU class, SM count.
  EXPECT_FALSE(db->find_exact(h200(), op_gat(), fp_hash(2)));
  EXPECT_FALSE(db->find_exact(h200(), OpKey{0, 0, 4, 32, 0, 0}, fp_hash(1)));
  EXPECT_FALSE(db->find_exact(h200(), op_gat(1), fp_hash(1)));
  EXPECT_FALSE(db->find_exact(h200(), OpKey{0, 0, 4, 64, 0, 1}, fp_hash(1)));
  EXPECT_FALSE(db->find_exact(a100(), op_gat(), fp_hash(1)));
  EnvironmentInfo cut = h200();
  cut.sm_count = 114;
  EXPECT_FALSE(db->find_exact(cut, op_gat(), fp_hash(1)));
  // Stale build: a different template hash or library version is a miss...
  EnvironmentInfo stale = h200();
  stale.template_hash = "t-hash-2";
  EXPECT_FALSE(db->find_exact(stale, op_gat(), fp_hash(1)));
  stale = h200();
  stale.library_version = "0.2.0";
  EXPECT_FALSE(db->find_exact(stale, op_gat(), fp_hash(1)));
  // ...while driver / NVRTC versions are not part of the key, and tools may leave the stamp empty.
  EnvironmentInfo newer_driver = h200();
  newer_driver.driver_version = 13000;
  EXPECT_TRUE(db->find_exact(newer_driver, op_gat(), fp_hash(1)));
  EnvironmentInfo any = h200();
  any.template_hash.clear();
  any.library_version.clear();
  EXPECT_TRUE(db->find_exact(any, op_gat(), fp_hash(1)));

  // Results of the new build are kept apart from the old build's.
  stale = h200();
  stale.template_hash = "t-hash-2";
  ASSERT_TRUE(db->put_result(make_run(stale, op_gat(), 1, {cand(sched(4), 0.5)})));
  EXPECT_EQ(db->find_exact(stale, op_gat(), fp_hash(1))->schedule, sched(4));
  EXPECT_EQ(db->find_exact(h200(), op_gat(), fp_hash(1))->schedule, sched(16));
  EXPECT_TRUE(db->verify().empty());
}

TEST(TuningDbBasic, DefaultKeptWhenStatisticallyTied) {
  TempDir dir;
  auto db = TuningDb::open_user(dir / "t.db");
  // Within 1 % of the best: the default (lanes=32) stays.
  auto r = db->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1.005), cand(sched(16), 1.000)}));
  EXPECT_EQ(r->schedule, sched(32));
  EXPECT_EQ(r->runner_up_schedule, sched(16));
  // Within two standard errors (noisy measurements): tied, default stays.
  r = db->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 1.05, 4, 0.2), cand(sched(16), 1.0, 4, 0.2)}));
  EXPECT_EQ(r->schedule, sched(32));
  // Clearly faster: it wins.
  r = db->put_result(make_run(h200(), op_gat(), 3, {cand(sched(32), 1.0), cand(sched(16), 0.7)}));
  EXPECT_EQ(r->schedule, sched(16));
  // Equal means, neither is the default: the smaller schedule text wins.
  r = db->put_result(make_run(h200(), op_gat(), 4, {cand(sched(8), 0.7), cand(sched(16), 0.7)}));
  EXPECT_EQ(r->schedule, std::min(sched(8), sched(16)));
  // Policy without default preference.
  TuningDb::Options o;
  o.policy.tie = {0.0, 0.0, 0.0};
  auto strict = TuningDb::open_user(dir / "strict.db", o);
  r = strict->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1.005), cand(sched(16), 1.000)}));
  EXPECT_EQ(r->schedule, sched(16));
  // min_count: candidates with too few samples are not eligible.
  TuningDb::Options m;
  m.policy.min_count = 5;
  auto counted = TuningDb::open_user(dir / "count.db", m);
  r = counted->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1.0), cand(sched(16), 0.1, 2)}));
  EXPECT_EQ(r->schedule, sched(32));
}

TEST(TuningDbBasic, PoolsRunsExactlyAndIgnoresRepeatedRuns) {
  TempDir dir;
  auto db = TuningDb::open_user(dir / "t.db");
  const std::vector<double> s1 = {1.0, 1.2, 0.9, 1.1}, s2 = {1.3, 1.25, 1.4, 1.2, 1.35, 1.3};
  const std::vector<double> t1 = {1.5, 1.6}, t2 = {1.0, 1.05, 0.95};
  using dfgnn::db::summarize_samples;
  ASSERT_TRUE(db->put_result(make_run(h200(), op_gat(), 1,
                                      {summarize_samples(sched(32), 1, s1), summarize_samples(sched(16), 1, t1)},
                                      "run-a", 100)));
  auto r = db->put_result(make_run(h200(), op_gat(), 1,
                                   {summarize_samples(sched(32), 1, s2), summarize_samples(sched(16), 1, t2)},
                                   "run-b", 200, "other-host"));
  ASSERT_TRUE(r);
  std::vector<double> all = s1;
  all.insert(all.end(), s2.begin(), s2.end());
  const CandidateStat expect = summarize_samples(sched(32), 1, all);
  // Pooled lanes=32: mean 1.2, lanes=16: mean (3.1 + 3.0) / 5 = 1.22 -> lanes=32 (default, and fastest).
  EXPECT_EQ(r->schedule, sched(32));
  EXPECT_EQ(r->runs, 2);
  EXPECT_EQ(r->stats.count, expect.count);
  EXPECT_NEAR(r->stats.mean_ms, expect.mean_ms, 1e-12);
  EXPECT_NEAR(r->stats.variance, expect.variance(), 1e-12);
  EXPECT_DOUBLE_EQ(r->stats.min_ms, 0.9);
  // The location the winner policy reads: the runs' medians weighted by their counts.
  EXPECT_NEAR(r->stats.median_ms,
              (4 * summarize_samples("", 1, s1).median_ms + 6 * summarize_samples("", 1, s2).median_ms) / 10, 1e-12);
  EXPECT_EQ(r->host, "other-host");                                              // the latest run's
  EXPECT_EQ(r->unix_time, 200);
  const auto pooled = db->pooled_candidates(r->id);
  ASSERT_EQ(pooled.size(), 2u);
  EXPECT_EQ(pooled[0].schedule, sched(32));
  EXPECT_NEAR(pooled[0].m2, expect.m2, 1e-12);
  EXPECT_NEAR(pooled[1].mean_ms, 6.1 / 5, 1e-12);

  // Storing the same run id again changes nothing.
  const auto before = snapshot(*db);
  auto again = db->put_result(make_run(h200(), op_gat(), 1, {cand(sched(4), 0.01)}, "run-b", 300));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->runs, 2);
  EXPECT_EQ(snapshot(*db), before);
  // A run id may not be reused for another problem.
  EXPECT_EQ(expect_error([&] { db->put_result(make_run(h200(), op_gat(), 2, {cand(sched(4), 1)}, "run-b")); }).status(),
            DFGNN_STATUS_INVALID_ARGUMENT);
}

TEST(TuningDbBasic, RejectsMalformedRuns) {
  TempDir dir;
  auto db = TuningDb::open_user(dir / "t.db");
  auto status_of = [&](TuningRun run) {
    return expect_error([&] { db->put_result(run); }).status();
  };
  EXPECT_EQ(status_of(make_run(h200(), op_gat(), 1, {})), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(status_of(make_run(h200(), op_gat(), 1, {cand(sched(32), 1), cand(sched(32), 2)})),
            DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(status_of(make_run(h200(), op_gat(), 1, {cand(sched(32), 1, 0)})), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(status_of(make_run(h200(), op_gat(), 1, {cand(sched(32), std::nan(""))})), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(status_of(make_run(h200(), op_gat(), 1, {cand(sched(32), -1)})), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(status_of(make_run(h200(), op_gat(), 1, {cand("", 1)})), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(status_of(make_run(h200(), OpKey{0, 0, 0, 64, 0, 0}, 1, {cand(sched(32), 1)})),
            DFGNN_STATUS_INVALID_ARGUMENT);
  EnvironmentInfo no_stamp = h200();
  no_stamp.template_hash.clear();
  EXPECT_EQ(status_of(make_run(no_stamp, op_gat(), 1, {cand(sched(32), 1)})), DFGNN_STATUS_INVALID_ARGUMENT);
  // The fingerprint is opaque text here, but there must be one, printable, with a bucket key.
  TuningRun bad_fp = make_run(h200(), op_gat(), 1, {cand(sched(32), 1)});
  bad_fp.fingerprint.text.clear();
  EXPECT_EQ(status_of(bad_fp), DFGNN_STATUS_INVALID_ARGUMENT);
  bad_fp = make_run(h200(), op_gat(), 1, {cand(sched(32), 1)});
  bad_fp.fingerprint.bucket_key.clear();
  EXPECT_EQ(status_of(bad_fp), DFGNN_STATUS_INVALID_ARGUMENT);
  bad_fp = make_run(h200(), op_gat(), 1, {cand(sched(32), 1)});
  bad_fp.fingerprint.text += '\n';
  EXPECT_EQ(status_of(bad_fp), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(db->stats().runs, 0);
  // A site (read-only) database refuses writes.
  db->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1)}));
  db->export_to(dir / "site.db");
  // The database's own -wal holds writes not yet checkpointed: a snapshot renamed over it loses them.
  for (const char* sidecar : {"t.db-wal", "t.db-shm", "t.db-journal"}) {
    const bool existed = fs::exists(dir / sidecar);
    const std::string before = existed ? read_bytes(dir / sidecar) : "";
    const auto e = expect_error([&] { db->export_to(dir / sidecar); });
    EXPECT_EQ(dfgnn::db_status(e), DFGNN_STATUS_INVALID_ARGUMENT) << e.what();
    EXPECT_TRUE(contains(e.what(), "this database's")) << e.what();
    EXPECT_EQ(fs::exists(dir / sidecar), existed);
    if (existed) EXPECT_EQ(read_bytes(dir / sidecar), before);
  }
  EXPECT_EQ(db->stats().runs, 1);
  auto site = TuningDb::open_site(dir / "site.db");
  EXPECT_TRUE(site->read_only());
  EXPECT_EQ(expect_error([&] { site->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 1)})); }).status(),
            DFGNN_STATUS_DATABASE_ERROR);
}

TEST(TuningDbBasic, CandidatesForNearestNeighbourSearch) {
  TempDir dir;
  auto db = TuningDb::open_user(dir / "t.db");
  for (int k = 0; k < 4; ++k) db->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(8), 0.5)}));
  db->put_result(make_run(a100(), op_gat(), 5, {cand(sched(32), 1)}));        // other GPU
  db->put_result(make_run(h200(), op_gat(1), 6, {cand(sched(32), 1)}));       // other direction
  const auto all = db->candidates_for(h200(), op_gat());
  ASSERT_EQ(all.size(), 4u);
  std::set<std::string> hashes;
  std::map<std::string, dfgnn::db::FingerprintText> stored;  // hash -> what was handed over
  for (int k = 0; k < 4; ++k) stored[fp_hash(k)] = make_fp(k);
  for (const TuningResult& r : all) {
    hashes.insert(r.fingerprint_hash);
    ASSERT_EQ(stored.count(r.fingerprint_hash), 1u) << r.fingerprint_hash;
    EXPECT_EQ(r.fingerprint_text, stored[r.fingerprint_hash].text);  // returned as given, for the caller's distance
    EXPECT_EQ(r.bucket_key, stored[r.fingerprint_hash].bucket_key);
    EXPECT_EQ(r.schedule, sched(8));
  }
  EXPECT_EQ(hashes.size(), 4u);
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end(), [](const TuningResult& a, const TuningResult& b) {
    return a.fingerprint_hash < b.fingerprint_hash;
  }));
  const std::string bucket = make_fp(2).bucket_key;
  const auto in_bucket = db->candidates_for(h200(), op_gat(), bucket);
  ASSERT_GE(in_bucket.size(), 1u);
  for (const TuningResult& r : in_bucket) EXPECT_EQ(r.bucket_key, bucket);
  EXPECT_EQ(db->candidates_for(a100(), op_gat()).size(), 1u);
}

TEST(TuningDbBasic, ModulesAreContentAddressed) {
  TempDir dir;
  auto db = TuningDb::open_user(dir / "t.db");
  ModuleRecord m;
  m.key = "0123456789abcdef";
  m.image = std::vector<char>(70000);
  for (size_t i = 0; i < m.image.size(); ++i) m.image[i] = static_cast<char>(i * 7);
  m.names = {"dfgnn::fwd<1>", "dfgnn::bwd<2>"};
  m.lowered = {"_Z3fwdILi1EEvv", "_Z3bwdILi2EEvv"};
  m.arch = 90;
  m.nvrtc_version = 12080;
  m.template_hash = "t-hash-1";
  db->put_module(m);
  auto got = db->get_module(m.key);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->image, m.image);
  EXPECT_EQ(got->names, m.names);
  EXPECT_EQ(got->lowered, m.lowered);
  EXPECT_EQ(got->arch, 90);
  EXPECT_GT(got->created, 0);
  EXPECT_TRUE(db->get_module(m.key, "t-hash-1", 12080, 90));
  EXPECT_FALSE(db->get_module(m.key, "t-hash-2"));  // stale template
  EXPECT_FALSE(db->get_module(m.key, {}, 13000));   // another NVRTC
  EXPECT_FALSE(db->get_module(m.key, {}, 0, 80));   // another arch
  EXPECT_FALSE(db->get_module("missing"));
  ModuleRecord other = m;
  other.image = {'x'};
  db->put_module(other);  // same key: the first one stays
  EXPECT_EQ(db->get_module(m.key)->image, m.image);
  ModuleRecord bad = m;
  bad.lowered.pop_back();
  EXPECT_EQ(expect_error([&] { db->put_module(bad); }).status(), DFGNN_STATUS_INVALID_ARGUMENT);
  // A malformed stored row is a miss.
  db.reset();
  raw_exec(dir / "t.db", "UPDATE modules SET lowered_names = '{not json'");
  db = TuningDb::open_user(dir / "t.db");
  EXPECT_FALSE(db->get_module(m.key));
  EXPECT_FALSE(db->verify().empty());
}

// ------------------------------------------------------------------ decoding by column name

// Rows are decoded by column name: every field written through the public API comes back in its
// own field through every read path (put_result, find_exact, candidates_for, list,
// pooled_candidates, a merge, get_module). All values differ from each other, so a decoder that
// reads one column into another field fails here.
TEST(TuningDbColumns, EveryFieldRoundTripsThroughEveryReadPath) {
  TempDir dir;
  auto db = TuningDb::open_user(dir / "t.db");
  // Earlier rows, so that row ids, environment ids and counts all differ.
  ASSERT_TRUE(db->put_result(make_run(a100(), op_gat(), 1, {cand(sched(32), 1.0)})));
  ASSERT_TRUE(db->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1.0)})));
  ASSERT_TRUE(db->put_result(make_run(a100(), op_gat(1), 1, {cand(sched(32), 1.0)})));

  const EnvironmentInfo env{"GPU-X", 89, 77, 12345, 12061, "lib-9.8.7", "tmpl-abc"};
  const OpKey op{6, 9, 12, 40, 5, 13};
  auto stat = [](const char* schedule, int32_t solver, int64_t count, double mean, double m2, double min,
                 double median) { return CandidateStat{schedule, solver, count, mean, m2, min, median}; };
  const CandidateStat a = stat("s-a", 3, 17, 2.5, 0.06, 2.1, 2.4);   // the default
  const CandidateStat b = stat("s-b", 7, 11, 1.7, 0.2, 1.2, 1.5);    // the winner
  const CandidateStat c = stat("s-c", 4, 23, 2.0, 0.04, 1.8, 1.9);   // the runner-up
  const CandidateStat d = stat("s-d", 8, 29, 3.5, 0.08, 3.25, 3.3);  // only in the newer run
  TuningRun older;
  older.environment = env;
  older.op = op;
  older.fingerprint = make_fp(3);
  older.default_schedule = "s-x";  // the newer run's default counts
  older.candidates = {c, a, b};
  older.host = "host-p";
  older.unix_time = 1234000;
  older.tool_version = "tool-y";
  older.run_id = "run-older";
  TuningRun newer = older;
  newer.default_schedule = "s-a";
  newer.candidates = {d};
  newer.host = "host-q";
  newer.unix_time = 1234567;
  newer.tool_version = "tool-z";
  newer.run_id = "run-newer";
  ASSERT_TRUE(db->put_result(older));
  const std::optional<TuningResult> put = db->put_result(newer);
  ASSERT_TRUE(put);

  // The row ids, independently from the file.
  const fs::path file = dir / "t.db";
  const int64_t id = raw_int(file, "SELECT max(id) FROM results");
  const int64_t env_id = raw_int(file, "SELECT id FROM environments WHERE gpu_name = 'GPU-X'");
  ASSERT_EQ(id, 4);
  ASSERT_EQ(env_id, 3);

  auto expect_result = [&](const TuningResult& r, bool same_file, const std::string& where) {
    SCOPED_TRACE(where);
    if (same_file) {
      EXPECT_EQ(r.id, id);
      EXPECT_EQ(r.environment_id, env_id);
    }
    EXPECT_EQ(r.env_class, "GPU-X|sm_89|77");
    EXPECT_EQ(r.template_hash, "tmpl-abc");
    EXPECT_EQ(r.library_version, "lib-9.8.7");
    EXPECT_EQ(r.op, op);
    EXPECT_EQ(r.fingerprint_text, make_fp(3).text);
    EXPECT_EQ(r.fingerprint_hash, fp_hash(3));
    EXPECT_EQ(r.bucket_key, make_fp(3).bucket_key);
    EXPECT_EQ(r.solver_id, 7);
    EXPECT_EQ(r.schedule, "s-b");
    EXPECT_EQ(r.stats.count, 11);
    EXPECT_EQ(r.stats.median_ms, 1.5);
    EXPECT_EQ(r.stats.mean_ms, 1.7);
    EXPECT_DOUBLE_EQ(r.stats.variance, 0.2 / 10);
    EXPECT_EQ(r.stats.min_ms, 1.2);
    EXPECT_EQ(r.default_schedule, "s-a");
    EXPECT_EQ(r.default_median_ms, 2.4);
    EXPECT_EQ(r.runner_up_schedule, "s-c");
    EXPECT_EQ(r.runner_up_median_ms, 1.9);
    EXPECT_EQ(r.host, "host-q");
    EXPECT_EQ(r.unix_time, 1234567);
    EXPECT_EQ(r.tool_version, "tool-z");
    EXPECT_EQ(r.environment, env);
    EXPECT_EQ(r.runs, 2);
  };
  expect_result(*put, true, "put_result");
  EXPECT_EQ(put->source, file.string());
  const std::optional<TuningResult> hit = db->find_exact(env, op, fp_hash(3));
  ASSERT_TRUE(hit);
  expect_result(*hit, true, "find_exact");
  const std::vector<TuningResult> near = db->candidates_for(env, op);
  ASSERT_EQ(near.size(), 1u);
  expect_result(near[0], true, "candidates_for");
  int listed = 0;
  for (const auto& l : db->list("GPU-X|sm_89|77")) {
    EXPECT_EQ(l.problem, "");
    expect_result(l.result, true, "list");
    ++listed;
  }
  EXPECT_EQ(listed, 1);

  auto expect_pooled = [&](const std::vector<CandidateStat>& got, const std::string& where) {
    SCOPED_TRACE(where);
    const std::vector<CandidateStat> want = {b, c, a, d};  // by mean; one run each, so as stored
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].schedule, want[i].schedule);
      EXPECT_EQ(got[i].solver_id, want[i].solver_id);
      EXPECT_EQ(got[i].count, want[i].count);
      EXPECT_EQ(got[i].mean_ms, want[i].mean_ms);
      EXPECT_EQ(got[i].m2, want[i].m2);
      EXPECT_EQ(got[i].min_ms, want[i].min_ms);
      EXPECT_EQ(got[i].median_ms, want[i].median_ms);
    }
  };
  expect_pooled(db->pooled_candidates(id), "pooled_candidates");

  ModuleRecord m;
  m.key = "feedface";
  m.image = {'\x7f', 'E', 'L', 'F', '\0', '\x01'};
  m.names = {"dfgnn::k<3>", "dfgnn::k<4>"};
  m.lowered = {"_Z1kILi3EEvv", "_Z1kILi4EEvv"};
  m.arch = 89;
  m.nvrtc_version = 12061;
  m.template_hash = "tmpl-abc";
  m.created = 1111111;
  db->put_module(m);
  auto expect_module = [&](const std::optional<ModuleRecord>& got, const std::string& where) {
    SCOPED_TRACE(where);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->key, m.key);
    EXPECT_EQ(got->image, m.image);
    EXPECT_EQ(got->names, m.names);
    EXPECT_EQ(got->lowered, m.lowered);
    EXPECT_EQ(got->arch, 89);
    EXPECT_EQ(got->nvrtc_version, 12061);
    EXPECT_EQ(got->template_hash, "tmpl-abc");
    EXPECT_EQ(got->created, 1111111);
  };
  expect_module(db->get_module(m.key), "get_module");
  EXPECT_TRUE(db->verify().empty());

  // A merge reads the source's runs, environments, fingerprints, candidates and modules by name too.
  auto merged = TuningDb::open_user(dir / "merged.db");
  const dfgnn::db::MergeReport report = merged->merge_from(file);
  EXPECT_EQ(report.runs_added, 5);
  EXPECT_EQ(report.runs_rejected + report.candidates_rejected + report.modules_rejected, 0);
  EXPECT_EQ(report.modules_added, 1);
  const std::optional<TuningResult> again = merged->find_exact(env, op, fp_hash(3));
  ASSERT_TRUE(again);
  expect_result(*again, false, "after merge_from");
  expect_pooled(merged->pooled_candidates(again->id), "pooled after merge_from");
  expect_module(merged->get_module(m.key), "get_module after merge_from");
  EXPECT_TRUE(merged->verify().empty());
}

// The statement wrapper under the decoders: columns are found by name in any order; a name the
// query lacks and a name it has twice are errors naming the query and the column.
TEST(TuningDbColumns, QueryReadsByNameAndRejectsUnknownOrAmbiguousColumns) {
  using dfgnn::db::detail::Connection;
  using dfgnn::db::detail::Query;
  using dfgnn::db::detail::RowReader;
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open_v2(":memory:", &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr), SQLITE_OK);
  Connection conn(handle, "(test)");
  conn.exec("CREATE TABLE t (x INTEGER, y TEXT, z REAL); INSERT INTO t VALUES (7, 'seven', 0.5)");
  // The same row through two select lists in opposite orders.
  static const std::string forward = "SELECT " + dfgnn::db::detail::select_list("a", "t", {"x", "y", "z"}) + " FROM t a";
  static const std::string backward = "SELECT " + dfgnn::db::detail::select_list("a", "t", {"z", "y", "x"}) + " FROM t a";
  for (const std::string* sql : {&forward, &backward}) {
    Query q(conn, sql->c_str());
    ASSERT_TRUE(q.step());
    RowReader in(q);
    EXPECT_EQ(in.integer("t.x"), 7) << *sql;
    EXPECT_EQ(in.text("t.y"), "seven") << *sql;
    EXPECT_EQ(in.real("t.z"), 0.5) << *sql;
    EXPECT_EQ(in.problem(), "") << *sql;
    // A value of the wrong storage class is the row's problem, named by its column.
    EXPECT_EQ(in.integer("t.y"), 0);
    EXPECT_EQ(in.problem(), "column t.y: holds a TEXT value, not an integer");
    // A column the query does not select is a defect, reported as such.
    const auto unknown = expect_error([&] { in.integer("t.w"); });
    EXPECT_TRUE(contains(unknown.what(), "has no column \"t.w\"")) << unknown.what();
    EXPECT_TRUE(contains(unknown.what(), "t.x, t.y, t.z")) << unknown.what();
    EXPECT_TRUE(contains(expect_error([&] { q.text("x"); }).what(), "has no column \"x\""));
  }
  // Two columns of one name (a join without AS names) cannot be read by name: refused when prepared.
  const auto twice = expect_error([&] { Query q(conn, "SELECT a.x, b.x FROM t a, t b"); });
  EXPECT_TRUE(contains(twice.what(), "two columns named \"x\"")) << twice.what();
}

// ------------------------------------------------------------------ schema versions

TEST(TuningDbSchema, BuiltInStepsReachTheAdvertisedVersion) {
  EXPECT_EQ(dfgnn::db::detail::target_version(dfgnn::db::detail::builtin_migrations()), dfgnn::db::kSchemaVersion);
}

TEST(TuningDbSchema, NewerVersionIsRefusedAndLeftUntouched) {
  TempDir dir;
  const fs::path p = dir / "t.db";
  { TuningDb::open_user(p)->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1)})); }
  raw_exec(p, "PRAGMA user_version = 7");
  const std::string bytes = read_bytes(p);
  const auto e = expect_error([&] { TuningDb::open_user(p); });
  EXPECT_EQ(dfgnn::db_status(e), DFGNN_STATUS_DATABASE_ERROR);
  EXPECT_TRUE(contains(e.what(), fmt::format("schema version 7 is newer than this dfgnn supports ({})",
                                            dfgnn::db::kSchemaVersion)))
      << e.what();
  EXPECT_TRUE(contains(e.what(), p.string())) << e.what();
  EXPECT_TRUE(contains(expect_error([&] { TuningDb::open_site(p); }).what(), "newer than this dfgnn supports"));
  EXPECT_EQ(read_bytes(p), bytes);
}

// Found by fuzz_db_open: the journal switch to WAL used to come before checks that then refused the
// file, and a version-0 file was judged by its tables alone.
TEST(TuningDbSchema, NegativeVersionOrViewWithoutVersionIsRefusedAndLeftUntouched) {
  TempDir dir;
  const fs::path negative = dir / "negative.db";
  { TuningDb::open_user(negative)->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1)})); }
  raw_exec(negative, "PRAGMA journal_mode = DELETE; PRAGMA user_version = -5");
  const std::string negative_bytes = read_bytes(negative);
  const auto e = expect_error([&] { TuningDb::open_user(negative); });
  EXPECT_EQ(dfgnn::db_status(e), DFGNN_STATUS_DATABASE_ERROR);
  EXPECT_TRUE(contains(e.what(), "schema version -5")) << e.what();
  EXPECT_TRUE(contains(expect_error([&] { TuningDb::open_site(negative); }).what(), "schema version -5"));
  EXPECT_EQ(read_bytes(negative), negative_bytes);

  // A view is no table, but the file is not an empty one either.
  const fs::path view = dir / "view.db";
  raw_exec(view, "CREATE VIEW answers AS SELECT 42 AS answer");
  const std::string view_bytes = read_bytes(view);
  EXPECT_TRUE(contains(expect_error([&] { TuningDb::open_user(view); }).what(), "other schema objects"));
  EXPECT_EQ(read_bytes(view), view_bytes);
}

TEST(TuningDbSchema, EmptyFileIsInitialisedForeignFileRefused) {
  TempDir dir;
  write_bytes(dir / "empty.db", "");
  auto db = TuningDb::open_user(dir / "empty.db");
  EXPECT_EQ(db->schema_version(), dfgnn::db::kSchemaVersion);
  EXPECT_EQ(raw_int(dir / "empty.db", "PRAGMA application_id"), dfgnn::db::detail::kApplicationId);
  // Another application's SQLite file: not ours, refused, untouched.
  raw_exec(dir / "foreign.db", "CREATE TABLE customers (name TEXT); INSERT INTO customers VALUES ('x')");
  const std::string bytes = read_bytes(dir / "foreign.db");
  EXPECT_TRUE(contains(expect_error([&] { TuningDb::open_user(dir / "foreign.db"); }).what(), "not a dfgnn"));
  EXPECT_EQ(read_bytes(dir / "foreign.db"), bytes);
  raw_exec(dir / "app.db", "PRAGMA application_id = 1234");
  EXPECT_TRUE(contains(expect_error([&] { TuningDb::open_user(dir / "app.db"); }).what(), "application id"));
  // A site database must exist and hold a schema.
  EXPECT_TRUE(contains(expect_error([&] { TuningDb::open_site(dir / "missing.db"); }).what(), "does not exist"));
}

void add_note_column(dfgnn::db::detail::Connection& c) {
  c.exec("ALTER TABLE results ADD COLUMN note TEXT DEFAULT 'migrated'; CREATE TABLE extra (x INTEGER)");
}
void failing_step(dfgnn::db::detail::Connection& c) {
  c.exec("ALTER TABLE results ADD COLUMN doomed TEXT");
  throw dfgnn::db::DbError(dfgnn::db::ErrorKind::Other, "step failed on purpose");
}

TEST(TuningDbSchema, OlderVersionIsMigrated) {
  using dfgnn::db::detail::Migration;
  TempDir dir;
  const fs::path p = dir / "t.db";
  {
    auto v1 = TuningDb::open_user(p);
    v1->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1), cand(sched(16), 0.5)}));
    v1->export_to(dir / "site-v1.db");
  }
  // A future build with one more step (now -> next): the user file is migrated in place.
  constexpr int now = dfgnn::db::kSchemaVersion, next = now + 1;
  std::vector<Migration> v2_steps = dfgnn::db::detail::builtin_migrations();
  v2_steps.push_back(Migration{now, "test: add results.note", &add_note_column});
  TuningDb::Options o2;
  o2.migrations = &v2_steps;
  {
    auto v2 = TuningDb::open_user(p, o2);
    EXPECT_EQ(v2->schema_version(), next);
    auto hit = v2->find_exact(h200(), op_gat(), fp_hash(1));
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->schedule, sched(16));
    v2->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 1)}));
    EXPECT_TRUE(v2->verify().empty());
  }
  EXPECT_EQ(raw_int(p, "PRAGMA user_version"), next);
  EXPECT_EQ(raw_int(p, "SELECT count(*) FROM results WHERE note = 'migrated'"), 2);
  // This build now refuses the file.
  EXPECT_TRUE(contains(expect_error([&] { TuningDb::open_user(p); }).what(),
                       fmt::format("schema version {} is newer than this dfgnn supports ({})", next, now)));
  // A read-only older site file is migrated in memory; the file is not touched.
  const std::string site_bytes = read_bytes(dir / "site-v1.db");
  {
    auto site = TuningDb::open_site(dir / "site-v1.db", o2);
    EXPECT_EQ(site->schema_version(), next);
    EXPECT_TRUE(site->find_exact(h200(), op_gat(), fp_hash(1)));
  }
  EXPECT_EQ(read_bytes(dir / "site-v1.db"), site_bytes);
  // A failing step rolls the whole migration back.
  std::vector<Migration> broken = dfgnn::db::detail::builtin_migrations();
  broken.push_back(Migration{now, "test: broken", &failing_step});
  TuningDb::Options ob;
  ob.migrations = &broken;
  fs::copy_file(dir / "site-v1.db", dir / "v1.db");
  const auto e = expect_error([&] { TuningDb::open_user(dir / "v1.db", ob); });
  EXPECT_TRUE(contains(e.what(), fmt::format("migration \"test: broken\" (version {} -> {}) failed", now, next)))
      << e.what();
  EXPECT_EQ(raw_int(dir / "v1.db", "PRAGMA user_version"), now);
  EXPECT_EQ(raw_int(dir / "v1.db", "SELECT count(*) FROM pragma_table_info('results') WHERE name = 'doomed'"), 0);
  EXPECT_TRUE(TuningDb::open_user(dir / "v1.db")->find_exact(h200(), op_gat(), fp_hash(1)));
}

// Schema 1 named OpKey::key_bits's column `variant`: a version-1 file (user or site) is migrated to the
// column's new name with its rows, and answers as before.
TEST(TuningDbSchema, Version1VariantColumnBecomesKeyBits) {
  using dfgnn::db::detail::Migration;
  TempDir dir;
  const fs::path p = dir / "v1.db";
  OpKey op = op_gat();
  op.key_bits = 20;
  {
    auto db = TuningDb::open_user(p);
    db->put_result(make_run(h200(), op, 1, {cand(sched(32), 1), cand(sched(16), 0.5)}));
  }
  // Undo step 1 -> 2 by hand, and check the result is exactly what schema 1 creates.
  raw_exec(p, "ALTER TABLE results RENAME COLUMN key_bits TO variant; PRAGMA user_version = 1");
  const std::vector<Migration> v1_steps = {dfgnn::db::detail::builtin_migrations().front()};
  TuningDb::Options o1;
  o1.migrations = &v1_steps;
  TuningDb::open_user(dir / "fresh-v1.db", o1);
  const std::string objects = "SELECT group_concat(type || name || sql, ';') FROM "
                              "(SELECT * FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name)";
  ASSERT_EQ(raw_text(p, objects), raw_text(dir / "fresh-v1.db", objects));
  ASSERT_EQ(raw_int(p, "SELECT count(*) FROM results WHERE variant = 20"), 1);
  fs::copy_file(p, dir / "site-v1.db");
  const std::string site_bytes = read_bytes(dir / "site-v1.db");

  {
    auto db = TuningDb::open_user(p);
    EXPECT_EQ(db->schema_version(), 2);
    const auto hit = db->find_exact(h200(), op, fp_hash(1));
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->op, op);
    EXPECT_EQ(hit->schedule, sched(16));
    EXPECT_FALSE(db->find_exact(h200(), op_gat(), fp_hash(1)));  // other key bits: another problem
    EXPECT_TRUE(db->verify().empty());  // also: the migrated schema matches a new file's
  }
  EXPECT_EQ(raw_int(p, "PRAGMA user_version"), 2);
  EXPECT_EQ(raw_int(p, "SELECT count(*) FROM pragma_table_info('results') WHERE name = 'variant'"), 0);
  EXPECT_EQ(raw_int(p, "SELECT count(*) FROM results WHERE key_bits = 20"), 1);
  {
    auto site = TuningDb::open_site(dir / "site-v1.db");  // migrated in memory, the file untouched
    EXPECT_EQ(site->schema_version(), 2);
    const auto hit = site->find_exact(h200(), op, fp_hash(1));
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->schedule, sched(16));
  }
  EXPECT_EQ(read_bytes(dir / "site-v1.db"), site_bytes);
}

// ------------------------------------------------------------------ robustness

TEST(TuningDbRobustness, GarbageFileGivesClearErrorAndIsKept) {
  TempDir dir;
  std::string garbage(8192, '\0');
  std::mt19937 rng(7);
  for (char& c : garbage) c = static_cast<char>(rng());
  for (const std::string& content : {garbage, std::string("SQLite format 3")}) {
    const fs::path p = dir / "garbage.db";
    write_bytes(p, content);
    const auto e = expect_error([&] { TuningDb::open_user(p); });
    EXPECT_EQ(dfgnn::db_status(e), DFGNN_STATUS_DATABASE_ERROR);
    EXPECT_TRUE(contains(e.what(), p.string())) << e.what();
    EXPECT_TRUE(contains(e.what(), "not an SQLite database")) << e.what();
    EXPECT_EQ(expect_error([&] { TuningDb::open_site(p); }).status(), DFGNN_STATUS_DATABASE_ERROR);
    EXPECT_EQ(read_bytes(p), content);
    EXPECT_FALSE(fs::exists(dir / "garbage.db-wal"));
  }
  // A valid header followed by garbage: SQLite's own message comes through.
  std::string header_then_garbage = garbage;
  {
    TuningDb::open_user(dir / "good.db")->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1)}));
    TuningDb::open_user(dir / "good.db")->export_to(dir / "snap.db");
    const std::string good = read_bytes(dir / "snap.db");
    header_then_garbage = good.substr(0, 100);
    while (header_then_garbage.size() < good.size()) header_then_garbage += static_cast<char>(rng());
  }
  write_bytes(dir / "mixed.db", header_then_garbage);
  const auto e = expect_error([&] { TuningDb::open_user(dir / "mixed.db"); });
  EXPECT_EQ(dfgnn::db_status(e), DFGNN_STATUS_DATABASE_ERROR);
  EXPECT_TRUE(contains(e.what(), "SQLite")) << e.what();
  EXPECT_EQ(read_bytes(dir / "mixed.db"), header_then_garbage);
}

TEST(TuningDbRobustness, TruncatedFileGivesClearError) {
  TempDir dir;
  const fs::path p = dir / "t.db";
  {
    auto db = TuningDb::open_user(p);
    for (int k = 0; k < 40; ++k) db->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(8), 2)}));
    ModuleRecord m{"k1", std::vector<char>(200000, 'c'), {"n"}, {"l"}, 90, 12080, "t-hash-1", 0};
    db->put_module(m);
  }  // last connection closed: WAL checkpointed into the file
  ASSERT_FALSE(fs::exists(dir / "t.db-wal"));
  const std::string full = read_bytes(p);
  for (size_t keep : {full.size() / 2, size_t{4096}, size_t{50}}) {
    write_bytes(p, full.substr(0, keep));
    const auto e = expect_error([&] { TuningDb::open_user(p); });
    EXPECT_EQ(dfgnn::db_status(e), DFGNN_STATUS_DATABASE_ERROR);
    EXPECT_TRUE(contains(e.what(), p.string()));
    EXPECT_TRUE(contains(e.what(), keep >= 100 ? "truncated" : "not an SQLite database")) << e.what();
    EXPECT_EQ(read_bytes(p).size(), keep);  // untouched
    // The layered database falls back: no user database, reads answer nothing, writes say why.
    LayeredDb::Options lo;
    lo.user_path = p;
    lo.site_paths = std::vector<fs::path>{};
    LayeredDb layered(lo);
    EXPECT_EQ(layered.user(), nullptr);
    ASSERT_EQ(layered.open_errors().size(), 1u);
    EXPECT_FALSE(layered.find_exact(h200(), op_gat(), fp_hash(1)));
    const auto w = expect_error([&] { layered.put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1)})); });
    EXPECT_EQ(dfgnn::db_status(w), DFGNN_STATUS_DATABASE_ERROR);
    EXPECT_TRUE(contains(w.what(), "unusable")) << w.what();
  }
}

// A reader of a path that exports keep replacing (rename over it) sees one whole snapshot or the
// next, never one file's size with another's header (a false "truncated file").
TEST(TuningDbRobustness, ReaderOfAReplacedSnapshotSeesOneWholeFile) {
  TempDir dir;
  const fs::path small = dir / "small.db", big = dir / "big.db", path = dir / "site.db";
  {
    auto db = TuningDb::open_user(dir / "user.db");
    db->put_result(make_run(h200(), op_gat(), 0, {cand(sched(32), 1)}));
    db->export_to(small);
    for (int k = 1; k < 400; ++k) db->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(8), 2)}));
    db->export_to(big);
  }
  ASSERT_GT(fs::file_size(big), 8 * fs::file_size(small));
  fs::copy_file(small, path);
  const pid_t swapper = spawn([&] {  // replaces path by the other snapshot, as fast as it can
    const fs::path tmp = dir / "site.db.next";
    for (uint64_t i = 0;; ++i) {
      if (link((i % 2 ? small : big).c_str(), tmp.c_str()) != 0 || rename(tmp.c_str(), path.c_str()) != 0) return 1;
    }
    return 0;
  });
  int opens = 0;
  std::vector<std::string> errors;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  while (std::chrono::steady_clock::now() < until || opens < 200) {
    try {
      const int64_t results = TuningDb::open_site(path)->stats().results;
      if (results != 1 && results != 400) errors.push_back(fmt::format("{} results", results));
    } catch (const std::exception& e) {
      errors.push_back(e.what());
    }
    ++opens;
  }
  kill(swapper, SIGKILL);
  wait_exit(swapper);
  EXPECT_TRUE(errors.empty()) << errors.size() << " of " << opens << " opens failed, e.g. " << errors.front();
}

TEST(TuningDbRobustness, CorruptedPagesAreErrorsOrMissesNeverCrashes) {
  TempDir dir;
  {
    auto db = TuningDb::open_user(dir / "t.db");
    for (int k = 0; k < 120; ++k)
      db->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(8), 0.5), cand(sched(4), 0.7)}));
    db->export_to(dir / "site.db");
  }
  std::string bytes = read_bytes(dir / "site.db");
  ASSERT_GT(bytes.size(), 40000u);
  for (size_t i = 4096 * 3; i < bytes.size() - 4096; i += 4096 * 3)  // every third page from the fourth
    for (size_t j = 0; j < 512; ++j) bytes[i + 300 + j] = static_cast<char>(0xA5 ^ j);
  write_bytes(dir / "site.db", bytes);
  int errors = 0, hits = 0, misses = 0;
  try {
    auto site = TuningDb::open_site(dir / "site.db");
    for (int k = 0; k < 120; ++k) {
      try {
        if (auto r = site->find_exact(h200(), op_gat(), fp_hash(k))) {
          EXPECT_EQ(r->schedule, sched(8));  // a hit is never a garbled row
          ++hits;
        } else {
          ++misses;
        }
      } catch (const dfgnn::db::DbError& e) {
        EXPECT_EQ(dfgnn::db_status(e), DFGNN_STATUS_DATABASE_ERROR);
        ++errors;
      }
    }
    EXPECT_FALSE(site->verify().empty());
  } catch (const dfgnn::db::DbError& e) {
    EXPECT_EQ(dfgnn::db_status(e), DFGNN_STATUS_DATABASE_ERROR);
    ++errors;
  }
  EXPECT_GT(errors + misses, 0);
  // Layered over a good user database: the user's answers still come, the broken site never throws.
  {
    auto user = TuningDb::open_user(dir / "user.db");
    user->put_result(make_run(h200(), op_gat(), 7, {cand(sched(16), 0.1)}));
  }
  LayeredDb::Options lo;
  lo.user_path = dir / "user.db";
  lo.site_paths = std::vector<fs::path>{dir / "site.db"};
  LayeredDb layered(lo);
  EXPECT_EQ(layered.find_exact(h200(), op_gat(), fp_hash(7))->schedule, sched(16));
  for (int k = 0; k < 120; ++k) EXPECT_NO_THROW(layered.find_exact(h200(), op_gat(), fp_hash(k)));
  EXPECT_NO_THROW(layered.candidates_for(h200(), op_gat()));
}

// A module read through the layers says which layer and file it came from (explain's "module").
TEST(LayeredDb, ModuleLookupNamesTheLayerAndFileItCameFrom) {
  TempDir dir;
  ModuleRecord m;
  m.key = "feedbeef00000001";
  m.image = std::vector<char>(100, 'x');
  m.names = {"dfgnn::fwd<1>"};
  m.lowered = {"_Z3fwdILi1EEvv"};
  m.arch = 90;
  m.nvrtc_version = 13000;
  m.template_hash = "t-hash";
  ModuleRecord user_only = m;
  user_only.key = "feedbeef00000002";
  TuningDb::open_user(dir / "site.db")->put_module(m);
  TuningDb::open_user(dir / "user.db")->put_module(user_only);
  LayeredDb::Options lo;
  lo.user_path = dir / "user.db";
  lo.site_paths = std::vector<fs::path>{dir / "site.db"};
  LayeredDb layered(lo);
  const auto from_site = layered.get_module(m.key, "t-hash", 13000, 90);
  ASSERT_TRUE(from_site);
  EXPECT_EQ(from_site->layer, "site");
  EXPECT_EQ(from_site->source, (dir / "site.db").string());
  EXPECT_EQ(from_site->image, m.image);
  const auto from_user = layered.get_module(user_only.key, "t-hash", 13000, 90);
  ASSERT_TRUE(from_user);
  EXPECT_EQ(from_user->layer, "user");
  EXPECT_EQ(from_user->source, (dir / "user.db").string());
  EXPECT_FALSE(layered.get_module(m.key, "another-hash", 13000, 90));  // a stale module is no answer
}

TEST(TuningDbRobustness, WriterKilledMidTransactionLeavesUsableDatabase) {
  TempDir dir;
  const fs::path p = dir / "t.db";
  {
    auto db = TuningDb::open_user(p);
    for (int k = 0; k < 5; ++k) db->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(8), 0.5)}));
  }
  const int64_t environments_before = raw_int(p, "SELECT count(*) FROM environments");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  // The child holds the write lock and has written far more than the page cache (spilled into the
  // WAL) when it is killed.
  const pid_t child = spawn([&] {
    close(ready[0]);
    auto db = TuningDb::open_user(p);  // schema in place, WAL
    sqlite3* h = nullptr;
    if (sqlite3_open(p.c_str(), &h) != SQLITE_OK) return 10;
    sqlite3_busy_timeout(h, 10000);
    if (sqlite3_exec(h, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) return 11;
    sqlite3_stmt* s = nullptr;
    sqlite3_prepare_v2(h,
                       "INSERT INTO environments (env_class, gpu_name, compute_capability, sm_count, driver_version, "
                       "nvrtc_version, library_version, template_hash) VALUES ('x', ?1, 1, 1, 1, 1, 'v', "
                       "'some-long-template-hash-to-fill-pages-quickly')",
                       -1, &s, nullptr);
    for (int64_t i = 0;; ++i) {
      const std::string name = "killed-gpu-" + std::to_string(i) + std::string(64, 'z');
      sqlite3_bind_text(s, 1, name.c_str(), -1, SQLITE_TRANSIENT);
      if (sqlite3_step(s) != SQLITE_DONE) return 12;
      sqlite3_reset(s);
      if (i == 30000) {
        const char c = 'x';
        if (write(ready[1], &c, 1) != 1) return 13;
      }
    }
  });
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1) << "child failed before its transaction was under way";
  close(ready[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kill(child, SIGKILL);
  EXPECT_EQ(wait_exit(child), 128 + SIGKILL);
  EXPECT_TRUE(fs::exists(dir / "t.db-wal"));
  EXPECT_GT(fs::file_size(dir / "t.db-wal"), 0u);  // uncommitted frames were written

  auto db = TuningDb::open_user(p);
  EXPECT_TRUE(db->verify().empty());
  EXPECT_EQ(db->stats().environments, environments_before);
  for (int k = 0; k < 5; ++k) EXPECT_EQ(db->find_exact(h200(), op_gat(), fp_hash(k))->schedule, sched(8));
  EXPECT_TRUE(db->put_result(make_run(h200(), op_gat(), 9, {cand(sched(32), 1)})));
  EXPECT_TRUE(db->verify().empty());
}

TEST(TuningDbRobustness, WriterKilledDuringPutsLosesNoCommittedRow) {
  TempDir dir;
  const fs::path p = dir / "t.db";
  TuningDb::open_user(p);
  const pid_t child = spawn([&] {
    auto db = TuningDb::open_user(p);
    for (int i = 0;; ++i)
      db->put_result(make_run(h200(), op_gat(), i % 7,
                              {cand(sched(32), 1 + i * 1e-3), cand(sched(16), 0.9), cand(sched(8), 0.8),
                               cand(sched(4), 1.2)}));
    return 0;
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (raw_int(p, "SELECT count(*) FROM runs") < 40 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  kill(child, SIGKILL);
  EXPECT_EQ(wait_exit(child), 128 + SIGKILL);
  auto db = TuningDb::open_user(p);
  const auto st = db->stats();
  EXPECT_GE(st.runs, 40);
  EXPECT_EQ(st.candidate_stats, 4 * st.runs);  // every committed run is complete
  EXPECT_EQ(st.results, 7);
  EXPECT_TRUE(db->verify().empty());
  for (int k = 0; k < 7; ++k) EXPECT_EQ(db->find_exact(h200(), op_gat(), fp_hash(k))->schedule, sched(8));
}

// ------------------------------------------------------------------ concurrency

// Deterministic run number `i` of writer `w`: five overlapping problems, four candidates whose
// means depend on the writer, so the pooled winner depends on all runs.
TuningRun concurrent_run(int w, int i) {
  const int problem = i % 5;
  std::vector<CandidateStat> cs;
  const int lanes[4] = {4, 8, 16, 32};
  for (int s = 0; s < 4; ++s) {
    const double mean = 1.0 + 0.05 * ((s * 7 + problem * 3 + w * 5 + i) % 11);
    cs.push_back(cand(sched(lanes[s]), mean, 3 + (w + s) % 4, 0.02));
  }
  return make_run(h200(), op_gat(), problem, cs, "w" + std::to_string(w) + "-i" + std::to_string(i),
                  1000 + 100 * i + w, "host-" + std::to_string(w));
}

TEST(TuningDbConcurrency, ProcessesShareOneFile) {
  TempDir dir;
  const fs::path p = dir / "shared/tuning.db";  // not created yet: the writers race to create it
  constexpr int kWriters = 8, kRuns = 25;
  std::vector<pid_t> pids;
  for (int w = 0; w < kWriters; ++w)
    pids.push_back(spawn([&, w] {
      auto db = TuningDb::open_user(p, with_validator());
      for (int i = 0; i < kRuns; ++i) {
        auto r = db->put_result(concurrent_run(w, i));
        if (!r || subwarp_only(*r) != "") return 20;
        // Concurrent reads see only whole, valid rows.
        auto other = db->find_exact(h200(), op_gat(), fp_hash((i + 1) % 5));
        if (other && (subwarp_only(*other) != "" || other->runs < 1)) return 21;
        for (const TuningResult& c : db->candidates_for(h200(), op_gat()))
          if (subwarp_only(c) != "") return 22;
      }
      return 0;
    }));
  // A pure reader alongside: counts never go backwards, every row it sees is valid.
  pids.push_back(spawn([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!fs::exists(p) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto db = TuningDb::open_user(p, with_validator());
    int64_t last = 0;
    while (last < kWriters * kRuns && std::chrono::steady_clock::now() < deadline) {
      int64_t runs = 0;
      for (const TuningResult& c : db->candidates_for(h200(), op_gat())) runs += c.runs;
      if (runs < last) return 30;
      last = runs;
    }
    return last == kWriters * kRuns ? 0 : 31;
  }));
  for (pid_t pid : pids) EXPECT_EQ(wait_exit(pid), 0);

  auto db = TuningDb::open_user(p, with_validator());
  const auto st = db->stats();
  EXPECT_EQ(st.runs, kWriters * kRuns);  // no lost rows
  EXPECT_EQ(st.candidate_stats, kWriters * kRuns * 4);
  EXPECT_EQ(st.results, 5);
  EXPECT_TRUE(db->verify().empty());
  // Same decisions as a single process writing the same runs in the opposite order.
  auto reference = TuningDb::open_user(dir / "reference.db", with_validator());
  for (int i = kRuns - 1; i >= 0; --i)
    for (int w = kWriters - 1; w >= 0; --w) reference->put_result(concurrent_run(w, i));
  EXPECT_EQ(snapshot(*db), snapshot(*reference));
  // Every process now dispatches identically.
  std::vector<std::string> decisions;
  for (int k = 0; k < 5; ++k) decisions.push_back(db->find_exact(h200(), op_gat(), fp_hash(k))->schedule);
  std::vector<pid_t> readers;
  for (int r = 0; r < 4; ++r)
    readers.push_back(spawn([&] {
      auto mine = TuningDb::open_user(p, with_validator());
      for (int k = 0; k < 5; ++k)
        if (mine->find_exact(h200(), op_gat(), fp_hash(k))->schedule != decisions[k]) return 40;
      return 0;
    }));
  for (pid_t pid : readers) EXPECT_EQ(wait_exit(pid), 0);
}

// ------------------------------------------------------------------ hostile rows

TEST(TuningDbHostile, ValidatorRejectsUnknownSolversAndOutOfRangeParameters) {
  TempDir dir;
  {
    // Written by a build that knew nothing of these rules (no validator).
    auto shared = TuningDb::open_user(dir / "shared.db");
    shared->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1.0), cand(sched(16), 1.2)}));
    shared->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32, "evil"), 0.5), cand(sched(16, "evil"), 0.6)}));
    shared->put_result(make_run(h200(), op_gat(), 3, {cand(sched(999), 0.4)}));
    shared->put_result(make_run(h200(), op_gat(), 4, {cand(sched(7), 0.3), cand(sched(16), 0.9)}));
    shared->export_to(dir / "site.db");
  }
  auto site = TuningDb::open_site(dir / "site.db", with_validator());
  EXPECT_EQ(site->find_exact(h200(), op_gat(), fp_hash(1))->schedule, sched(32));
  EXPECT_FALSE(site->find_exact(h200(), op_gat(), fp_hash(2)));  // unknown solver
  EXPECT_FALSE(site->find_exact(h200(), op_gat(), fp_hash(3)));  // out of range
  EXPECT_FALSE(site->find_exact(h200(), op_gat(), fp_hash(4)));  // stored winner out of range
  const auto candidates = site->candidates_for(h200(), op_gat());
  ASSERT_EQ(candidates.size(), 1u);
  EXPECT_EQ(candidates[0].schedule, sched(32));
  const auto problems = site->verify();
  // Three rejected rows, three stored winners that this validator would not have chosen, and the
  // four candidate rows it rejects (evil x2, lanes=999, lanes=7).
  EXPECT_EQ(problems.size(), 10u) << ::testing::PrintToString(problems);
  for (const auto& l : site->list()) EXPECT_EQ(l.problem.empty(), l.result.schedule == sched(32)) << l.problem;

  // A database with the validator never chooses such a schedule: merging drops them.
  auto user = TuningDb::open_user(dir / "user.db", with_validator());
  const auto report = user->merge_from(dir / "site.db");
  EXPECT_EQ(report.runs_added, 2);     // problems 1 and 4
  EXPECT_EQ(report.runs_rejected, 2);  // problems 2 and 3: nothing usable
  EXPECT_EQ(report.candidates_rejected, 4);
  EXPECT_EQ(user->find_exact(h200(), op_gat(), fp_hash(4))->schedule, sched(16));
  EXPECT_FALSE(user->find_exact(h200(), op_gat(), fp_hash(2)));
  EXPECT_TRUE(user->verify().empty());
  // Same at write time.
  EXPECT_FALSE(user->put_result(make_run(h200(), op_gat(), 5, {cand(sched(32, "evil"), 0.1)})));
  EXPECT_EQ(user->put_result(make_run(h200(), op_gat(), 6, {cand(sched(3), 0.1), cand(sched(4), 2)}))->schedule,
            sched(4));
}

TEST(TuningDbHostile, TamperedRowsAreMissesNeverCrashes) {
  TempDir dir;
  const fs::path p = dir / "t.db";
  {
    auto db = TuningDb::open_user(p, with_validator());
    for (int k = 0; k < 8; ++k) db->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(8), 0.5)}));
  }
  auto id_of = [&](int k) {
    return std::to_string(raw_int(p, "SELECT r.id FROM results r JOIN fingerprints f ON f.id = r.fingerprint_id "
                                     "WHERE f.hash = '" + fp_hash(k) + "'"));
  };
  raw_exec(p, "UPDATE results SET schedule = 'evil:lanes=32' WHERE id = " + id_of(0));
  raw_exec(p, "UPDATE results SET schedule = 'subwarp:lanes=1000000' WHERE id = " + id_of(1));
  raw_exec(p, "UPDATE results SET mean_ms = -1 WHERE id = " + id_of(2));
  raw_exec(p, "UPDATE results SET count = 0 WHERE id = " + id_of(3));
  raw_exec(p, "UPDATE results SET env_class = 'NVIDIA H200|sm_90|132', environment_id = "
              "(SELECT id FROM environments LIMIT 1) WHERE id = " + id_of(4));  // consistent: still valid
  // An A100 environment attached to an H200 result: a foreign-arch row.
  raw_exec(p, "INSERT INTO environments (env_class, gpu_name, compute_capability, sm_count, driver_version, "
              "nvrtc_version, library_version, template_hash) VALUES ('NVIDIA A100|sm_80|108', 'NVIDIA A100', 80, "
              "108, 1, 1, '0.1.0', 't-hash-1')");
  raw_exec(p, "UPDATE results SET environment_id = (SELECT max(id) FROM environments) WHERE id = " + id_of(5));
  raw_exec(p, "UPDATE results SET template_hash = 'other' WHERE id = " + id_of(6));
  raw_exec(p, "UPDATE fingerprints SET text = replace(text, '\"gini\"', '\"gin\"') WHERE hash = '" +
                  fp_hash(7) + "'");
  auto db = TuningDb::open_user(p, with_validator());
  for (int k : {0, 1, 2, 3, 5, 6, 7}) EXPECT_FALSE(db->find_exact(h200(), op_gat(), fp_hash(k))) << k;
  EXPECT_TRUE(db->find_exact(h200(), op_gat(), fp_hash(4)));
  EXPECT_EQ(db->candidates_for(h200(), op_gat()).size(), 1u);
  const auto problems = db->verify();
  EXPECT_GE(problems.size(), 7u) << ::testing::PrintToString(problems);
  // The next write to a tampered problem recomputes it from its runs.
  db->put_result(make_run(h200(), op_gat(), 0, {cand(sched(16), 0.7)}));
  EXPECT_EQ(db->find_exact(h200(), op_gat(), fp_hash(0))->schedule, sched(8));
}

// ------------------------------------------------------------------ merge, export, prune

TEST(TuningDbMerge, IdempotentAndOrderIndependent) {
  TempDir dir;
  const fs::path a = dir / "a.db", b = dir / "b.db", c = dir / "c.db";
  const ModuleRecord ma{"mod-a", std::vector<char>(1000, 'a'), {"n1"}, {"l1"}, 90, 12080, "t-hash-1", 50};
  const ModuleRecord mb{"mod-b", std::vector<char>(1000, 'b'), {"n2"}, {"l2"}, 90, 12080, "t-hash-1", 60};
  const TuningRun a1 = make_run(h200(), op_gat(), 1, {cand(sched(32), 1.0), cand(sched(16), 1.1)}, "a1", 100, "node-a");
  {
    auto db = TuningDb::open_user(a);
    db->put_result(a1);
    db->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 1.0), cand(sched(8), 0.8)}, "a2", 110, "node-a"));
    db->put_module(ma);
  }
  {
    auto db = TuningDb::open_user(b);
    db->put_result(a1);  // b already holds a1 (imported earlier)
    db->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1.4, 30), cand(sched(16), 1.05, 30)}, "b1", 120,
                            "node-b"));
    db->put_result(make_run(h200(), op_gat(), 3, {cand(sched(32), 1.0), cand(sched(4), 0.9)}, "b2", 130, "node-b"));
    db->put_module(ma);
    db->put_module(mb);
  }
  {
    auto db = TuningDb::open_user(c);
    db->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 0.7), cand(sched(8), 0.9)}, "c1", 140, "node-c"));
    db->put_result(make_run(h200(), op_gat(), 3, {cand(sched(4), 1.5), cand(sched(16), 0.6)}, "c2", 150, "node-c"));
    db->put_result(make_run(a100(), op_gat(), 4, {cand(sched(32), 2.0)}, "c3", 160, "node-c"));
  }
  auto merged = [&](const std::vector<fs::path>& order, const std::string& name) {
    auto db = TuningDb::open_user(dir / name);
    for (const fs::path& src : order) db->merge_from(src);
    return db;
  };
  auto x = merged({a, b, c}, "x.db");
  auto y = merged({c, b, a}, "y.db");
  auto z = merged({b, c, a}, "z.db");
  const auto sx = snapshot(*x);
  EXPECT_EQ(sx.size(), 4u);
  EXPECT_EQ(snapshot(*y), sx);
  EXPECT_EQ(snapshot(*z), sx);
  // Pooled across nodes: problem 1 has runs a1 and b1 (a1 counted once), and the pooled winner
  // (lanes=16: (11 + 31.5) / 40 = 1.0625 vs lanes=32: (10 + 42) / 40 = 1.3) differs from a1's.
  auto p1 = x->find_exact(h200(), op_gat(), fp_hash(1));
  ASSERT_TRUE(p1);
  EXPECT_EQ(p1->runs, 2);
  EXPECT_EQ(p1->schedule, sched(16));
  EXPECT_NEAR(p1->stats.mean_ms, 1.0625, 1e-12);
  EXPECT_EQ(p1->host, "node-b");  // provenance of the latest run
  EXPECT_EQ(x->find_exact(a100(), op_gat(), fp_hash(4))->host, "node-c");
  // Merging again changes nothing.
  for (const fs::path& src : {a, b, c}) {
    const auto report = x->merge_from(src);
    EXPECT_EQ(report.runs_added, 0);
    EXPECT_EQ(report.modules_added, 0);
    EXPECT_GT(report.runs_present, 0);
  }
  EXPECT_EQ(snapshot(*x), sx);
  EXPECT_EQ(x->merge_from(dir / "y.db").runs_added, 0);  // a merged database into an equal one
  EXPECT_EQ(snapshot(*x), sx);
  for (auto* db : {x.get(), y.get(), z.get()}) {
    EXPECT_TRUE(db->get_module("mod-a"));
    EXPECT_TRUE(db->get_module("mod-b"));
    EXPECT_EQ(db->stats().modules, 2);
    EXPECT_EQ(db->stats().runs, 7);
    EXPECT_TRUE(db->verify().empty());
  }
  // Merging into a database that already has its own runs pools them too.
  auto own = TuningDb::open_user(a);
  own->merge_from(b);
  own->merge_from(c);
  EXPECT_EQ(snapshot(*own), sx);
  // A file that is not a database is a clear error.
  write_bytes(dir / "junk.db", std::string(5000, 'j'));
  EXPECT_EQ(expect_error([&] { x->merge_from(dir / "junk.db"); }).status(), DFGNN_STATUS_DATABASE_ERROR);
}

TEST(TuningDbExport, SnapshotOpensImmutableAndReplacesTarget) {
  TempDir dir;
  auto db = TuningDb::open_user(dir / "user.db");
  db->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1), cand(sched(8), 0.5)}));
  db->put_module(ModuleRecord{"m", std::vector<char>(10, 'x'), {"n"}, {"l"}, 90, 1, "t-hash-1", 0});
  const fs::path out = dir / "exports/site.db";
  db->export_to(out);
  db->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 1)}));
  db->export_to(out);  // replaces the previous snapshot
  const std::string header = read_bytes(out).substr(0, 100);
  EXPECT_EQ(header[18], 1);  // rollback journal: opens immutable anywhere
  EXPECT_EQ(header[19], 1);
  EXPECT_EQ(raw_int(out, "PRAGMA user_version"), dfgnn::db::kSchemaVersion);
  auto site = TuningDb::open_site(out);
  EXPECT_EQ(snapshot(*site), snapshot(*db));
  EXPECT_TRUE(site->get_module("m"));
  EXPECT_TRUE(site->verify().empty());
  EXPECT_EQ(site->stats().results, 2);
  // Reads leave nothing next to an immutable file (no journal, no shared memory, no locks).
  for (const auto& entry : fs::directory_iterator(dir / "exports"))
    EXPECT_EQ(entry.path().filename(), "site.db") << entry.path();
  // A site database can be exported too (e.g. to re-ship it).
  site->export_to(dir / "copy.db");
  EXPECT_EQ(snapshot(*TuningDb::open_site(dir / "copy.db")), snapshot(*db));
}

TEST(TuningDbPrune, ByEnvironmentAgeAndLibraryVersion) {
  TempDir dir;
  auto db = TuningDb::open_user(dir / "t.db");
  EnvironmentInfo old_lib = h200();
  old_lib.library_version = "0.0.9";
  db->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1), cand(sched(8), 2)}, "old", 1000));
  db->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 3), cand(sched(8), 1)}, "new", 2000));
  db->put_result(make_run(a100(), op_gat(), 2, {cand(sched(32), 1)}, "a100", 2000));
  db->put_result(make_run(old_lib, op_gat(), 3, {cand(sched(32), 1)}, "lib", 2000));
  db->put_module(ModuleRecord{"m-old", std::vector<char>(4, 'x'), {"n"}, {"l"}, 90, 1, "t-hash-1", 500});
  db->put_module(ModuleRecord{"m-new", std::vector<char>(4, 'x'), {"n"}, {"l"}, 90, 1, "t-hash-1", 5000});
  EXPECT_EQ(expect_error([&] { db->prune({}); }).status(), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(db->find_exact(h200(), op_gat(), fp_hash(1))->runs, 2);

  dfgnn::db::PruneFilter by_class;
  by_class.env_class = dfgnn::db::environment_class(a100());
  auto r = db->prune(by_class);
  EXPECT_EQ(r.runs, 1);
  EXPECT_EQ(r.results, 1);
  EXPECT_EQ(r.modules, 0);  // modules are not pruned by environment class
  EXPECT_FALSE(db->find_exact(a100(), op_gat(), fp_hash(2)));

  dfgnn::db::PruneFilter by_age;
  by_age.older_than = 1500;
  r = db->prune(by_age);
  EXPECT_EQ(r.runs, 1);
  EXPECT_EQ(r.results, 0);
  EXPECT_EQ(r.modules, 1);
  auto left = db->find_exact(h200(), op_gat(), fp_hash(1));
  EXPECT_EQ(left->runs, 1);
  EXPECT_EQ(left->schedule, sched(8));  // recomputed from the remaining run
  EXPECT_FALSE(db->get_module("m-old"));
  EXPECT_TRUE(db->get_module("m-new"));

  dfgnn::db::PruneFilter by_lib;
  by_lib.library_version = "0.0.9";
  r = db->prune(by_lib);
  EXPECT_EQ(r.runs, 1);
  EXPECT_EQ(r.results, 1);
  const auto st = db->stats();
  EXPECT_EQ(st.results, 1);
  EXPECT_EQ(st.runs, 1);
  EXPECT_EQ(st.fingerprints, 1);   // unused fingerprints went with their results
  EXPECT_EQ(st.environments, 1);   // as did unused environments
  EXPECT_TRUE(db->verify().empty());
}

// ------------------------------------------------------------------ layered

struct ScopedEnv {
  std::map<std::string, std::optional<std::string>> saved;
  void set(const std::string& name, const char* value) {
    if (!saved.count(name)) {
      const char* old = std::getenv(name.c_str());
      saved[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value)
      setenv(name.c_str(), value, 1);
    else
      unsetenv(name.c_str());
  }
  ~ScopedEnv() {
    for (auto& [name, value] : saved)
      if (value)
        setenv(name.c_str(), value->c_str(), 1);
      else
        unsetenv(name.c_str());
  }
};

TEST(LayeredDb, DefaultPathsFromEnvironment) {
  ScopedEnv env;
  env.set("DFGNN_CACHE_DIR", "/tmp/dfgnn-cache");
  env.set("XDG_CACHE_HOME", "/tmp/xdg");
  env.set("HOME", "/home/someone");
  EXPECT_EQ(LayeredDb::default_user_path(), fs::path("/tmp/dfgnn-cache/tuning.db"));
  env.set("DFGNN_CACHE_DIR", nullptr);
  EXPECT_EQ(LayeredDb::default_user_path(), fs::path("/tmp/xdg/dfgnn/tuning.db"));
  env.set("XDG_CACHE_HOME", "");
  EXPECT_EQ(LayeredDb::default_user_path(), fs::path("/home/someone/.cache/dfgnn/tuning.db"));
  env.set("HOME", nullptr);
  EXPECT_TRUE(LayeredDb::default_user_path().empty());
  env.set("DFGNN_SITE_DB", "/a/site.db::/b/site.db:");
  EXPECT_EQ(LayeredDb::default_site_paths(), (std::vector<fs::path>{"/a/site.db", "/b/site.db"}));
  env.set("DFGNN_SITE_DB", nullptr);
  EXPECT_TRUE(LayeredDb::default_site_paths().empty());
}

// The shipped layer: DFGNN_SHIPPED_DB names files or directories (their *.db files, by name) or
// switches it off; unset, the package's directory beside the library is searched.
TEST(LayeredDb, ShippedPathsFromEnvironmentAndInstallLayout) {
  TempDir dir;
  fs::create_directories(dir / "tuning");
  write_bytes(dir / "tuning/sm90.db", "x");
  write_bytes(dir / "tuning/sm80.db", "x");
  write_bytes(dir / "tuning/README.md", "x");
  ScopedEnv env;
  env.set("DFGNN_SHIPPED_DB", (dir / "tuning").c_str());
  EXPECT_EQ(LayeredDb::default_shipped_paths(), (std::vector<fs::path>{dir / "tuning/sm80.db", dir / "tuning/sm90.db"}));
  env.set("DFGNN_SHIPPED_DB", ((dir / "a.db").string() + "::" + (dir / "tuning").string()).c_str());
  EXPECT_EQ(LayeredDb::default_shipped_paths(),
            (std::vector<fs::path>{dir / "a.db", dir / "tuning/sm80.db", dir / "tuning/sm90.db"}));
  for (const char* off : {"off", "none", "0", ""}) {
    env.set("DFGNN_SHIPPED_DB", off);
    EXPECT_TRUE(LayeredDb::default_shipped_paths().empty()) << off;
  }
  // Python package: site-packages/dfgnn/libdfgnn.so -> dfgnn/data/tuning; its tools in dfgnn/bin.
  const auto wheel = LayeredDb::shipped_directory_candidates("/sp/dfgnn/libdfgnn.so.0");
  EXPECT_EQ(wheel.at(0), fs::path("/sp/dfgnn/data/tuning"));
  EXPECT_EQ(LayeredDb::shipped_directory_candidates("/sp/dfgnn/bin/dfgnn-db").at(1).lexically_normal(),
            fs::path("/sp/dfgnn/data/tuning"));
  // CMake install: <prefix>/lib/libdfgnn.so and <prefix>/bin/dfgnn-db -> <prefix>/share/dfgnn/tuning.
  const auto lib = LayeredDb::shipped_directory_candidates("/opt/dfgnn/lib/libdfgnn.so");
  EXPECT_NE(std::find_if(lib.begin(), lib.end(),
                         [](const fs::path& p) { return p.lexically_normal() == "/opt/dfgnn/share/dfgnn/tuning"; }),
            lib.end());
  // Unset here (the test binary's directory has no such layout): nothing.
  env.set("DFGNN_SHIPPED_DB", nullptr);
  EXPECT_TRUE(LayeredDb::shipped_directory().empty()) << LayeredDb::shipped_directory();
  EXPECT_TRUE(LayeredDb::default_shipped_paths().empty());
}

// Shipped databases are read after the sites; rows say which layer answered; a site or shipped
// database built for another GPU class or build is left out when the environment is known.
TEST(LayeredDb, ShippedBelowSitesAndForeignLayersSkipped) {
  TempDir dir;
  {
    auto s = TuningDb::open_user(dir / "site-src.db");
    s->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1), cand(sched(4), 0.5)}));
    s->export_to(dir / "site.db");
    auto p = TuningDb::open_user(dir / "shipped-src.db");
    p->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1), cand(sched(8), 0.5)}));
    p->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 1), cand(sched(8), 0.5)}));
    p->export_to(dir / "shipped.db");
    EXPECT_EQ(p->build_stamps().size(), 1u);
    EXPECT_EQ(p->build_stamps().at(0).results, 2);
    EXPECT_EQ(p->build_stamps().at(0).env_class, dfgnn::db::environment_class(h200()));
  }
  LayeredDb::Options o;
  o.user_path = fs::path();
  o.site_paths = std::vector<fs::path>{dir / "site.db"};
  o.shipped_paths = std::vector<fs::path>{dir / "shipped.db", dir / "site.db"};  // the site is read once
  {
    LayeredDb layered(o);
    ASSERT_EQ(layered.layers().size(), 2u);
    EXPECT_EQ(layered.layers()[1].kind, dfgnn::db::LayerKind::Shipped);
    EXPECT_TRUE(layered.layers()[1].used);
    const auto r1 = layered.find_exact(h200(), op_gat(), fp_hash(1));
    EXPECT_EQ(r1->layer, "site");
    EXPECT_EQ(r1->schedule, sched(4));
    const auto r2 = layered.find_exact(h200(), op_gat(), fp_hash(2));
    EXPECT_EQ(r2->layer, "shipped");
    EXPECT_EQ(r2->source, (dir / "shipped.db").string());
    for (const TuningResult& r : layered.candidates_for(h200(), op_gat()))
      EXPECT_EQ(r.layer, r.fingerprint_hash == fp_hash(1) ? "site" : "shipped");
  }
  dfgnn::db::EnvironmentInfo other = h200();
  other.gpu_name = "NVIDIA A100";
  o.environment = other;
  LayeredDb foreign(o);
  ASSERT_EQ(foreign.layers().size(), 2u);
  for (const auto& l : foreign.layers()) {
    EXPECT_FALSE(l.used);
    EXPECT_TRUE(contains(l.reason, "tuned for another GPU")) << l.reason;
  }
  EXPECT_TRUE(foreign.shipped().empty());
  EXPECT_TRUE(foreign.open_errors().empty());  // not an error: a database for another GPU
}

// The database logger's output while it lives (its sink removed again however the test ends).
class CapturedDbLog {
 public:
  CapturedDbLog() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(text_)) {
    dfgnn::db::detail::db_logger()->sinks().push_back(sink_);
  }
  ~CapturedDbLog() {
    auto& sinks = dfgnn::db::detail::db_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

// A shipped file that opens but fails on reading (damaged pages) is dropped after the first failing
// read, with one warning however many lookups follow; the file is left as it was.
TEST(LayeredDb, DamagedShippedPagesWarnOnceAndAreDropped) {
  TempDir dir;
  {
    auto s = TuningDb::open_user(dir / "src.db");
    for (int k = 1; k <= 40; ++k) s->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(4), 0.5)}));
    s->export_to(dir / "shipped.db");
  }
  std::string bytes = read_bytes(dir / "shipped.db");
  const size_t page = 4096;
  ASSERT_GT(bytes.size(), 4 * page);
  for (size_t i = page; i < bytes.size(); ++i) bytes[i] = static_cast<char>(0xA5 ^ (i * 131));  // all but page 1
  write_bytes(dir / "shipped.db", bytes);
  CapturedDbLog log;
  LayeredDb::Options o;
  o.user_path = fs::path();
  o.site_paths = std::vector<fs::path>{};
  o.shipped_paths = std::vector<fs::path>{dir / "shipped.db"};
  std::optional<LayeredDb> layered;
  try {
    layered.emplace(o);
  } catch (...) {
    ADD_FAILURE() << "LayeredDb threw";
  }
  for (int k = 1; k <= 3; ++k) {
    EXPECT_FALSE(layered->find_exact(h200(), op_gat(), fp_hash(k)));
    EXPECT_TRUE(layered->candidates_for(h200(), op_gat()).empty());
  }
  const std::string text = log.text();
  int lines = 0;
  for (char c : text) lines += c == '\n';
  EXPECT_EQ(lines, 1) << text;
  EXPECT_TRUE(contains(text, "shipped")) << text;
  EXPECT_TRUE(contains(text, (dir / "shipped.db").string())) << text;
  EXPECT_EQ(read_bytes(dir / "shipped.db"), bytes);
}

// Issue 26: a site layer whose results pages are damaged, before a good one. The lookup reaches the
// damaged pages (alone, the same query fails as damaged); through the layers it answers from the good
// one, never throws, logs the damaged layer once and skips it for the rest of the process: a second
// LayeredDb (another context) reads it no more, with or without the GPU's identity.
TEST(LayeredDb, QueryOnDamagedPagesSkipsTheLayerForTheProcess) {
  TempDir dir;
  {
    auto bad = TuningDb::open_user(dir / "bad-src.db");
    auto good = TuningDb::open_user(dir / "good-src.db");
    for (int k = 0; k < 300; ++k) {
      bad->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(4), 0.5)}));
      good->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(8), 0.5)}));
    }
    bad->export_to(dir / "damaged.db");
    good->export_to(dir / "good.db");
  }
  ASSERT_GT(dfgnn::test::damage_leaf_pages(dir / "damaged.db", "results"), 3);
  {
    auto alone = TuningDb::open_site(dir / "damaged.db");
    EXPECT_EQ(expect_error([&] { alone->find_exact(h200(), op_gat(), fp_hash(150)); }).kind(),
              dfgnn::db::ErrorKind::Corrupt);
  }
  CapturedDbLog log;
  LayeredDb::Options o;
  o.user_path = fs::path();
  o.site_paths = std::vector<fs::path>{dir / "damaged.db", dir / "good.db"};
  o.shipped_paths = std::vector<fs::path>{};
  {
    LayeredDb first(o);
    std::optional<TuningResult> r;
    EXPECT_NO_THROW(r = first.find_exact(h200(), op_gat(), fp_hash(150)));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->schedule, sched(8));
    EXPECT_EQ(r->source, (dir / "good.db").string());
  }
  for (bool with_environment : {false, true}) {
    SCOPED_TRACE(with_environment ? "with the GPU's identity" : "without the GPU's identity");
    LayeredDb::Options again = o;
    if (with_environment) again.environment = h200();
    LayeredDb later(again);
    std::vector<TuningResult> all;
    EXPECT_NO_THROW(all = later.candidates_for(h200(), op_gat()));
    EXPECT_EQ(all.size(), 300u);
    for (const TuningResult& r : all) EXPECT_EQ(r.source, (dir / "good.db").string());
    ASSERT_EQ(later.layers().size(), 2u);
    EXPECT_FALSE(later.layers()[0].used);
    EXPECT_TRUE(contains(later.layers()[0].reason, "damaged")) << later.layers()[0].reason;
    EXPECT_EQ(later.sites().size(), 1u);
  }
  const std::string text = log.text();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_TRUE(contains(text, "site tuning database " + (dir / "damaged.db").string() + " is damaged")) << text;
}

TEST(LayeredDb, UserOverSitesWritesToUserOnly) {
  TempDir dir;
  {
    auto s1 = TuningDb::open_user(dir / "s1-src.db");
    s1->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1), cand(sched(4), 0.5)}));
    s1->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 1), cand(sched(4), 0.5)}));
    s1->put_module(ModuleRecord{"site-mod", std::vector<char>(4, 's'), {"n"}, {"l"}, 90, 1, "t-hash-1", 0});
    s1->export_to(dir / "s1.db");
    auto s2 = TuningDb::open_user(dir / "s2-src.db");
    s2->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 1), cand(sched(8), 0.5)}));
    s2->put_result(make_run(h200(), op_gat(), 3, {cand(sched(32), 1), cand(sched(8), 0.5)}));
    s2->export_to(dir / "s2.db");
    auto u = TuningDb::open_user(dir / "cache/tuning.db");
    u->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1), cand(sched(16), 0.5)}));
  }
  ScopedEnv env;
  env.set("DFGNN_CACHE_DIR", (dir / "cache").c_str());
  env.set("DFGNN_SITE_DB", ((dir / "s1.db").string() + ":" + (dir / "s2.db").string()).c_str());
  const std::string s1_bytes = read_bytes(dir / "s1.db");
  LayeredDb layered;  // paths from the environment
  ASSERT_NE(layered.user(), nullptr);
  EXPECT_EQ(layered.user()->path(), dir / "cache/tuning.db");
  ASSERT_EQ(layered.sites().size(), 2u);
  EXPECT_TRUE(layered.open_errors().empty());
  auto r1 = layered.find_exact(h200(), op_gat(), fp_hash(1));
  EXPECT_EQ(r1->schedule, sched(16));  // the user's, over site 1's
  EXPECT_EQ(r1->source, (dir / "cache/tuning.db").string());
  auto r2 = layered.find_exact(h200(), op_gat(), fp_hash(2));
  EXPECT_EQ(r2->schedule, sched(4));  // site 1 over site 2
  EXPECT_EQ(r2->source, (dir / "s1.db").string());
  EXPECT_EQ(layered.find_exact(h200(), op_gat(), fp_hash(3))->schedule, sched(8));
  EXPECT_FALSE(layered.find_exact(h200(), op_gat(), fp_hash(4)));
  const auto all = layered.candidates_for(h200(), op_gat());
  ASSERT_EQ(all.size(), 3u);
  for (const TuningResult& r : all)
    if (r.fingerprint_hash == fp_hash(1)) EXPECT_EQ(r.schedule, sched(16));
  EXPECT_TRUE(layered.get_module("site-mod"));
  // Writes land in the user database; the sites are never modified.
  layered.put_result(make_run(h200(), op_gat(), 4, {cand(sched(32), 1)}));
  layered.put_module(ModuleRecord{"user-mod", std::vector<char>(4, 'u'), {"n"}, {"l"}, 90, 1, "t-hash-1", 0});
  EXPECT_TRUE(layered.find_exact(h200(), op_gat(), fp_hash(4)));
  EXPECT_EQ(layered.user()->stats().results, 2);
  EXPECT_EQ(read_bytes(dir / "s1.db"), s1_bytes);
  EXPECT_FALSE(fs::exists(dir / "s1.db-wal"));
  EXPECT_FALSE(fs::exists(dir / "s1.db-shm"));
}

TEST(LayeredDb, UnusableLayersAreSkippedAndKept) {
  TempDir dir;
  {
    auto s = TuningDb::open_user(dir / "src.db");
    s->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1)}));
    s->export_to(dir / "site.db");
  }
  write_bytes(dir / "garbage.db", std::string(3000, 'g'));
  LayeredDb::Options o;
  o.user_path = dir / "garbage.db";
  o.site_paths = std::vector<fs::path>{dir / "missing.db", dir / "garbage.db", dir / "site.db"};
  LayeredDb layered(o);
  EXPECT_EQ(layered.user(), nullptr);
  EXPECT_EQ(layered.sites().size(), 1u);
  EXPECT_EQ(layered.open_errors().size(), 3u);
  EXPECT_TRUE(layered.find_exact(h200(), op_gat(), fp_hash(1)));
  EXPECT_EQ(expect_error([&] { layered.put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 1)})); }).status(),
            DFGNN_STATUS_DATABASE_ERROR);
  EXPECT_EQ(read_bytes(dir / "garbage.db"), std::string(3000, 'g'));
  // No user database by choice.
  LayeredDb::Options none;
  none.user_path = fs::path();
  none.site_paths = std::vector<fs::path>{};
  LayeredDb empty(none);
  EXPECT_EQ(empty.user(), nullptr);
  EXPECT_TRUE(empty.open_errors().empty());
  EXPECT_FALSE(empty.find_exact(h200(), op_gat(), fp_hash(1)));
  EXPECT_TRUE(contains(expect_error([&] { empty.put_module(ModuleRecord{}); }).what(), "disabled"));
}

// ------------------------------------------------------------------ reliability (issue 15)

// verify judges every row as dispatch would use it: stored types, plausible statistics, text
// without control characters, each candidate through the validator, and the schema's objects.
// find_exact never returns a row that verify rejects.
TEST(TuningDbHostile, VerifyRejectsWhatDispatchWouldNotUse) {
  TempDir dir;
  const fs::path p = dir / "t.db";
  {
    auto db = TuningDb::open_user(p, with_validator());
    for (int k = 0; k < 6; ++k)
      db->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(8), 0.5)}, "run-" + std::to_string(k)));
  }
  ASSERT_TRUE(TuningDb::open_user(p, with_validator())->verify().empty());
  auto id_of = [&](int k) {
    return std::to_string(raw_int(p, "SELECT r.id FROM results r JOIN fingerprints f ON f.id = r.fingerprint_id "
                                     "WHERE f.hash = '" + fp_hash(k) + "'"));
  };
  auto run_of = [&](int k) { return std::to_string(raw_int(p, "SELECT id FROM runs WHERE uuid = 'run-" + std::to_string(k) + "'")); };
  // A candidate with an invalid schedule and an implausible mean, and a valid schedule with one.
  raw_exec(p, "INSERT INTO candidate_stats VALUES (" + run_of(0) + ", '" + sched(7) + "', 1, 10, 0.01, 0, 0.01, 0.01)");
  raw_exec(p, "INSERT INTO candidate_stats VALUES (" + run_of(0) + ", '" + sched(16) + "', 1, 10, 1e-300, 0, 1e-300, 1e-300)");
  raw_exec(p, "UPDATE candidate_stats SET solver_id = -7 WHERE run_id = " + run_of(1) + " AND schedule = '" + sched(32) + "'");
  raw_exec(p, "UPDATE results SET median_ms = 'fast' WHERE id = " + id_of(2));
  raw_exec(p, "UPDATE results SET host = 'evil' || char(27) || '[2J' || char(27) || '[31m' || char(10) || 'forged' "
              "WHERE id = " + id_of(3));
  raw_exec(p, "UPDATE results SET mean_ms = 1e-300 WHERE id = " + id_of(4));
  raw_exec(p, "UPDATE results SET solver_id = -7 WHERE id = " + id_of(5));
  raw_exec(p, "CREATE TRIGGER evil AFTER INSERT ON runs BEGIN DELETE FROM results; END");

  auto site = TuningDb::open_site(p, with_validator());  // reads are allowed, writes are not (below)
  for (int k : {2, 3, 4, 5}) EXPECT_FALSE(site->find_exact(h200(), op_gat(), fp_hash(k))) << k;
  EXPECT_EQ(site->find_exact(h200(), op_gat(), fp_hash(0))->schedule, sched(8));  // stored winner still valid
  EXPECT_EQ(site->candidates_for(h200(), op_gat()).size(), 2u);
  const std::vector<std::string> problems = site->verify();
  const std::string all = ::testing::PrintToString(problems);
  auto reported = [&](const std::string& a, const std::string& b) {
    for (const std::string& s : problems)
      if (contains(s, a) && contains(s, b)) return true;
    return false;
  };
  EXPECT_TRUE(reported("candidate " + sched(7), "lanes 7 out of range")) << all;
  EXPECT_TRUE(reported("candidate " + sched(16), "mean 1e-300 ms is not a plausible time")) << all;
  EXPECT_TRUE(reported("candidate " + sched(32), "solver id -7")) << all;
  EXPECT_TRUE(reported("result " + id_of(2), "results.median_ms: holds a TEXT value, not a number")) << all;
  EXPECT_TRUE(reported("result " + id_of(3), "results.host: control character 0x1b")) << all;
  EXPECT_TRUE(reported("result " + id_of(4), "mean 1e-300 ms")) << all;
  EXPECT_TRUE(reported("result " + id_of(5), "solver id -7")) << all;
  EXPECT_TRUE(reported("schema: unknown trigger \"evil\"", "runs")) << all;
  for (const std::string& s : problems) EXPECT_TRUE(dfgnn::db::detail::unprintable(s).empty()) << s;
  // Writing (a merge, a tuning run) into the file with the trigger is refused, naming it, and so is
  // exporting it; the file is left as it was.
  const std::string before = read_bytes(p);
  auto e = expect_error([&] { TuningDb::open_user(p, with_validator()); });
  EXPECT_TRUE(contains(e.what(), "unknown trigger \"evil\"")) << e.what();
  EXPECT_EQ(e.kind(), dfgnn::db::ErrorKind::Schema);
  e = expect_error([&] { site->export_to(dir / "out.db"); });
  EXPECT_TRUE(contains(e.what(), "export refused")) << e.what();
  EXPECT_FALSE(fs::exists(dir / "out.db"));
  EXPECT_EQ(read_bytes(p), before);
  // Without the trigger it opens for writing again.
  raw_exec(p, "DROP TRIGGER evil");
  EXPECT_NO_THROW(TuningDb::open_user(p, with_validator()));
}

TEST(TuningDbHostile, WritesRefuseControlCharactersAndImplausibleStatistics) {
  TempDir dir;
  auto db = TuningDb::open_user(dir / "t.db");
  auto invalid = [&](TuningRun run, const std::string& why) {
    const auto e = expect_error([&] { db->put_result(run); });
    EXPECT_EQ(dfgnn::db_status(e), DFGNN_STATUS_INVALID_ARGUMENT) << why;
    EXPECT_TRUE(contains(e.what(), why)) << e.what();
  };
  invalid(make_run(h200(), op_gat(), 1, {cand(sched(32), 1)}, {}, 0, "a\x1b[2Jb"), "host: control character 0x1b");
  invalid(make_run(h200(), op_gat(), 1, {cand(sched(32), 1)}, {}, 0, "a\nb"), "host: control character 0x0a");
  invalid(make_run(h200(), op_gat(), 1, {cand(sched(32), 1)}, {}, 0, "a\xc2\x9b" "b"), "C1 control character U+009B");
  invalid(make_run(h200(), op_gat(), 1, {cand(sched(32), 1e-300)}), "mean 1e-300 ms is not a plausible time");
  invalid(make_run(h200(), op_gat(), 1, {cand(sched(32), 1e300)}), "is not a plausible time");
  CandidateStat negative_solver = cand(sched(32), 1);
  negative_solver.solver_id = -7;
  invalid(make_run(h200(), op_gat(), 1, {negative_solver}), "solver id -7");
  CandidateStat min_above_mean = cand(sched(32), 1);
  min_above_mean.min_ms = 2;
  invalid(make_run(h200(), op_gat(), 1, {min_above_mean}), "min 2 ms exceeds");
  EnvironmentInfo env = h200();
  env.gpu_name = "NVIDIA\x7f H200";
  invalid(make_run(env, op_gat(), 1, {cand(sched(32), 1)}), "gpu_name: control character 0x7f");
  EXPECT_EQ(db->stats().runs, 0);
  // Plain UTF-8 is fine.
  EXPECT_TRUE(db->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1)}, {}, 0, "nœud-α")));
}

// A merge is one transaction: a write that fails midway (here a full disk, made with SQLite's
// max_page_count on every connection this process opens) commits nothing, and says so.
namespace {
int g_max_pages = 0;
int limit_pages(sqlite3* db, const char**, const sqlite3_api_routines*) {
  const std::string sql = "PRAGMA max_page_count = " + std::to_string(g_max_pages);
  sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
  return SQLITE_OK;
}
struct PageLimit {
  explicit PageLimit(int pages) {
    g_max_pages = pages;
    sqlite3_auto_extension(reinterpret_cast<void (*)()>(&limit_pages));
  }
  ~PageLimit() { sqlite3_cancel_auto_extension(reinterpret_cast<void (*)()>(&limit_pages)); }
};
int64_t pages_of(const fs::path& p) { return raw_int(p, "PRAGMA page_count"); }
}  // namespace

TEST(TuningDbMerge, FullDiskCommitsNothing) {
  TempDir dir;
  const fs::path src = dir / "src.db", dst = dir / "dst.db";
  {
    auto db = TuningDb::open_user(src);
    for (int k = 0; k < 600; ++k)
      db->put_result(make_run(h200(), op_gat(), k % 40,
                              {cand(sched(32), 1 + k % 7), cand(sched(16), 1.5), cand(sched(8), 0.8 + k % 3)},
                              fmt::format("src-run-{:04d}", k)));
  }
  {
    auto db = TuningDb::open_user(dst);
    db->put_result(make_run(h200(), op_gat(), 0, {cand(sched(4), 0.5)}, "dst-run"));
  }
  const int64_t empty_pages = pages_of(dst);
  {  // how large the full merge makes it
    fs::copy_file(dst, dir / "probe.db");
    TuningDb::open_user(dir / "probe.db")->merge_from(src);
  }
  const int64_t full_pages = pages_of(dir / "probe.db");
  ASSERT_GT(full_pages, empty_pages + 20);
  auto db = TuningDb::open_user(dst);
  const auto before = snapshot(*db);
  {
    PageLimit limit(static_cast<int>(empty_pages + (full_pages - empty_pages) / 2));  // the first chunks fit
    auto target = TuningDb::open_user(dst);
    const auto e = expect_error([&] { target->merge_from(src); });
    EXPECT_EQ(dfgnn::db_status(e), DFGNN_STATUS_DATABASE_ERROR);
    EXPECT_EQ(e.kind(), dfgnn::db::ErrorKind::DiskFull) << e.what();
    EXPECT_TRUE(contains(e.what(), "the disk is full")) << e.what();
    EXPECT_FALSE(contains(e.what(), "unreadable")) << e.what();
  }
  EXPECT_EQ(db->stats().runs, 1);  // not one run of the source committed
  EXPECT_EQ(snapshot(*db), before);
  EXPECT_TRUE(db->verify().empty());
  EXPECT_EQ(db->merge_from(src).runs_added, 600);  // with space, the same merge goes through
}

// What a process killed during its first open_user leaves (a zero-length file, or the bare header
// that switching to WAL writes): merging it merges nothing, with a note; opening it for writing
// initialises it.
TEST(TuningDbMerge, EmptySourceMergesNothing) {
  TempDir dir;
  const fs::path zero = dir / "zero.db", bare = dir / "bare.db", dst = dir / "dst.db";
  write_bytes(zero, "");
  raw_exec(bare, "PRAGMA journal_mode = WAL");
  ASSERT_GT(fs::file_size(bare), 0u);
  ASSERT_EQ(raw_int(bare, "PRAGMA user_version"), 0);
  auto db = TuningDb::open_user(dst);
  db->put_result(make_run(h200(), op_gat(), 0, {cand(sched(32), 1)}, "dst-run"));
  for (const fs::path& empty : {zero, bare}) {
    const auto before = snapshot(*db);
    const std::string bytes = read_bytes(empty);
    const dfgnn::db::MergeReport r = db->merge_from(empty);
    EXPECT_TRUE(r.source_empty) << empty;
    EXPECT_EQ(r.runs_added + r.runs_present + r.runs_rejected + r.modules_added, 0) << empty;
    EXPECT_EQ(read_bytes(empty), bytes) << empty;  // a merge never writes its source
    EXPECT_EQ(snapshot(*db), before);
    // open_read_only (dfgnn-db list / show) still says it holds no database.
    EXPECT_TRUE(contains(expect_error([&] { TuningDb::open_read_only(empty, {}); }).what(), "empty file")) << empty;
    // The next open for writing initialises it, and then it merges like any database.
    TuningDb::open_user(empty)->put_result(make_run(h200(), op_gat(), 1, {cand(sched(8), 1)}, "run-" + empty.stem().string()));
    const dfgnn::db::MergeReport full = db->merge_from(empty);
    EXPECT_FALSE(full.source_empty);
    EXPECT_EQ(full.runs_added, 1) << empty;
  }
  EXPECT_EQ(db->stats().runs, 3);
  EXPECT_TRUE(db->verify().empty());
}

// A damaged source found after its runs were read (its modules' key index) merges nothing.
TEST(TuningDbMerge, DamagedSourceModulesCommitNothing) {
  TempDir dir;
  const fs::path src = dir / "src.db", snap = dir / "snap.db", dst = dir / "dst.db";
  {
    auto db = TuningDb::open_user(src);
    for (int k = 0; k < 200; ++k)
      db->put_result(make_run(h200(), op_gat(), k % 20, {cand(sched(32), 1), cand(sched(8), 0.5)},
                              fmt::format("run-{:04d}", k)));
    for (int k = 0; k < 40; ++k)
      db->put_module(ModuleRecord{fmt::format("module-{:03d}", k), std::vector<char>(300, 'm'), {"n"}, {"l"}, 90,
                                  12080, "t-hash-1", 0});
    db->export_to(snap);  // a rollback-journal file: its pages are where the header says
  }
  const int64_t root = raw_int(snap, "SELECT rootpage FROM sqlite_master WHERE name = 'sqlite_autoindex_modules_1'");
  const int64_t page_size = raw_int(snap, "PRAGMA page_size");
  ASSERT_GT(root, 1);
  std::string bytes = read_bytes(snap);
  for (int64_t i = 0; i < page_size; ++i) bytes[static_cast<size_t>((root - 1) * page_size + i)] = static_cast<char>(0xff);
  write_bytes(snap, bytes);
  auto db = TuningDb::open_user(dst);
  const auto e = expect_error([&] { db->merge_from(snap); });
  EXPECT_EQ(e.kind(), dfgnn::db::ErrorKind::Corrupt) << e.what();
  EXPECT_TRUE(contains(e.what(), snap.string())) << e.what();
  EXPECT_EQ(db->stats().runs, 0);
  EXPECT_EQ(db->stats().modules, 0);
  EXPECT_EQ(read_bytes(snap), bytes);  // the source is left as it was
}

// Leftovers of an export killed with SIGKILL are removed by the next export to that path; a live
// writer's temporary file, and files of other names, are not.
TEST(TuningDbExport, KilledExportsLeaveNoTempFilesBehind) {
  TempDir dir;
  {
    auto db = TuningDb::open_user(dir / "user.db");
    for (int k = 0; k < 300; ++k)
      db->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(8), 0.5), cand(sched(4), 0.7)}));
  }
  const fs::path out = dir / "out/site.db";
  auto temps = [&] {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(out.parent_path(), ec))
      if (contains(entry.path().filename().string(), ".tmp-")) names.push_back(entry.path().filename().string());
    return names;
  };
  // Kill exporting children until one leaves a temporary file behind.
  fs::create_directories(out.parent_path());
  bool left = false;
  std::mt19937 rng(3);
  for (int attempt = 0; attempt < 60 && !left; ++attempt) {
    const pid_t child = spawn([&] {
      auto db = TuningDb::open_read_only(dir / "user.db", {});
      for (;;) db->export_to(out);
      return 0;
    });
    std::this_thread::sleep_for(std::chrono::microseconds(2000 + rng() % 20000));
    kill(child, SIGKILL);
    wait_exit(child);
    left = !temps().empty();
  }
  ASSERT_TRUE(left) << "no SIGKILL landed during an export";
  // A dead writer's file made by hand (with a journal), a live writer's (this process), a foreign name.
  pid_t dead = spawn([] { return 0; });
  wait_exit(dead);
  const fs::path stale = dfgnn::db::export_temp_path(out, dead, 4242, "00112233aabb");
  write_bytes(stale, "partial");
  write_bytes(fs::path(stale.string() + "-journal"), "partial");
  const fs::path live =
      dfgnn::db::export_temp_path(out, getpid(), dfgnn::db::process_start_ticks(getpid()), "445566778899");
  write_bytes(live, "in progress");
  write_bytes(fs::path(out.string() + ".tmp-notours"), "x");
  TuningDb::open_read_only(dir / "user.db", {})->export_to(out);
  std::vector<std::string> expected = {live.filename().string(), "site.db.tmp-notours"};
  std::vector<std::string> found = temps();
  std::sort(expected.begin(), expected.end());
  std::sort(found.begin(), found.end());
  EXPECT_EQ(found, expected);
  EXPECT_EQ(TuningDb::open_site(out)->stats().results, 300);
}

// A process id is reused within minutes on a busy host (pid_max is often 32768): the temp file of
// a dead exporter whose number now belongs to another process is stale all the same.
TEST(TuningDbExport, TempFileOfAReusedPidIsStale) {
  TempDir dir;
  TuningDb::open_user(dir / "user.db")->put_result(make_run(h200(), op_gat(), 0, {cand(sched(32), 1)}));
  const fs::path out = dir / "site.db";
  const int64_t started = dfgnn::db::process_start_ticks(getpid());
  ASSERT_GT(started, 0) << "no /proc/self/stat";
  EXPECT_EQ(dfgnn::db::process_start_ticks(getpid()), started);
  const fs::path reused = dfgnn::db::export_temp_path(out, getpid(), started + 1, "0123456789ab");
  const fs::path mine = dfgnn::db::export_temp_path(out, getpid(), started, "ba9876543210");
  for (const fs::path& p : {reused, fs::path(reused.string() + "-journal"), mine}) write_bytes(p, "partial");
  TuningDb::open_read_only(dir / "user.db", {})->export_to(out);
  EXPECT_FALSE(fs::exists(reused));
  EXPECT_FALSE(fs::exists(reused.string() + "-journal"));
  EXPECT_TRUE(fs::exists(mine));  // this very process's: in progress
  EXPECT_EQ(TuningDb::open_site(out)->stats().results, 1);
}

// An export that fails on a full filesystem removes its temp file and whatever SQLite made beside
// it: a snapshot larger than SQLite's page cache spills pages early, after writing a rollback
// journal that SQLite keeps when the disk then fills up. Tried with no free byte at all, with less
// space than the page cache, and at every page around the snapshot's size. Needs a private tmpfs
// (as FullAndReadOnlyDisksAreNamed).
TEST(TuningDbExport, FullDiskExportLeavesNoFiles) {
  TempDir dir;
  {
    auto db = TuningDb::open_user(dir / "user.db");
    for (int k = 0; k < 50; ++k)
      db->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1 + k % 5), cand(sched(8), 0.8 + k % 3)}));
    for (int k = 0; k < 40; ++k)  // 4 MB of modules: twice SQLite's default page cache
      db->put_module(ModuleRecord{fmt::format("module-{:03d}", k), std::vector<char>(100000, static_cast<char>('a' + k % 26)),
                                  {"n"}, {"l"}, 90, 12080, "t-hash-1", 0});
    db->export_to(dir / "probe.db");
  }
  const int64_t snapshot_pages = static_cast<int64_t>(fs::file_size(dir / "probe.db")) / 4096;
  ASSERT_GT(snapshot_pages, 900);
  std::vector<int64_t> sizes = {0, 256, 512, 750};  // pages of 4 KiB; 0: filled up with a ballast file
  for (int64_t pages = snapshot_pages - 3; pages <= snapshot_pages + 8; ++pages) sizes.push_back(pages);
  const fs::path mnt = dir / "mnt";
  fs::create_directories(mnt);
  const pid_t child = spawn([&]() -> int {
    if (unshare(CLONE_NEWNS) != 0) {
      const uid_t uid = getuid();
      const gid_t gid = getgid();
      if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return 77;
      std::ofstream("/proc/self/setgroups") << "deny";
      std::ofstream("/proc/self/uid_map") << "0 " << uid << " 1";
      std::ofstream("/proc/self/gid_map") << "0 " << gid << " 1";
    }
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 77;
    auto db = TuningDb::open_read_only(dir / "user.db", {});
    int failures = 0, full = 0, fitted = 0;
    for (const int64_t pages : sizes) {
      if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, fmt::format("size={}", std::max<int64_t>(pages, 64) * 4096).c_str()) != 0)
        return 77;
      if (pages == 0) {
        std::ofstream fill(mnt / "out.db", std::ios::binary);  // the ballast (named as the output, which it replaces)
        const std::string block(4096, 'f');
        while (fill.write(block.data(), block.size())) {
        }
      }
      try {
        db->export_to(mnt / "out.db");
        ++fitted;
      } catch (const dfgnn::db::DbError& e) {
        ++full;
        if (e.kind() != dfgnn::db::ErrorKind::DiskFull) {
          std::fprintf(stderr, "%lld pages: kind %s: %s\n", static_cast<long long>(pages),
                       dfgnn::db::error_kind_name(e.kind()), e.what());
          ++failures;
        }
      }
      for (const auto& entry : fs::directory_iterator(mnt))
        if (entry.path().filename() != "out.db") {
          std::fprintf(stderr, "%lld pages: left behind: %s\n", static_cast<long long>(pages),
                       entry.path().filename().c_str());
          ++failures;
        }
      umount(mnt.c_str());
    }
    if (full < 5 || fitted == 0) {
      std::fprintf(stderr, "%d exports failed and %d fitted: the sizes missed the boundary\n", full, fitted);
      ++failures;
    }
    std::fflush(stderr);
    return failures;
  });
  const int code = wait_exit(child);
  if (code == 77) GTEST_SKIP() << "cannot mount a private tmpfs here (needs root or user namespaces)";
  EXPECT_EQ(code, 0) << "see the child's messages above";
}

// The WAL index failing to grow (SQLITE_IOERR_SHMSIZE, no errno kept) happens when the disk is
// full; seen in the soak test as "disk I/O error (SQLite code 4874)".
TEST(TuningDbRobustness, WalIndexThatCannotGrowIsAFullDisk) {
  using dfgnn::db::ErrorKind;
  using dfgnn::db::detail::classify;
  EXPECT_EQ(classify(SQLITE_IOERR_SHMSIZE, 0), ErrorKind::DiskFull);
  EXPECT_EQ(classify(SQLITE_IOERR_WRITE, ENOSPC), ErrorKind::DiskFull);
  EXPECT_EQ(classify(SQLITE_IOERR_WRITE, EIO), ErrorKind::Io);
  EXPECT_EQ(classify(SQLITE_IOERR_SHMOPEN, 0), ErrorKind::Io);
}

// A full or read-only disk is reported as such, not as an unreadable database. Needs a private
// mount namespace with a small tmpfs (root, or an unprivileged user namespace); skipped without.
TEST(TuningDbRobustness, FullAndReadOnlyDisksAreNamed) {
  TempDir dir;
  const fs::path mnt = dir / "mnt";
  fs::create_directories(mnt);
  const pid_t child = spawn([&]() -> int {
    if (unshare(CLONE_NEWNS) != 0) {
      const uid_t uid = getuid();
      const gid_t gid = getgid();
      if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return 77;
      std::ofstream("/proc/self/setgroups") << "deny";
      std::ofstream("/proc/self/uid_map") << "0 " << uid << " 1";
      std::ofstream("/proc/self/gid_map") << "0 " << gid << " 1";
    }
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 77;
    if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=256k") != 0) return 77;
    const fs::path p = mnt / "user.db";
    auto db = TuningDb::open_user(p);
    db->put_result(make_run(h200(), op_gat(), 0, {cand(sched(32), 1)}));
    {  // fill the disk
      std::ofstream fill(mnt / "fill", std::ios::binary);
      const std::string block(4096, 'f');
      while (fill.write(block.data(), block.size())) {
      }
    }
    int failures = 0;
    auto check = [&](const char* what, const std::function<void()>& f, dfgnn::db::ErrorKind kind, const char* words) {
      try {
        f();
        std::fprintf(stderr, "%s: no error\n", what);
        ++failures;
      } catch (const dfgnn::db::DbError& e) {
        if (e.kind() != kind || !contains(e.what(), words) || contains(e.what(), "unreadable")) {
          std::fprintf(stderr, "%s: kind %s: %s\n", what, dfgnn::db::error_kind_name(e.kind()), e.what());
          ++failures;
        }
      }
    };
    check("put on a full disk", [&] {
      for (int k = 1; k < 200; ++k) db->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(8), 2)}));
    }, dfgnn::db::ErrorKind::DiskFull, "the disk is full");
    check("create on a full disk", [&] {
      auto fresh = TuningDb::open_user(mnt / "new.db");
      for (int k = 1; k < 200; ++k) fresh->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1)}));
    }, dfgnn::db::ErrorKind::DiskFull, "the disk is full");
    db.reset();
    fs::remove(mnt / "fill");
    fs::remove(mnt / "new.db");
    fs::remove(mnt / "new.db-wal");
    fs::remove(mnt / "new.db-shm");
    for (auto& e : fs::directory_iterator(mnt)) std::fprintf(stderr, "DBG %s %ld\n", e.path().c_str(), (long)fs::file_size(e.path()));
    if (mount(nullptr, mnt.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) != 0) return 78;
    check("open on a read-only disk", [&] {
      auto ro = TuningDb::open_user(p);
      ro->put_result(make_run(h200(), op_gat(), 300, {cand(sched(32), 1)}));
    }, dfgnn::db::ErrorKind::ReadOnly, "read-only");
    std::fflush(stderr);
    return failures;
  });
  const int code = wait_exit(child);
  if (code == 77) GTEST_SKIP() << "cannot mount a private tmpfs here (needs root or user namespaces)";
  EXPECT_EQ(code, 0) << "see the child's messages above";
}

}  // namespace
