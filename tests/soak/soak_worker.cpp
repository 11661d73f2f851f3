// One process of tools/soak.sh: tunes on fake timings (the tuner's real search() driven by a
// deterministic fake Measurer), stores each run in the shared user database or in its own
// private one, merges its private database into the shared one, exports the shared one and reads
// the export, in a random mix, until its deadline or a SIGKILL. Every outcome is one line
// appended to its log with one write() (so a SIGKILL never leaves half a line); a commit is
// logged only after put_result returned.
// The per-file atomicity case (issue 26): a fresh file of new runs, listed in the log once it is
// complete, is merged into the shared database by a child process that this worker SIGKILLs at a
// random moment after the merge began. tools/soak.sh checks that the shared database holds all of
// each such file's runs or none, and all of them when the merge returned.
//
//   soak_worker work DIR ID LOG SEED SECONDS   the loop above
//   soak_worker final DIR LOG                  after the soak: merges every private database into
//                                              the shared one, then exports it (no faults now)
//   soak_worker merge TARGET SOURCE LOG FD     the atomicity case's child: opens TARGET, writes
//                                              one byte to FD, merges SOURCE into it
#include "default_rule.hpp"
#include "dispatch.hpp"
#include "error.hpp"
#include "graph.hpp"
#include "graph_io.hpp"
#include "ops.hpp"
#include "schedule.hpp"
#include "search.hpp"
#include "solver.hpp"
#include "tuning_db.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace fs = std::filesystem;
namespace db = dfgnn::db;
using namespace dfgnn;

namespace {

int log_fd = -1;
void log_line(const std::string& line) {
  const std::string text = line + "\n";
  if (::write(log_fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) std::perror("soak log");
}

// Classifies a failure: a full filesystem is expected here; a lock error must never reach a
// caller (the database retries busy locks itself); anything else is reported as is.
void log_failure(const char* action, const std::exception& e) {
  std::string what = e.what();
  for (char& c : what)
    if (c == '\n') c = ' ';
  if (what.find("full") != std::string::npos || what.find("No space") != std::string::npos)
    log_line(std::string("enospc ") + action);
  else if (what.find("locked") != std::string::npos || what.find("busy") != std::string::npos)
    log_line(std::string("lockerror ") + action + " " + what);
  else
    log_line(std::string("error ") + action + " " + what);
}

// Fake timings: a fixed cost per (problem, schedule) plus log-normal noise; a few candidates fail
// verification, as wrong kernels would.
class FakeMeasurer : public tuner::Measurer {
 public:
  FakeMeasurer(uint64_t problem, uint64_t seed) : problem_(problem), rng_(seed) {}
  void prepare(std::size_t, const std::string&) override {}
  tuner::VerifyResult verify(std::size_t, const std::string& text) override {
    return cost(text) > 1.9 ? tuner::VerifyResult::fail("fake: output differs") : tuner::VerifyResult::pass();
  }
  void warmup(std::size_t, const std::string&) override {}
  double time(std::size_t, const std::string& text) override {
    const double t = cost(text) * std::exp(0.03 * normal_(rng_));
    now_s += t / 1000.0;
    return t;
  }
  double now_s = 0.0;

 private:
  double cost(const std::string& text) const {
    const uint64_t h = std::hash<std::string>{}(text) ^ (problem_ * 0x9e3779b97f4a7c15ULL);
    return 0.5 + static_cast<double>(h % 1000) / 700.0;  // [0.5, 1.93)
  }
  uint64_t problem_;
  std::mt19937_64 rng_;
  std::normal_distribution<double> normal_{0.0, 1.0};
};

db::EnvironmentInfo environment() {
  return {"NVIDIA H200 (soak)", 90, 132, 12040, 12080, dfgnnGetVersion(), "soak-template-hash"};
}

struct Problem {
  std::shared_ptr<Graph> graph;
  dfgnn_op_t op;
  PassKind pass;
};

std::vector<Problem> problems() {
  std::vector<std::shared_ptr<Graph>> graphs;
  const dfgnn_graph_options_t options = dfgnnGraphDefaultOptions();
  struct Shape {
    int64_t nodes;
    int32_t degree, hubs;
    int64_t hub_degree;
  };
  for (const Shape& g : {Shape{300, 4, 0, 0}, Shape{500, 8, 3, 300}, Shape{2000, 3, 2, 1500}}) {
    const EdgeList e = generate_planted_hubs(g.nodes, g.degree, g.hubs, g.hub_degree, 7);
    graphs.push_back(Graph::from_coo(e.num_nodes, e.num_edges(), e.edge_index.data(), DFGNN_INDEX_INT64, options));
  }
  std::vector<Problem> out;
  for (const auto& g : graphs)
    for (dfgnn_model_t model : {DFGNN_MODEL_GAT, DFGNN_MODEL_TRANSFORMER})
      for (int32_t dim : {32, 128})
        for (PassKind pass : {PassKind::Forward, PassKind::BackwardCol})
          out.push_back({g, dfgnnOpDefault(model, DFGNN_DTYPE_FLOAT32, 2, dim), pass});
  return out;
}

// One tuning run of a problem, as dfgnn::tune_pass builds it, on fake timings.
db::TuningRun tune(const Problem& p, size_t index, std::mt19937_64& rng, std::string run_id) {
  const PassProblem problem = pass_problem(*p.graph, p.op, p.pass, 4);
  const Schedule def = default_schedule(problem);
  std::vector<tuner::Candidate> candidates{{to_string(def), true}};
  // The default and a few others (keeps runs, and so the database, small over a long soak).
  for (const Schedule& s : enumerate_schedules(problem))
    if (to_string(s) != candidates[0].text && rng() % 4 == 0 && candidates.size() < 6)
      candidates.push_back({to_string(s), false});
  FakeMeasurer measurer(index, rng());
  tuner::SearchOptions options;
  options.prepare_threads = 0;
  options.max_samples = 5;
  options.clock = [&] { return measurer.now_s; };
  options.log = [](tuner::LogLevel, const std::string&) {};
  const tuner::SearchResult result = tuner::search(candidates, measurer, options);

  db::TuningRun run;
  run.environment = environment();
  run.op = op_key(p.op, p.pass, 4);
  run.fingerprint = dfgnn::db_fingerprint(*problem.fingerprint);
  run.default_schedule = candidates[0].text;
  for (const tuner::CandidateRecord& r : result.candidates) {
    if (r.samples.empty() || r.status == tuner::CandidateStatus::Failed) continue;
    run.candidates.push_back(
        db::summarize_samples(r.text, static_cast<int32_t>(parse_schedule(r.text).solver), r.samples));
  }
  run.run_id = std::move(run_id);
  run.tool_version = "soak_worker";
  return run;
}

db::TuningDb::Options db_options() {
  db::TuningDb::Options o;
  o.validator = row_problem;
  return o;
}

// Removes a database file and its sidecars when it goes out of scope.
struct RemoveDatabase {
  fs::path path;
  ~RemoveDatabase() {
    std::error_code ec;
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(path.string() + suffix, ec);
  }
};

// The per-file atomicity case: a batch file of 8-24 new runs, then its merge into the shared
// database in a child process. Three merges in four are SIGKILLed a random time after the child
// signals that the merge begins, uniform over the time uncut merges took; the fourth runs to the
// end and measures that time (measuring only merges that escaped the kill would bias it short).
void atomic_merge(const fs::path& dir, int id, const fs::path& log, const std::vector<Problem>& all,
                  std::mt19937_64& rng, double& merge_us) {
  char name[64];
  std::snprintf(name, sizeof name, "batch-%02d-%016llx.db", id, static_cast<unsigned long long>(rng()));
  const RemoveDatabase batch{dir / name};
  std::string uuids;
  {
    auto file = db::TuningDb::open_user(batch.path, db_options());
    for (int k = 0, runs = 8 + static_cast<int>(rng() % 17); k < runs; ++k) {
      const size_t index = rng() % all.size();
      char run_id[64];
      std::snprintf(run_id, sizeof run_id, "soak%02db%016llx", id, static_cast<unsigned long long>(rng()));
      const db::TuningRun run = tune(all[index], index, rng, run_id);
      if (run.candidates.empty()) continue;
      file->put_result(run);
      uuids += " " + run.run_id;
    }
  }  // closed: the file is complete
  if (uuids.empty()) return;
  log_line(std::string("batch ") + name + uuids);
  int ready[2];
  if (::pipe(ready) != 0) throw std::runtime_error("pipe failed");
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(ready[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a SIGKILLed worker takes its merge with it: another cut
    if (::getppid() != parent) ::_exit(1);
    const std::string fd = std::to_string(ready[1]), target = (dir / "shared.db").string();
    ::execl("/proc/self/exe", "soak_worker", "merge", target.c_str(), batch.path.c_str(), log.c_str(), fd.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(ready[1]);
  if (child < 0) {
    ::close(ready[0]);
    throw std::runtime_error("fork failed");
  }
  char byte = 0;
  const bool began = ::read(ready[0], &byte, 1) == 1;  // end of file: the child failed before merging
  ::close(ready[0]);
  const auto t0 = std::chrono::steady_clock::now();
  const bool cut = rng() % 4 != 0;
  const auto delay_us = static_cast<useconds_t>(rng() % static_cast<uint64_t>(merge_us + 1));
  if (began && cut) {
    ::usleep(delay_us);
    ::kill(child, SIGKILL);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  const double took_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    if (began && !cut) merge_us = 0.5 * merge_us + 0.5 * took_us;
    log_line(std::string("atomic done ") + name + " " + std::to_string(static_cast<int64_t>(took_us)));
  } else if (WIFSIGNALED(status)) {
    log_line(std::string("atomic killed ") + name + " " + std::to_string(delay_us));
  } else {
    log_line(std::string("atomic failed ") + name);  // the child logged why
  }
}

// The atomicity case's child: signals the parent once the target is open, then merges.
int merge_child(const fs::path& target, const fs::path& source, int ready_fd) {
  auto shared = db::TuningDb::open_user(target, db_options());
  if (::write(ready_fd, "m", 1) != 1) return 1;
  shared->merge_from(source);
  return 0;
}

int work(const fs::path& dir, int id, const fs::path& log, uint64_t seed, double seconds) {
  const fs::path shared = dir / "shared.db", mine = dir / ("private-" + std::to_string(id) + ".db");
  const fs::path exported = dir / "export.db";
  const std::vector<Problem> all = problems();
  std::mt19937_64 rng(seed);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::unique_ptr<db::TuningDb> shared_db, private_db;
  double merge_us = 5000;  // how long an uncut atomicity-case merge takes (a first guess)
  for (uint64_t step = 0; std::chrono::steady_clock::now() < deadline; ++step) {
    // A pause between actions: 16 workers share a small machine; contention comes from overlap.
    ::usleep(static_cast<useconds_t>(200000 + rng() % 500000));
    const int dice = static_cast<int>(rng() % 100);
    try {
      if (dice < 60) {  // tune; half the runs into the shared database, half into the private one
        const size_t index = rng() % all.size();
        char id_text[64];
        std::snprintf(id_text, sizeof id_text, "soak%02d%016llx", id, static_cast<unsigned long long>(rng()));
        const db::TuningRun run = tune(all[index], index, rng, id_text);
        if (run.candidates.empty()) continue;  // every candidate failed verification: nothing to store
        const bool to_shared = rng() % 2 == 0;
        auto& target = to_shared ? shared_db : private_db;
        if (!target) target = db::TuningDb::open_user(to_shared ? shared : mine, db_options());
        target->put_result(run);
        log_line(std::string("commit ") + (to_shared ? "shared " : "private ") + run.run_id);
      } else if (dice < 75) {  // merge the private database into the shared one
        if (!fs::exists(mine)) continue;
        if (!shared_db) shared_db = db::TuningDb::open_user(shared, db_options());
        const db::MergeReport r = shared_db->merge_from(mine);
        log_line("merge " + std::to_string(r.runs_added) + " " + std::to_string(r.runs_present) + " " +
                 std::to_string(r.runs_rejected));
      } else if (dice < 85) {  // export a snapshot of the shared database
        if (!shared_db) shared_db = db::TuningDb::open_user(shared, db_options());
        shared_db->export_to(exported);
        log_line("export");
      } else if (dice < 90) {  // the per-file atomicity case
        atomic_merge(dir, id, log, all, rng, merge_us);
      } else {  // read the snapshot as a site database, as dispatch would
        if (!fs::exists(exported)) continue;
        auto site = db::TuningDb::open_site(exported, db_options());
        size_t found = 0;
        const auto rows = site->list();
        for (const auto& row : rows) {
          if (!row.problem.empty()) {
            log_line("error read invalid row in export: " + row.problem);
            continue;
          }
          db::EnvironmentInfo env = environment();
          found += site->find_exact(env, row.result.op, row.result.fingerprint_hash).has_value();
        }
        log_line("read " + std::to_string(rows.size()) + " " + std::to_string(found));
      }
    } catch (const std::exception& e) {
      log_failure(dice < 60 ? "tune" : dice < 75 ? "merge" : dice < 85 ? "export" : dice < 90 ? "atomic" : "read", e);
      shared_db.reset();  // reopen after a failure, as a fresh process would
      private_db.reset();
    }
  }
  return 0;
}

int final_pass(const fs::path& dir) {
  auto shared = db::TuningDb::open_user(dir / "shared.db", db_options());
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("private-") && name.ends_with(".db")) {
      const db::MergeReport r = shared->merge_from(entry.path());
      log_line("final-merge " + name + " " + std::to_string(r.runs_added) + " " + std::to_string(r.runs_rejected));
    }
  }
  shared->export_to(dir / "export.db");
  log_line("final-export");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (!((mode == "work" && argc == 7) || (mode == "final" && argc == 4) || (mode == "merge" && argc == 6))) {
    std::fprintf(stderr, "usage: soak_worker work DIR ID LOG SEED SECONDS | soak_worker final DIR LOG | "
                         "soak_worker merge TARGET SOURCE LOG FD\n");
    return 2;
  }
  const char* log = argv[mode == "final" ? 3 : 4];
  log_fd = ::open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (log_fd < 0) {
    std::perror(log);
    return 2;
  }
  try {
    if (mode == "merge") return merge_child(argv[2], argv[3], std::stoi(argv[5]));
    return mode == "work" ? work(argv[2], std::stoi(argv[3]), log, std::stoull(argv[5]), std::stod(argv[6]))
                          : final_pass(argv[2]);
  } catch (const std::exception& e) {
    log_failure(mode.c_str(), e);
    std::fprintf(stderr, "soak_worker: %s\n", e.what());
    return 1;
  }
}
