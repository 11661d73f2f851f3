// Helpers of the tuning database tests (tests/cpu/test_db_*.cpp, test_layered_db.cpp): temporary
// directories, fingerprints, runs and candidates, raw SQL on a file, the expected DbError, a
// snapshot of a whole database, forked writers, and a full disk made with max_page_count.
#pragma once

#include "test_util.hpp"
#include "raw_sql.hpp"
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

namespace dfgnn::test::db_test {

namespace fs = std::filesystem;
using dfgnn::test::raw_exec;
using dfgnn::test::raw_int;
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
inline dfgnn_fingerprint_t fp_struct(int k) {
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
inline dfgnn::db::FingerprintText make_fp(int k) { return dfgnn::db_fingerprint(fp_struct(k)); }
inline std::string fp_hash(int k) { return dfgnn::db::fingerprint_hash(make_fp(k).text); }

inline EnvironmentInfo h200() { return EnvironmentInfo{"NVIDIA H200", 90, 132, 12040, 12080, "0.1.0", "t-hash-1"}; }
inline EnvironmentInfo a100() { return EnvironmentInfo{"NVIDIA A100-SXM4-80GB", 80, 108, 12040, 12080, "0.1.0", "t-hash-1"}; }

inline OpKey op_gat(int direction = 0) { return OpKey{0, 0, 4, 64, direction, 0}; }

inline std::string sched(int lanes, const char* solver = "subwarp") {
  return std::string(solver) + ":lanes=" + std::to_string(lanes) + ",groups=8,team=1,vec=1,mid=0,threshold=0,chunk=0";
}

inline CandidateStat cand(const std::string& schedule, double mean, int64_t count = 10, double sd = 0.01) {
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

inline TuningRun make_run(const EnvironmentInfo& env, const OpKey& op, int fp, std::vector<CandidateStat> candidates,
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
inline std::string subwarp_only(const TuningResult& r) {
  if (r.schedule.rfind("subwarp:", 0) != 0) return "unknown solver in \"" + r.schedule + "\"";
  const size_t pos = r.schedule.find("lanes=");
  if (pos == std::string::npos) return "no lanes";
  const int lanes = std::atoi(r.schedule.c_str() + pos + 6);
  if (lanes != 4 && lanes != 8 && lanes != 16 && lanes != 32) return "lanes " + std::to_string(lanes) + " out of range";
  return {};
}

inline TuningDb::Options with_validator() {
  TuningDb::Options o;
  o.validator = subwarp_only;
  return o;
}

inline std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}


inline std::string raw_text(const fs::path& p, const std::string& sql) {
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
inline CaughtDbError expect_error(F&& f) {
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

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Everything observable about a database's results and modules, with exact floats, without row ids.
inline std::map<std::string, std::string> snapshot(TuningDb& db) {
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
inline pid_t spawn(const std::function<int()>& body) {
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

inline int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// A full disk: SQLite's max_page_count on every connection this process opens while it lives.
inline int g_max_pages = 0;
inline int limit_pages(sqlite3* db, const char**, const sqlite3_api_routines*) {
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
// Enters a private mount namespace (root, else an unprivileged user namespace mapped to this user)
// so that a test child can mount a small tmpfs; false where the system allows neither.
inline bool enter_private_mounts() {
  if (unshare(CLONE_NEWNS) != 0) {
    const uid_t uid = getuid();
    const gid_t gid = getgid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return false;
    std::ofstream("/proc/self/setgroups") << "deny";
    std::ofstream("/proc/self/uid_map") << "0 " << uid << " 1";
    std::ofstream("/proc/self/gid_map") << "0 " << gid << " 1";
  }
  return mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
}

inline int64_t pages_of(const fs::path& p) { return raw_int(p, "PRAGMA page_count"); }

}  // namespace dfgnn::test::db_test
