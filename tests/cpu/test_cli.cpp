// The command-line tools dfgnn-tune and dfgnn-db, run as processes: arguments, exit codes and
// messages, the no-GPU path of dfgnn-tune, and every dfgnn-db command on databases written here
// through db::TuningDb (a fake GPU environment, as in test_dispatch.cpp).
#include "damaged_pages.hpp"
#include "raw_sql.hpp"
#include "test_util.hpp"

#include "context.hpp"
#include "dispatch.hpp"
#include "nvrtc.hpp"
#include "schedule.hpp"
#include "tuning_db.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sched.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#if !defined(DFGNN_TUNE_EXE) || !defined(DFGNN_DB_EXE)
// Built without the tools (DFGNN_BUILD_TOOLS=OFF): nothing to run.
TEST(Cli, ToolsNotBuilt) { GTEST_SKIP() << "dfgnn-tune / dfgnn-db are not built (DFGNN_BUILD_TOOLS=OFF)"; }
#else

using namespace dfgnn::test;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::random_device rd;
    path = fs::temp_directory_path() / ("dfgnn-cli-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct Result {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a tool with the given (already quoted) arguments; never reads or writes the user's cache.
// shell_prefix runs first in the same shell (e.g. "ulimit -v N;").
Result run_tool(const char* exe, const std::string& args, const std::string& shell_prefix = "") {
  const std::string command =
      shell_prefix + " env DFGNN_SITE_DB= DFGNN_LOG_LEVEL=error " + quote(exe) + " " + args + " 2>&1";
  Result r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}
Result tune(const std::string& args) { return run_tool(DFGNN_TUNE_EXE, args); }
Result db(const std::string& args) { return run_tool(DFGNN_DB_EXE, args); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
int count_of(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + 1)) ++n;
  return n;
}

// ------------------------------------------------------------------ databases written directly

const char* kValid = "subwarp:lanes=32,groups=8,team=1,vec=4,mid=0,threshold=0,chunk=0";
const char* kOther = "subwarp:lanes=16,groups=8,team=1,vec=4,mid=0,threshold=0,chunk=0";
const char* kHostile = "subwarp:lanes=7,groups=8,team=1,vec=4,mid=0,threshold=0,chunk=0";
const char* kEnvClass = "Test GPU|sm_90|132";

dfgnn::db::EnvironmentInfo test_environment(const std::string& gpu = "Test GPU") {
  dfgnn::db::EnvironmentInfo env;
  env.gpu_name = gpu;
  env.compute_capability = 90;
  env.sm_count = 132;
  env.library_version = dfgnnGetVersion();
  env.template_hash = "0123456789abcdef";
  env.nvrtc_version = 12080;
  return env;
}

dfgnn_fingerprint_t hub_fingerprint(uint64_t seed) {
  auto ctx = make_context();
  dfgnn_graph_t g = nullptr;
  EXPECT_EQ(dfgnnGraphCreatePlantedHubs(ctx.get(), 2000, 6, 2, 600, seed, nullptr, &g), DFGNN_STATUS_SUCCESS);
  GraphPtr owned(g);
  dfgnn_fingerprint_t fp{};
  EXPECT_EQ(dfgnnGraphGetFingerprint(g, &fp), DFGNN_STATUS_SUCCESS);
  return fp;
}

// Stores one run in which `winner` beat `loser`; `validate` = false writes it as a hostile shared
// database could (no validator).
void put(const std::string& path, uint64_t graph_seed, const std::string& winner, const std::string& loser,
         const std::string& gpu = "Test GPU", bool validate = true, const std::string& run_id = {}) {
  dfgnn::db::TuningDb::Options options;
  if (validate) options.validator = dfgnn::row_problem;
  auto file = dfgnn::db::TuningDb::open_user(path, options);
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_TRANSFORMER, DFGNN_DTYPE_FLOAT32, 1, 128);
  const auto solver = static_cast<int32_t>(dfgnn::parse_schedule(kValid).solver);
  dfgnn::db::TuningRun run;
  run.environment = test_environment(gpu);
  run.op = dfgnn::op_key(op, dfgnn::PassKind::Forward, 4);
  run.fingerprint = dfgnn::db_fingerprint(hub_fingerprint(graph_seed));
  run.default_schedule = loser;
  run.host = "node-a";
  run.tool_version = "test";
  run.run_id = run_id;
  run.candidates.push_back(dfgnn::db::summarize_samples(winner, solver, {0.50, 0.51, 0.49}));
  run.candidates.push_back(dfgnn::db::summarize_samples(loser, solver, {1.00, 1.02, 0.98}));
  ASSERT_TRUE(file->put_result(run).has_value());
}

// "results             N" from dfgnn-db stats.
std::string stats_line(const std::string& output, const std::string& key) {
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line))
    if (contains(line, "  " + key + " ")) return line;
  return {};
}

}  // namespace

// ------------------------------------------------------------------ dfgnn-tune

TEST(Cli, TuneHelpAndVersion) {
  Result r = tune("--help");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "Usage: dfgnn-tune")) << r.output;
  EXPECT_TRUE(contains(r.output, "--budget")) << r.output;
  r = tune("--version");
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(contains(r.output, dfgnnGetVersion())) << r.output;
}

TEST(Cli, TuneBadArgumentsExit2) {
  for (const char* args : {"--bogus", "", "data/cora --model resnet", "data/cora --dtype float64",
                           "data/cora --budget 0", "data/cora --direction sideways", "--rmat 0",
                           "--hubs 10,2,1", "data/cora --heads 0"}) {
    const Result r = tune(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "dfgnn-tune: ")) << r.output;
    EXPECT_EQ(count_of(r.output, "\n"), 1) << "one-line error expected for '" << args << "':\n" << r.output;
  }
}

// --model takes the model table's names (dfgnnModelName): --help lists them, an unknown one is a
// one-line error naming them.
TEST(Cli, TuneModelNamesAreTheTables) {
  std::string names;
  for (int m = 0; m < DFGNN_NUM_MODELS; ++m) {
    const char* name = nullptr;
    ASSERT_EQ(dfgnnModelName(static_cast<dfgnn_model_t>(m), &name), DFGNN_STATUS_SUCCESS);
    names += fmt::format("{}{}", m == 0 ? "" : ", ", name);
  }
  EXPECT_TRUE(contains(tune("--help").output, names + " or all")) << names;
  const Result r = tune("data/cora --model gat,resnet");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, fmt::format("dfgnn-tune: --model 'resnet' is not {} or all\n", names))) << r.output;
  EXPECT_EQ(count_of(r.output, "\n"), 1) << r.output;
}

// Edge features are tuned under their own key; AGNN has none, which is a bad argument (exit 2).
TEST(Cli, TuneEdgeFeaturesOnAgnnExit2) {
  const Result r = tune("--rmat 8 --model agnn --edge-features");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "dfgnn-tune: agnn float32 H=1 D=128 forward: op.edge_features is set but agnn takes no "
                                 "edge features")) << r.output;
}

// Dropout compiles its own kernels but shares the op's tuning results: --dropout names its rate in
// --explain and --compile-defaults, and is a one-line argument error anywhere else or out of range.
TEST(Cli, TuneDropoutIsForExplainAndCompileDefaults) {
  const Result ok = tune("--hubs 2000,4,1,300 --model gat --heads 8 --dim 8 --dropout 0.6 --explain");
  EXPECT_EQ(ok.code, 0) << ok.output;
  EXPECT_TRUE(contains(ok.output, "gat float32 H=8 D=8 dropout=0.6 forward")) << ok.output;
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"--hubs 2000,4,1,300 --dropout 0.5", "dfgnn-tune: --dropout goes with --compile-defaults or --explain"},
           {"--hubs 2000,4,1,300 --dropout 1 --explain", "dfgnn-tune: --dropout 1 is not a rate in [0, 1)"},
           {"--hubs 2000,4,1,300 --dropout -0.1 --explain", "dfgnn-tune: --dropout -0.1 is not a rate in [0, 1)"}}) {
    const Result r = tune(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, message)) << r.output;
    EXPECT_EQ(count_of(r.output, "\n"), 1) << r.output;
  }
}

// --compile-listed: every line's schedule compiled without a graph (a backward pass paired with a
// listed winner of the other pass), bad lines a one-line argument error naming the line.
TEST(Cli, TuneCompileListedCompilesEachLineAndNamesABadOne) {
  TempDir dir;
  const std::string list = dir / "list.txt";
  std::ofstream(list) << "gat float32 8 8 forward subwarp:lanes=16,heads=8,groups=8,team=1,vec=4,mid=0,threshold=0,chunk=0\n"
                         "\n"
                         "gat float32 8 8 backward_row subwarp:lanes=16,heads=8,groups=8,team=1,vec=4,mid=0,threshold=0,chunk=0\n"
                         "gat float32 8 8 backward_col edge_balanced:lanes=16,heads=8,groups=16,team=1,vec=4,mid=0,threshold=0,chunk=256\n";
  const std::string common = "--compile-defaults 90 --hubs 2000,4,1,300 --model gat --heads 8 --dim 8 --db " + quote(dir / "m.db");
  const std::string off = "export DFGNN_SHIPPED_DB=off;";
  Result r = run_tool(DFGNN_TUNE_EXE, common + " --compile-listed " + quote(list), off);
  ASSERT_EQ(r.code, 0) << r.output;
  const int64_t modules = dfgnn::test::raw_int(dir / "m.db", "SELECT count(*) FROM modules");
  // The defaults alone compile fewer: the listed kernels are not among them.
  r = run_tool(DFGNN_TUNE_EXE, "--compile-defaults 90 --hubs 2000,4,1,300 --model gat --heads 8 --dim 8 --db " +
                                   quote(dir / "d.db"), off);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_GT(modules, dfgnn::test::raw_int(dir / "d.db", "SELECT count(*) FROM modules"));
  for (const auto& [line, message] : std::vector<std::pair<std::string, std::string>>{
           {"gat float32 8 8 sideways x", "list.txt:1: pass 'sideways' is not forward, backward_row or backward_col"},
           {"gat float32 8", "list.txt:1: expected 'MODEL DTYPE HEADS DIM PASS SCHEDULE'"},
           {"gnat float32 8 8 forward x", "list.txt:1: --model 'gnat' is not"},
           {"gat float32 0 8 forward x", "list.txt:1: "},
           {"gat float32 8 8 forward nonsense", "list.txt:1: parse error: schedule 'nonsense'"}}) {
    std::ofstream(list) << line << "\n";
    r = run_tool(DFGNN_TUNE_EXE, common + " --compile-listed " + quote(list), off);
    EXPECT_NE(r.code, 0) << line;
    EXPECT_TRUE(contains(r.output, message)) << r.output;
  }
  r = tune("--hubs 2000,4,1,300 --compile-listed " + quote(list));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--compile-listed goes with --compile-defaults ARCH")) << r.output;
}

// Every winner of the shipped winners files (sm90.db, sm90-h100.db) has its kernels in the shipped
// sm90-modules.db (with dropout too for GAT, as bench/ship-modules.sh compiles them), and so do the
// winners of other models that answer a zoo configuration with no row of its own model
// (models_alike): a fresh process on an H100/H200 that the shipped database answers compiles nothing.
TEST(Cli, ShippedModulesHoldEveryShippedWinner) {
  const fs::path tuning = fs::path(DFGNN_SOURCE_DIR) / "data/tuning";
  TempDir dir;
  const std::string every = dir / "winners.txt", gat = dir / "gat.txt";
  {
    const char* models[] = {"gat", "gatv2", "transformer", "agnn"};
    const char* dtypes[] = {"float32", "float16", "bfloat16"};
    const char* passes[] = {"forward", "backward_row", "backward_col"};
    struct Row {
      std::string model, dtype;
      int heads, dim;
      std::string pass, schedule;
    };
    std::vector<Row> rows;
    for (const fs::path& file : shipped_winners_files()) {
      sqlite3* h = nullptr;
      ASSERT_EQ(sqlite3_open_v2(file.c_str(), &h, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK) << file;
      sqlite3_stmt* q = nullptr;
      ASSERT_EQ(sqlite3_prepare_v2(h, "SELECT DISTINCT model, dtype, heads, dim, direction, schedule FROM results", -1,
                                   &q, nullptr), SQLITE_OK);
      while (sqlite3_step(q) == SQLITE_ROW)
        rows.push_back({models[sqlite3_column_int(q, 0)], dtypes[sqlite3_column_int(q, 1)], sqlite3_column_int(q, 2),
                        sqlite3_column_int(q, 3), passes[sqlite3_column_int(q, 4)],
                        reinterpret_cast<const char*>(sqlite3_column_text(q, 5))});
      sqlite3_finalize(q);
      sqlite3_close(h);
    }
    ASSERT_GT(rows.size(), 100u);
    // Zoo configurations without a row of their model: another model's rows on the op shape answer.
    std::vector<Row> borrowed;
    for (const ZooEntry& z : read_zoo()) {
      const Row c{z.model, z.dtype, z.heads, z.dim, "", ""};
      const auto same_shape = [&](const Row& r) { return r.dtype == c.dtype && r.heads == c.heads && r.dim == c.dim; };
      if (std::any_of(rows.begin(), rows.end(), [&](const Row& r) { return r.model == c.model && same_shape(r); }))
        continue;
      for (const Row& r : rows)
        if (same_shape(r)) borrowed.push_back({c.model, r.dtype, r.heads, r.dim, r.pass, r.schedule});
    }
    std::ofstream all(every), gat_only(gat);
    for (const std::vector<Row>* list : {&rows, &borrowed})
      for (const Row& r : *list) {
        const std::string line = fmt::format("{} {} {} {} {} {}\n", r.model, r.dtype, r.heads, r.dim, r.pass, r.schedule);
        all << line;
        if (r.model == "gat") gat_only << line;
      }
  }
  // Only the modules file is shipped here, so what is not in it is compiled (and counted).
  const std::string env = "export DFGNN_SHIPPED_DB=" + quote(tuning / "sm90-modules.db") + ";";
  for (const auto& [list, dropout] : {std::pair{every, ""}, std::pair{gat, " --dropout 0.5"}}) {
    const Result r = run_tool(DFGNN_TUNE_EXE, "--compile-defaults 90 --hubs 20000,8,4,4000 --model gat --heads 8 --dim 8 "
                                              "--compile-listed " + quote(list) + dropout + " --db " + quote(dir / "m.db"),
                              env);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "compiled 0 module(s) for sm_90")) << dropout << ": a winner's kernel is not shipped; "
        "rebuild data/tuning/sm90-modules.db with bench/ship-modules.sh\n" << r.output;
  }
}

TEST(Cli, TuneMissingGraphExit1) {
  TempDir dir;
  const std::string missing = dir / "no-such-graph.txt";
  const Result r = tune(quote(missing) + " --db " + quote(dir / "t.db"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, missing)) << r.output;
  EXPECT_FALSE(fs::exists(dir / "t.db"));
}

TEST(Cli, TuneWithoutGpuFingerprintsThenExit3) {
  {
    auto ctx = make_context();
    int has = 0;
    DFGNN_ASSERT_OK(dfgnnHasDevice(ctx.get(), &has, nullptr));
    if (has) GTEST_SKIP() << "a CUDA device is present: the no-GPU path cannot be checked here";
  }
  TempDir dir;
  const std::string cora = std::string(DFGNN_SOURCE_DIR) + "/data/cora";
  const Result r = tune(quote(cora) + " --model gat,transformer --direction both --budget 1 --db " +
                        quote(dir / "t.db") + " --json " + quote(dir / "report.json"));
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_TRUE(contains(r.output, "fingerprint: 2708 nodes, 10556 edges")) << r.output;
  EXPECT_TRUE(contains(r.output, "bucket key: n2^")) << r.output;
  EXPECT_TRUE(contains(r.output, "4 problem(s)")) << r.output;
  EXPECT_TRUE(contains(r.output, "needs a GPU")) << r.output;
  EXPECT_TRUE(contains(r.output, "no CUDA device")) << r.output;
  EXPECT_FALSE(fs::exists(dir / "t.db"));  // nothing tuned, nothing written
  std::ifstream in(dir / "report.json");
  const nlohmann::json doc = nlohmann::json::parse(in);
  ASSERT_EQ(doc.at("problems").size(), 4u);
  EXPECT_EQ(doc["problems"][0].at("status"), "skipped");
  EXPECT_EQ(doc["problems"][0].at("fingerprint").at("num_nodes"), 2708);
}

// ------------------------------------------------------------------ dfgnn-db

TEST(Cli, DbListShowStats) {
  TempDir dir;
  const std::string path = dir / "user.db";
  put(path, 1, kValid, kOther);
  put(path, 2, kOther, kValid);
  Result r = db("--db " + quote(path) + " list");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count_of(r.output, kEnvClass), 2) << r.output;
  EXPECT_TRUE(contains(r.output, "transformer/float32/H1/D128/forward")) << r.output;
  EXPECT_TRUE(contains(r.output, kValid)) << r.output;
  EXPECT_TRUE(contains(r.output, "node-a")) << r.output;
  EXPECT_TRUE(contains(r.output, "2 result(s)")) << r.output;
  EXPECT_FALSE(contains(r.output, "INVALID")) << r.output;
  r = db("--db " + quote(path) + " list --env 'Other GPU|sm_90|132'");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "0 result(s)")) << r.output;

  r = db("--db " + quote(path) + " show 1");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "result 1 in")) << r.output;
  EXPECT_TRUE(contains(r.output, "pooled candidates (2)")) << r.output;
  EXPECT_TRUE(contains(r.output, kOther)) << r.output;
  EXPECT_TRUE(contains(r.output, "Test GPU (sm_90, 132 SMs)")) << r.output;
  r = db("--db " + quote(path) + " show 99");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "no result with id 99")) << r.output;
  EXPECT_EQ(db("--db " + quote(path) + " show one").code, 2);

  r = db("--db " + quote(path) + " stats");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(stats_line(r.output, "results"), " 2 ")) << r.output;
  EXPECT_TRUE(contains(stats_line(r.output, "runs"), " 2")) << r.output;
}

TEST(Cli, DbExportGivesAReadableSnapshot) {
  TempDir dir;
  const std::string path = dir / "user.db", out = dir / "site/site.db";
  put(path, 1, kValid, kOther);
  Result r = db("--db " + quote(path) + " export " + quote(out));
  EXPECT_EQ(r.code, 0) << r.output;
  ASSERT_TRUE(fs::exists(out));
  r = db("--db " + quote(out) + " list");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, kValid)) << r.output;
  EXPECT_TRUE(contains(r.output, "1 result(s)")) << r.output;
  r = db("--site " + quote(out) + " stats");  // opened immutable as a site database
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "site, read-only")) << r.output;
  EXPECT_TRUE(contains(stats_line(r.output, "results"), " 1 ")) << r.output;
  EXPECT_EQ(db("--site " + quote(out) + " prune --env x").code, 2);  // sites are read-only
}

TEST(Cli, DbMergeIsIdempotent) {
  TempDir dir;
  const std::string a = dir / "a.db", b = dir / "b.db", into = dir / "merged.db";
  put(a, 1, kValid, kOther, "Test GPU", true, "run-a-1");
  put(b, 1, kValid, kOther, "Test GPU", true, "run-b-1");  // the same problem, tuned on another node
  put(b, 2, kOther, kValid, "Test GPU", true, "run-b-2");
  Result r = db("--db " + quote(into) + " merge " + quote(a) + " " + quote(b));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "1 run(s) added")) << r.output;
  EXPECT_TRUE(contains(r.output, "2 run(s) added")) << r.output;
  const Result first = db("--db " + quote(into) + " stats");
  r = db("--db " + quote(into) + " import " + quote(a) + " " + quote(b));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "0 run(s) added"), 2) << r.output;
  const Result second = db("--db " + quote(into) + " stats");
  EXPECT_EQ(stats_line(first.output, "results"), stats_line(second.output, "results"));
  EXPECT_EQ(stats_line(first.output, "runs"), stats_line(second.output, "runs"));
  EXPECT_TRUE(contains(stats_line(second.output, "results"), " 2 ")) << second.output;
  EXPECT_TRUE(contains(stats_line(second.output, "runs"), " 3")) << second.output;
  r = db("--db " + quote(into) + " list");
  EXPECT_TRUE(contains(r.output, "  2  ")) << r.output;  // the shared problem pooled two runs
  r = db("--db " + quote(into) + " merge " + quote(dir / "missing.db"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "cannot open")) << r.output;
}

TEST(Cli, DbPrune) {
  TempDir dir;
  const std::string path = dir / "user.db";
  put(path, 1, kValid, kOther);
  put(path, 2, kValid, kOther, "Other GPU");
  Result r = db("--db " + quote(path) + " prune");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "filter")) << r.output;
  r = db("--db " + quote(path) + " prune --env " + quote(kEnvClass));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "1 run(s), 1 result(s)")) << r.output;
  r = db("--db " + quote(path) + " list");
  EXPECT_EQ(count_of(r.output, kEnvClass), 0) << r.output;
  EXPECT_TRUE(contains(r.output, "Other GPU|sm_90|132")) << r.output;
  r = db("--db " + quote(path) + " prune --older-than 1");  // everything is fresh
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "0 run(s)")) << r.output;
  EXPECT_EQ(db("--db " + quote(path) + " prune --older-than -1").code, 2);
  // 1e15 days used to overflow the cutoff's 64-bit seconds (llround of 8.6e19).
  r = db("--db " + quote(path) + " prune --older-than 1e15");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "from 0 to 1000000")) << r.output;
  EXPECT_EQ(db("--db " + quote(path) + " list --older-than 3").code, 2);
}

// Modules of the given names, compiled by this build and stored under kernel source `source`.
void put_modules(const std::string& path, const std::vector<std::vector<std::string>>& modules,
                 const std::string& source, const std::vector<char>* image = nullptr) {
  auto file = dfgnn::db::TuningDb::open_user(path);
  for (const std::vector<std::string>& names : modules) {
    const dfgnn::Cubin cubin = dfgnn::compile(names, 90);
    dfgnn::db::ModuleRecord m;
    m.key = fmt::format("{}-{}", source, names.front());
    m.image = dfgnn::packed_module_image(image != nullptr ? *image : cubin.image);
    m.names = names;
    m.lowered = cubin.lowered;
    m.arch = 90;
    m.nvrtc_version = 13000;
    m.template_hash = source;
    file->put_module(m);
  }
}

std::vector<std::string> stamps_of(const std::string& path) {
  std::vector<std::string> out;
  for (const auto& s : dfgnn::db::TuningDb::open_read_only(path, {})->build_stamps()) out.push_back(s.template_hash);
  return out;
}

// The winners (test_environment's kernel source 0123456789abcdef) are re-stamped only when every
// module without dropout has the same machine code in this build; a dropout module is not compared.
TEST(Cli, DbRestampChecksTheMachineCodeFirst) {
  TempDir dir;
  const std::string winners = dir / "winners.db", old_modules = dir / "old.db", new_modules = dir / "new.db";
  const std::string old_source = "0123456789abcdef", current = dfgnn::kernel_source_hash();
  put(winners, 1, kValid, kOther);
  const std::vector<std::string> a{"&dfgnn::reduce_nodes_stage2<false>"}, b{"&dfgnn::reduce_nodes_stage2<true>"};
  const std::vector<std::string> dropout{
      "&dfgnn::rows_kernel<dfgnn::Forward<dfgnn::Geo<float,7,1,8,1,false,1,true>,dfgnn::Gat>,32,1>"};
  put_modules(old_modules, {a, b, dropout}, old_source);
  const std::string restamp = "--db " + quote(winners) + " restamp " + quote(old_modules) + " ";

  // Another machine code for b (a's image under b's names), then b missing: refused, nothing changed.
  const std::string other = dir / "other.db", missing = dir / "missing.db";
  put_modules(other, {a}, current);
  const std::vector<char> a_image = dfgnn::compile(a, 90).image;
  put_modules(other, {b}, current, &a_image);
  Result r = db(restamp + quote(other));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "reduce_nodes_stage2<true>: other machine code")) << r.output;
  EXPECT_TRUE(contains(r.output, "1 of 2 modules without dropout changed")) << r.output;
  put_modules(missing, {a}, current);
  r = db(restamp + quote(missing));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "reduce_nodes_stage2<true>: not in")) << r.output;
  EXPECT_EQ(stamps_of(winners), std::vector<std::string>{old_source});

  // The same code: re-stamped, results and environments.
  put_modules(new_modules, {a, b}, current);
  r = db(restamp + quote(new_modules));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "1 result(s) from kernel source " + old_source + " to " + current +
                                     ": 2 module(s) of the same machine code, 1 with dropout not compared"))
      << r.output;
  EXPECT_EQ(stamps_of(winners), std::vector<std::string>{current});
  EXPECT_EQ(raw_int(winners, "SELECT count(*) FROM environments WHERE template_hash = '" + current + "'"), 1);
  EXPECT_EQ(raw_int(winners, "SELECT count(*) FROM environments WHERE template_hash != '" + current + "'"), 0);
  EXPECT_EQ(db("--db " + quote(winners) + " verify").code, 0);
  // Nothing left to re-stamp; the new file as the old one; bad arguments.
  r = db(restamp + quote(new_modules));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "holds no result of kernel source " + old_source)) << r.output;
  r = db("--db " + quote(winners) + " restamp " + quote(new_modules) + " " + quote(new_modules));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "is of this build's kernel source already")) << r.output;
  r = db("--db " + quote(winners) + " restamp " + quote(old_modules));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THROW(dfgnn::db::TuningDb::open_user(winners)->restamp(current, current), dfgnn::db::DbError);
}

TEST(Cli, DbVerify) {
  TempDir dir;
  const std::string good = dir / "good.db", bad = dir / "bad.db";
  put(good, 1, kValid, kOther);
  Result r = db("--db " + quote(good) + " verify");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "OK")) << r.output;

  put(bad, 1, kValid, kOther);
  put(bad, 2, kHostile, kValid, "Test GPU", /*validate=*/false);
  r = db("--db " + quote(bad) + " verify");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "problem(s)")) << r.output;
  EXPECT_TRUE(contains(r.output, "lanes=7")) << r.output;
  r = db("--db " + quote(bad) + " list");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "INVALID: "), 1) << r.output;
  EXPECT_TRUE(contains(r.output, "1 invalid")) << r.output;
}

TEST(Cli, DbErrors) {
  TempDir dir;
  const std::string garbage = dir / "garbage.db";
  {
    std::ofstream f(garbage);
    f << std::string(4096, 'x');
  }
  for (const char* command : {"list", "stats", "verify", "show 1", "prune --env x", "export out.db"}) {
    const Result r = db("--db " + quote(garbage) + " " + command);
    EXPECT_EQ(r.code, 1) << command << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "not an SQLite database")) << command << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, garbage)) << r.output;
  }
  Result m = db("--db " + quote(dir / "new.db") + " merge " + quote(garbage));
  EXPECT_EQ(m.code, 1) << m.output;
  EXPECT_TRUE(contains(m.output, "not an SQLite database")) << m.output;
  EXPECT_FALSE(fs::exists(dir / "new.db"));  // a bad source merges nothing and creates nothing
  EXPECT_EQ(fs::file_size(garbage), 4096u);  // left untouched
  const std::string missing = dir / "missing.db";
  Result r = db("--db " + quote(missing) + " list");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "cannot open " + missing)) << r.output;
  EXPECT_FALSE(fs::exists(missing));
  r = db("--db " + quote(dir / "x.db") + " frobnicate");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(db("--db " + quote(dir / "x.db")).code, 2);
  EXPECT_EQ(db("--bogus list").code, 2);
  r = db("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(contains(r.output, "merge")) << r.output;
}

// Issue 26: dfgnn-tune --explain tunes nothing, and a read-only command writes nothing: it used to
// create $DFGNN_CACHE_DIR/tuning.db (and the directory).
TEST(Cli, TuneExplainCreatesNoDatabase) {
  TempDir dir;
  const std::string cora = std::string(DFGNN_SOURCE_DIR) + "/data/cora";
  const Result r = run_tool(DFGNN_TUNE_EXE, quote(cora) + " --model gat --explain",
                            "export DFGNN_CACHE_DIR=" + quote(dir / "cache") + ";");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "database: " + (dir / "cache/tuning.db") + " (user)")) << r.output;
  EXPECT_FALSE(fs::exists(dir / "cache/tuning.db"));
  EXPECT_FALSE(fs::exists(dir / "cache"));
  // An existing user database is still read.
  put(dir / "cache/tuning.db", 1, kValid, kOther);
  const Result again = run_tool(DFGNN_TUNE_EXE, quote(cora) + " --model gat --explain",
                                "export DFGNN_CACHE_DIR=" + quote(dir / "cache") + ";");
  EXPECT_EQ(again.code, 0) << again.output;
}

// ---------------------------------------------------------------- issue 15: sizes and exceptions

int line_count(const std::string& text) { return count_of(text, "\n"); }

// dfgnn-tune refuses D in [2^30 + 1, 2^31 - 1] at once, in one line (`timeout` turns a hang into a failure).
TEST(Cli, TuneRefusesAHugeDimAtOnce) {
  const std::string cora = std::string(DFGNN_SOURCE_DIR) + "/data/cora";
  for (const char* dims : {"--dim 1073741825", "--dim 2147483647", "--heads 100000 --dim 100000"}) {
    SCOPED_TRACE(dims);
    const Result plain = run_tool(DFGNN_TUNE_EXE, std::string(dims) + " " + quote(cora), "timeout 20");
    EXPECT_NE(plain.code, 0) << plain.output;
    EXPECT_NE(plain.code, 124) << "timed out: " << plain.output;
    EXPECT_EQ(line_count(plain.output), 1) << plain.output;
    EXPECT_TRUE(contains(plain.output, "16777216")) << plain.output;
  }
}

// ---------------------------------------------------------------- second audit: dfgnn-tune and dfgnn-bench options

// A seed outside uint64 ("-1") is refused, not wrapped to 2^64 - 1.
TEST(Cli, TuneAndBenchRefuseASeedOutsideUint64) {
  TempDir dir;
  const std::string db_arg = " --db " + quote(dir / "t.db");
  for (const char* seed : {"-1", "18446744073709551616", "1x", "''"}) {
    SCOPED_TRACE(seed);
    const Result t = tune("--rmat 4 --explain" + db_arg + " --seed " + seed);
    EXPECT_EQ(t.code, 2) << t.output;
    EXPECT_EQ(line_count(t.output), 1) << t.output;
    EXPECT_TRUE(contains(t.output, "dfgnn-tune: --seed '")) << t.output;
    EXPECT_TRUE(contains(t.output, "' is not an integer in 0..18446744073709551615")) << t.output;
#ifdef DFGNN_BENCH_EXE
    const Result b = run_tool(DFGNN_BENCH_EXE, std::string("--rmat 4 --dry-run --seed ") + seed);
    EXPECT_EQ(b.code, 2) << b.output;
    EXPECT_EQ(line_count(b.output), 1) << b.output;
    EXPECT_TRUE(contains(b.output, "dfgnn-bench: --seed '")) << b.output;
#endif
  }
  const Result top = tune("--rmat 4 --explain" + db_arg + " --seed 18446744073709551615");
  EXPECT_EQ(top.code, 0) << top.output;
  EXPECT_TRUE(contains(top.output, "graph rmat-s4-e256-seed18446744073709551615 (valid)")) << top.output;
}

// --json FILE is checked for writing before any work, with the reason (/proc refuses new files even to root).
TEST(Cli, TuneAndBenchCheckThatTheJsonFileCanBeWrittenFirst) {
  TempDir dir;
  const std::string db_arg = " --db " + quote(dir / "t.db");
  const Result t = tune("--rmat 4" + db_arg + " --json /proc/dfgnn-report.json");
  EXPECT_EQ(t.code, 2) << t.output;
  EXPECT_EQ(line_count(t.output), 1) << t.output;
  EXPECT_TRUE(contains(t.output, "dfgnn-tune: --json /proc/dfgnn-report.json: cannot write the file: ")) << t.output;
#ifdef DFGNN_BENCH_EXE
  const Result b = run_tool(DFGNN_BENCH_EXE, "--rmat 4 --json /proc/dfgnn-report.json");
  EXPECT_EQ(b.code, 2) << b.output;
  EXPECT_TRUE(contains(b.output, "dfgnn-bench: --json /proc/dfgnn-report.json: cannot write the file: ")) << b.output;
#endif
  // The check neither leaves a new file behind nor truncates an existing one when the run fails.
  const Result missing = tune(quote(dir / "no-such-graph.txt") + db_arg + " --json " + quote(dir / "new.json"));
  EXPECT_EQ(missing.code, 1) << missing.output;
  EXPECT_FALSE(fs::exists(dir / "new.json"));
  std::ofstream(dir / "old.json") << "{\"kept\": true}\n";
  EXPECT_EQ(tune(quote(dir / "no-such-graph.txt") + db_arg + " --json " + quote(dir / "old.json")).code, 1);
  std::ifstream in(dir / "old.json");
  EXPECT_EQ(nlohmann::json::parse(in).at("kept"), true);
}

// A --site file that does not exist is an error, not a skipped layer.
TEST(Cli, TuneRefusesAMissingSiteDatabase) {
  TempDir dir;
  put(dir / "site.db", 1, kValid, kOther);
  const Result r = tune("--rmat 4 --explain --db " + quote(dir / "t.db") + " --site " + quote((dir / "site.db") + ":" + (dir / "typo.db")));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(line_count(r.output), 1) << r.output;
  EXPECT_TRUE(contains(r.output, "dfgnn-tune: --site " + (dir / "typo.db") + " is not an existing file")) << r.output;
  EXPECT_EQ(tune("--rmat 4 --explain --db " + quote(dir / "t.db") + " --site " + quote((dir / "site.db") + "::")).code, 0);
}

// A huge --budget (1e300 s) prints as a sane plan line, without integer overflow.
TEST(Cli, TunePrintsAHugeBudgetWithoutGarbage) {
  TempDir dir;
  const Result r = tune("--rmat 4 --explain --budget 1e300 --db " + quote(dir / "t.db"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "budget 1e+300 s each (at most --:--)")) << r.output;
}

#ifdef DFGNN_BENCH_EXE
Result bench(const std::string& args) { return run_tool(DFGNN_BENCH_EXE, args, "timeout 60"); }

TEST(Cli, BenchChecksItsOptions) {
  TempDir dir;
  const std::string missing_db = dir / "typo.db";
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      // --iters is bounded (no 2^31 - 1 CUDA event pairs).
      {"--iters 2147483647", "--iters 2147483647 must be in 1..100000"},
      {"--iters 0", "--iters 0 must be in 1..100000"},
      {"--warmup 100001", "--warmup 100001 must be in 0..100000"},
      {"--warmup -1", "--warmup -1 must be in 0..100000"},
      // --json with --dry-run is refused, not ignored.
      {"--json " + quote(dir / "r.json"), "--json: --dry-run measures nothing and writes no JSON"},
      // A missing --db is refused, not skipped for the default rule.
      {"--db " + quote(missing_db), "--db " + missing_db + " is not an existing file"},
      // Checked before and still so (one line each, exit 2).
      {"--heads 0", "--heads 0 must be >= 1"},
      {"--rotations 65", "--rotations 65 must be in 0..64"},
      {"--device -1", "--device -1 must be >= 0"},
      {"--dropout 1", "--dropout 1 is not a rate in [0, 1)"},
      {"--dropout -0.5", "--dropout -0.5 is not a rate in [0, 1)"},
      {"--dropout nan", "--dropout nan is not a rate in [0, 1)"},
      {"--iters 1e3", "the argument ('1e3') for option '--iters' is invalid"},
      {"--schedules 'all;default'", "--schedules all cannot be combined with other schedules"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const Result r = bench("--rmat 4 --dry-run " + c.args);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_EQ(line_count(r.output), 1) << r.output;
    EXPECT_TRUE(contains(r.output, "dfgnn-bench: " + c.message)) << r.output;
  }
  EXPECT_FALSE(fs::exists(dir / "r.json"));
  const Result ok = bench("--rmat 4 --dry-run --iters 100000 --warmup 0 --model gat");
  EXPECT_EQ(ok.code, 0) << ok.output;
  EXPECT_TRUE(contains(ok.output, "rmat-s4-e256-seed1 (16 nodes")) << ok.output;
  const Result no_file = bench("--graph " + quote(dir / "none.txt") + " --dry-run");
  EXPECT_EQ(no_file.code, 1) << no_file.output;
  EXPECT_TRUE(contains(no_file.output, dir / "none.txt")) << no_file.output;
}
#endif  // DFGNN_BENCH_EXE

#ifdef DFGNN_GRAPH_EXE
Result graph_tool(const std::string& args, const std::string& prefix = "timeout 60") {
  return run_tool(DFGNN_GRAPH_EXE, args, prefix);
}

TEST(Cli, GraphChecksSizesBeforeAllocating) {
  const std::string cora = quote(std::string(DFGNN_SOURCE_DIR) + "/data/cora");
  // Used to die of std::bad_alloc (rc 134) with its buffered output lost.
  for (const char* dims : {"--heads 1 --dim 1073741825", "--heads 100000 --dim 100000"}) {
    SCOPED_TRACE(dims);
    const Result r = graph_tool(std::string(dims) + " " + cora);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_EQ(line_count(r.output), 1) << r.output;
    EXPECT_TRUE(contains(r.output, "dfgnn-graph: --heads")) << r.output;
    EXPECT_TRUE(contains(r.output, "exceeds 16777216 channels per node")) << r.output;
  }
  // Within the channel limit but beyond memory (2708 x 2^24 doubles per array): std::bad_alloc is
  // caught at main, one line on stderr, and what was printed before is kept.
  const Result oom = graph_tool("--heads 4096 --dim 4096 " + cora, "ulimit -v 8388608; timeout 60");
  EXPECT_EQ(oom.code, 1) << oom.output;
  EXPECT_TRUE(contains(oom.output, "graph " + std::string(DFGNN_SOURCE_DIR) + "/data/cora (valid)")) << oom.output;
  EXPECT_TRUE(contains(oom.output, "nodes 2708  edges 10556")) << oom.output;
  EXPECT_TRUE(oom.output.ends_with("dfgnn-graph: out of host memory\n")) << oom.output;
}

TEST(Cli, GraphRejectsNegativeRmatEdges) {
  const Result r = graph_tool("--rmat-scale 4 --rmat-edges -1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(line_count(r.output), 1) << r.output;
  EXPECT_TRUE(contains(r.output, "--rmat-edges -1 must be >= 0")) << r.output;
  const Result ok = graph_tool("--rmat-scale 4 --rmat-edges 40 --no-ops");
  EXPECT_EQ(ok.code, 0) << ok.output;
  EXPECT_TRUE(contains(ok.output, "rmat-scale4-edges40-seed1 (valid)")) << ok.output;
  EXPECT_EQ(graph_tool("--rmat-edges 40 --no-ops x").code, 2);  // --rmat-edges without --rmat-scale
}

// --rmat-scale outside 1..30, and a GRAPH given beside it, are refused by the tool before any use.
TEST(Cli, GraphChecksTheRmatScale) {
  const std::string cora = quote(std::string(DFGNN_SOURCE_DIR) + "/data/cora");
  for (const char* scale : {"-1", "0", "31", "64"}) {
    SCOPED_TRACE(scale);
    const Result r = graph_tool(std::string("--no-ops --rmat-scale ") + scale + " " + cora);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_EQ(line_count(r.output), 1) << r.output;
    EXPECT_TRUE(contains(r.output, fmt::format("dfgnn-graph: --rmat-scale {} is not a scale in 1..30", scale)))
        << r.output;
  }
  const Result both = graph_tool("--no-ops --rmat-scale 4 " + cora);
  EXPECT_EQ(both.code, 2) << both.output;
  EXPECT_TRUE(contains(both.output, "dfgnn-graph: give GRAPH or --rmat-scale, not both")) << both.output;
}

// A planted-hub graph beyond the node limit (2^40) is refused before anything is allocated.
TEST(Cli, TuneRefusesAHugePlantedHubGraphBeforeAllocating) {
  const Result r = run_tool(DFGNN_TUNE_EXE, "--heads 1 --dim 32 --hubs 1099511627776,0,1,0", "ulimit -v 8388608; timeout 60");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "num_nodes = 1099511627776 exceeds dfgnn's limit of 2147483646 nodes")) << r.output;
}

TEST(Cli, GraphReportsFileErrorsInOneLine) {
  TempDir dir;
  const std::string file = dir / "g.txt";
  std::ofstream(file) << "# nodes 10 edges 2147483647\n0 1\n";
  const Result r = graph_tool(quote(file));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(line_count(r.output), 1) << r.output;
  EXPECT_TRUE(contains(r.output, "file ends after 1 edge lines, the header declares 2147483647")) << r.output;
}
// Issue 26: a 40-byte file with one large node id is refused within a 1 GB address space, in one
// line naming the ratio and dfgnnGraphCreateCoo (exit 1).
TEST(Cli, GraphRefusesOneLargeNodeIdWithin1GB) {
  TempDir dir;
  const std::string file = dir / "g.txt";
  std::ofstream(file) << "# nodes 2147483646 edges 1\n2147483645 0\n";
  const Result r = graph_tool(quote(file), "ulimit -v 1048576; timeout 60");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(line_count(r.output), 1) << r.output;
  EXPECT_TRUE(contains(r.output, "declares 2147483646 nodes for 1 edge(s) read, 2147483646 nodes per edge")) << r.output;
  EXPECT_TRUE(contains(r.output, "dfgnnGraphCreateCoo")) << r.output;
}
// Issue 26: a FIFO as the graph file, or as DIR/edges.txt, blocked until a writer appeared (here:
// killed by timeout, exit 124). Refused at once, as the database layers refuse FIFOs.
TEST(Cli, GraphRefusesAFifo) {
  TempDir dir;
  fs::create_directories(dir.path / "dataset");
  ASSERT_EQ(::mkfifo((dir / "g.txt").c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo((dir / "dataset/edges.txt").c_str(), 0600), 0);
  for (const std::string& path : {dir / "g.txt", dir / "dataset"}) {
    SCOPED_TRACE(path);
    const Result r = graph_tool(quote(path), "timeout 20");
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_EQ(line_count(r.output), 1) << r.output;
    EXPECT_TRUE(contains(r.output, "is a FIFO (named pipe), not a regular file")) << r.output;
  }
}
#endif  // DFGNN_GRAPH_EXE

#ifdef DFGNN_VERIFY_EXE
// --threads is checked (0 and counts the host cannot start are refused) before the GPU is looked for.
TEST(Cli, VerifyChecksTheThreadCount) {
  for (const char* threads : {"0", "-3", "100000"}) {
    SCOPED_TRACE(threads);
    const Result r = run_tool(DFGNN_VERIFY_EXE, std::string("--quick --threads ") + threads, "timeout 60");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_EQ(line_count(r.output), 1) << r.output;
    EXPECT_TRUE(contains(r.output, fmt::format("dfgnn-verify: --threads {} must be in 1..1024", threads))) << r.output;
  }
}

// --part K/N is checked before the GPU is looked for: a part that selects nothing, or text that is
// no part, is refused with one line (a memcheck run of a wrong part would pass having checked nothing).
TEST(Cli, VerifyChecksThePart) {
  for (const char* part : {"0/4", "5/4", "1/0", "2", "1/4x", "-1/4", "1/99999999999", "/4", "1/"}) {
    SCOPED_TRACE(part);
    const Result r = run_tool(DFGNN_VERIFY_EXE, std::string("--tiny --part ") + quote(part), "timeout 60");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_EQ(line_count(r.output), 1) << r.output;
    EXPECT_TRUE(contains(r.output, fmt::format("dfgnn-verify: --part {} must be K/N with 1 <= K <= N <= 10000", part)))
        << r.output;
  }
  // A valid part passes the check: with no GPU visible the tool then stops with 3 (skip), not 2.
  EXPECT_EQ(run_tool(DFGNN_VERIFY_EXE, "--tiny --part 2/4", "CUDA_VISIBLE_DEVICES= timeout 60").code, 3);
}
#endif  // DFGNN_VERIFY_EXE

// ------------------------------------------------------------------ dfgnn-db: hostile text, help, full disk

namespace {

bool has_control_bytes(const std::string& text) {
  for (unsigned char c : text)
    if ((c < 0x20 && c != '\n') || c == 0x7f) return true;
  return false;
}

}  // namespace

// Terminal injection: text from a database never reaches the terminal raw.
TEST(Cli, DbNeverPrintsControlCharactersFromADatabase) {
  TempDir dir;
  const std::string path = dir / "user.db";
  put(path, 1, kValid, kOther);
  const std::string evil = "'node' || char(27) || '[2J' || char(27) || '[31m' || char(10) || '1  Test GPU|sm_90|132  forged'";
  raw_exec(path, "UPDATE results SET host = " + evil);
  raw_exec(path, "UPDATE runs SET host = " + evil);
  raw_exec(path, "CREATE TRIGGER \"t" "\x1b" "[2J" "\n" "forged\" AFTER INSERT ON runs BEGIN SELECT 1; END");
  for (const char* command : {"list", "show 1", "verify"}) {
    const Result r = db("--db " + quote(path) + " " + command);
    EXPECT_FALSE(has_control_bytes(r.output)) << command << ":\n" << r.output;
    EXPECT_FALSE(contains(r.output, "\nforged")) << command << ":\n" << r.output;  // no forged line
  }
  Result r = db("--db " + quote(path) + " list");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "INVALID: column results.host: control character 0x1b")) << r.output;
  r = db("--db " + quote(path) + " verify");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "run")) << r.output;
  EXPECT_TRUE(contains(r.output, "runs.host: control character 0x1b")) << r.output;
  EXPECT_TRUE(contains(r.output, "unknown trigger \"t\\e[2J\\nforged\"")) << r.output;  // shown escaped
  // Writing into it, or shipping it, is refused with a one-line reason.
  const std::string other = dir / "other.db";
  put(other, 2, kValid, kOther);
  r = db("--db " + quote(path) + " merge " + quote(other));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "schema differs from dfgnn's")) << r.output;
  EXPECT_EQ(count_of(r.output, "\n"), 1) << r.output;
  r = db("--db " + quote(path) + " export " + quote(dir / "site.db"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "export refused")) << r.output;
  EXPECT_FALSE(fs::exists(dir / "site.db"));
}

// Issue 26: ids are digits only (stoll took ' 42' and '+42' as 42); a database's own -wal given to
// merge was "nothing to merge" (exit 0), as export to it is refused.
TEST(Cli, DbShowTakesDigitsOnlyAndMergeRefusesTheDatabasesOwnFiles) {
  TempDir dir;
  const std::string path = dir / "w.db";
  put(path, 1, kValid, kOther);
  ASSERT_EQ(db("--db " + quote(path) + " show 1").code, 0);
  for (const char* id : {" 1", "+1", "1 ", "0x1", "1.0", "0", ""}) {
    SCOPED_TRACE(std::string("'") + id + "'");
    const Result r = db("--db " + quote(path) + " show " + quote(id));
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_EQ(count_of(r.output, "\n"), 1) << r.output;
    EXPECT_TRUE(contains(r.output, fmt::format("show: '{}' is not a result id (digits only, at least 1", id)))
        << r.output;
  }
  const int64_t runs = raw_int(path, "SELECT count(*) FROM runs");
  for (const char* suffix : {"-wal", "-shm", "-journal"}) {
    SCOPED_TRACE(suffix);
    const std::string sidecar = path + suffix;
    std::ofstream{sidecar};  // empty: SQLite leaves such files
    Result r = db("--db " + quote(path) + " merge " + quote(sidecar));
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_EQ(count_of(r.output, "\n"), 1) << r.output;
    EXPECT_TRUE(contains(r.output, fmt::format("merge: {} is this database's {} file, not a database to merge",
                                               sidecar, suffix)))
        << r.output;
    r = db("--db " + quote(path) + " export " + quote(sidecar));
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_TRUE(contains(r.output, fmt::format("is this database's {} file", suffix))) << r.output;
    fs::remove(sidecar);
  }
  EXPECT_EQ(raw_int(path, "SELECT count(*) FROM runs"), runs);
}

// Issue 26: a bidirectional control (U+202E right-to-left override) in a host column is treated
// as a control character: the row is invalid, and nothing prints it raw.
TEST(Cli, DbTreatsBidirectionalControlsAsControlCharacters) {
  TempDir dir;
  const std::string path = dir / "user.db";
  put(path, 1, kValid, kOther);
  raw_exec(path, "UPDATE results SET host = 'node' || char(8238) || 'evil'");
  raw_exec(path, "UPDATE runs SET host = 'node' || char(8294) || 'evil'");  // U+2066
  for (const char* command : {"list", "show 1", "verify"}) {
    const Result r = db("--db " + quote(path) + " " + command);
    EXPECT_FALSE(contains(r.output, "\xe2\x80\xae")) << command << ":\n" << r.output;
    EXPECT_FALSE(contains(r.output, "\xe2\x81\xa6")) << command << ":\n" << r.output;
  }
  Result r = db("--db " + quote(path) + " list");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "INVALID: column results.host: bidirectional control U+202E at byte 4")) << r.output;
  r = db("--db " + quote(path) + " verify");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "runs.host: bidirectional control U+2066 at byte 4")) << r.output;
  // Text that reaches the terminal without a row check (here a file name) is escaped.
  const std::string odd = dir / "x\xe2\x80\x8f.db";  // U+200F
  r = db("--db " + quote(odd) + " stats");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "x\\u200f.db")) << r.output;
  EXPECT_FALSE(contains(r.output, "\xe2\x80\x8f")) << r.output;
}

TEST(Cli, DbSubcommandHelpAndUnknownCommands) {
  Result r = db("list --help");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "Usage: dfgnn-db [--db PATH] [--site PATH]... list [--env CLASS]")) << r.output;
  EXPECT_TRUE(contains(r.output, "--env")) << r.output;
  EXPECT_FALSE(contains(r.output, "prune FILTERS")) << r.output;
  EXPECT_FALSE(contains(r.output, "--older-than")) << r.output;
  r = db("merge --help");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "Usage: dfgnn-db [--db PATH] merge FILE...")) << r.output;
  EXPECT_TRUE(contains(r.output, "all or nothing")) << r.output;
  EXPECT_FALSE(contains(r.output, "--env")) << r.output;
  EXPECT_FALSE(contains(r.output, "--site")) << r.output;
  r = db("--help prune");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "--older-than")) << r.output;
  for (const char* args : {"frobnicate --help", "--help frobnicate", "frobnicate", "-h lst"}) {
    r = db(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    EXPECT_EQ(count_of(r.output, "\n"), 1) << args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "dfgnn-db: unknown command '")) << args << "\n" << r.output;
  }
  r = db("--help");  // the global help lists every command
  EXPECT_EQ(r.code, 0) << r.output;
  for (const char* c : {"list [--env CLASS]", "show ID", "stats", "export OUT.db", "merge FILE...", "prune FILTERS", "verify"})
    EXPECT_TRUE(contains(r.output, c)) << c << "\n" << r.output;
  r = db("--db x.db export out.db --env y");  // an option of another command
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--env does not apply to export")) << r.output;
}

// On a full filesystem (a 200 KiB tmpfs in a private mount namespace) a merge commits nothing and
// exits 1 saying so; skipped where no tmpfs can be mounted (needs root or user namespaces).
TEST(Cli, DbMergeOnAFullDiskCommitsNothing) {
  TempDir dir;
  const std::string src = dir / "src.db";
  {
    dfgnn::db::TuningDb::Options options;
    options.validator = dfgnn::row_problem;
    auto file = dfgnn::db::TuningDb::open_user(src, options);
    const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_TRANSFORMER, DFGNN_DTYPE_FLOAT32, 1, 128);
    const auto solver = static_cast<int32_t>(dfgnn::parse_schedule(kValid).solver);
    const dfgnn_fingerprint_t fp = hub_fingerprint(1);
    for (int k = 0; k < 800; ++k) {
      dfgnn::db::TuningRun run;
      run.environment = test_environment();
      run.op = dfgnn::op_key(op, dfgnn::PassKind::Forward, 4);
      run.fingerprint = dfgnn::db_fingerprint(fp);
      run.default_schedule = kOther;
      run.host = "node-" + std::to_string(k);
      run.run_id = fmt::format("bulk-run-{:05d}", k);
      run.candidates.push_back(dfgnn::db::summarize_samples(kValid, solver, {0.50, 0.51, 0.49}));
      run.candidates.push_back(dfgnn::db::summarize_samples(kOther, solver, {1.00, 1.02, 0.98}));
      ASSERT_TRUE(file->put_result(run).has_value());
    }
  }
  ASSERT_GT(fs::file_size(src), 200u * 1024u);
  const std::string small = dir / "small.db";
  put(small, 2, kValid, kOther, "Test GPU", true, "small-run");
  const std::string mnt = dir / "mnt";
  fs::create_directories(mnt);
  const pid_t child = fork();
  if (child == 0) {
    int code = 0;
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=200k") != 0) {
      _exit(77);
    }
    const std::string into = mnt + "/user.db";
    fs::copy_file(small, into);
    const Result r = db("--db " + quote(into) + " merge " + quote(src));
    const int64_t runs = raw_int(into, "SELECT count(*) FROM runs");
    if (r.code != 1) code |= 1;
    if (!contains(r.output, "nothing from it was merged") || !contains(r.output, "the disk is full")) code |= 2;
    if (runs != 1) code |= 4;
    if (code != 0) std::fprintf(stderr, "exit %d, %lld run(s) in the target:\n%s\n", r.code, static_cast<long long>(runs), r.output.c_str());
    std::fflush(stderr);
    _exit(code);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot mount a private tmpfs here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: exit code, 2: message, 4: runs were committed (see above)";
}

// ------------------------------------------------------------------ origin and the shipped layer

// dfgnn-tune --explain tunes nothing and says, per pass, what answers and why (without a GPU: the
// default rule, named).
TEST(Cli, TuneExplainNamesTheOrigin) {
  TempDir dir;
  const std::string cora = std::string(DFGNN_SOURCE_DIR) + "/data/cora";
  const Result r = tune(quote(cora) + " --model gat --direction both --explain --db " + quote(dir / "t.db") +
                        " --json " + quote(dir / "report.json"));
  EXPECT_EQ(r.code, 0) << r.output;
  std::ifstream in(dir / "report.json");
  const nlohmann::json doc = nlohmann::json::parse(in);
  ASSERT_EQ(doc.at("problems").size(), 2u);
  const nlohmann::json& backward = doc["problems"][1].at("explain");
  ASSERT_EQ(backward.size(), 2u);  // row and column pass
  auto ctx = make_context();
  int has = 0;
  DFGNN_ASSERT_OK(dfgnnHasDevice(ctx.get(), &has, nullptr));
  if (!has) {  // without a GPU dispatch reads no database: the default rule answers
    for (const nlohmann::json& pass : backward) {
      EXPECT_EQ(pass.at("origin"), "default") << pass;
      const std::string rule = pass.at("rule");
      EXPECT_TRUE(rule == "hand rule" || rule.rfind("fitted rule leaf ", 0) == 0) << pass;
    }
    EXPECT_EQ(count_of(r.output, "default rule: "), 3) << r.output;
    EXPECT_TRUE(contains(r.output, ": default, cached -> ")) << r.output;
  }
  EXPECT_EQ(doc["problems"][0].at("status"), "explained");
}

// dfgnn-db layers shows every layer with its status; --shipped reads the shipped databases.
TEST(Cli, DbLayersAndShipped) {
  TempDir dir;
  put(dir / "src.db", 1, kValid, kOther);
  fs::create_directories(dir.path / "tuning");
  ASSERT_EQ(db("--db " + quote(dir / "src.db") + " export " + quote(dir / "tuning/sm90.db")).code, 0);
  {
    std::ofstream f(dir / "tuning/broken.db");
    f << std::string(4096, 'x');
  }
  const std::string shipped = "export DFGNN_SHIPPED_DB=" + quote(dir / "tuning") + ";";
  Result r = run_tool(DFGNN_DB_EXE, "--db " + quote(dir / "user.db") + " layers", shipped);
  EXPECT_EQ(r.code, 1) << r.output;  // broken.db cannot be read
  EXPECT_TRUE(contains(r.output, "shipped databases: DFGNN_SHIPPED_DB=")) << r.output;
  EXPECT_TRUE(contains(r.output, "user     " + (dir / "user.db") + ": absent")) << r.output;
  EXPECT_TRUE(contains(r.output, "shipped  " + (dir / "tuning/sm90.db") + ": ok (read-only)")) << r.output;
  EXPECT_TRUE(contains(r.output, "shipped  " + (dir / "tuning/broken.db") + ": UNUSABLE: ")) << r.output;
  EXPECT_TRUE(contains(r.output, "1 result(s) for Test GPU|sm_90|132, library")) << r.output;
  EXPECT_TRUE(contains(r.output, "(another build: not used by this one)")) << r.output;  // the test's template hash
  EXPECT_FALSE(fs::exists(dir / "user.db"));  // a read command creates nothing
  fs::remove(dir / "tuning/broken.db");
  r = run_tool(DFGNN_DB_EXE, "--shipped list", shipped);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, kValid)) << r.output;
  EXPECT_TRUE(contains(r.output, "1 result(s)")) << r.output;
  r = run_tool(DFGNN_DB_EXE, "--db " + quote(dir / "user.db") + " layers", "export DFGNN_SHIPPED_DB=off;");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "shipped  (none)")) << r.output;
  r = run_tool(DFGNN_DB_EXE, "--shipped stats", "export DFGNN_SHIPPED_DB=off;");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "dfgnn-db: --shipped: no shipped databases")) << r.output;
  EXPECT_EQ(db("--shipped --db " + quote(dir / "src.db") + " export " + quote(dir / "x.db")).code, 2);
}

// Issue 26: the shipped sm90.db with 20 pages in its middle overwritten (dd of /dev/urandom, seek
// 100, count 20: candidate statistics). layers checks each layer and goes on past a damaged one;
// stats and verify report the damage and go on too (exit 1); verify's finding is the damage.
TEST(Cli, DbReportsDamagedPagesAndGoesOn) {
  TempDir dir;
  const std::string good = dir / "good.db", other = dir / "other.db", damaged = dir / "x.db";
  const fs::path shipped = fs::path(DFGNN_SOURCE_DIR) / "data/tuning/sm90.db";
  for (const std::string& copy : {good, other, damaged}) fs::copy_file(shipped, copy);
  const int64_t results = dfgnn::test::raw_int(shipped, "SELECT count(*) FROM results");
  ASSERT_GT(results, 0);
  {
    std::fstream f(damaged, std::ios::in | std::ios::out | std::ios::binary);
    std::mt19937 garbage(26);
    std::string page(20 * 4096, '\0');
    for (char& c : page) c = static_cast<char>(garbage());
    f.seekp(100 * 4096);
    f.write(page.data(), static_cast<std::streamsize>(page.size()));
  }
  Result r = run_tool(DFGNN_DB_EXE, "--db " + quote(dir / "user.db") + " layers --site " + quote(damaged) + " --site " +
                                        quote(other),
                      "export DFGNN_SHIPPED_DB=" + quote(good) + ";");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "site     " + damaged + ": DAMAGED: Page ")) << r.output;  // quick_check's finding
  EXPECT_FALSE(contains(r.output, damaged + ": ok")) << r.output;
  EXPECT_TRUE(contains(r.output, "site     " + other + ": ok (read-only)")) << r.output;
  EXPECT_TRUE(contains(r.output, "shipped  " + good + ": ok (read-only)")) << r.output;
  EXPECT_EQ(count_of(r.output, fmt::format("{0} result(s), {0} run(s), 0 module(s)", results)), 2) << r.output;

  const std::string both = "export DFGNN_SHIPPED_DB=" + quote(damaged + ":" + good) + ";";
  r = run_tool(DFGNN_DB_EXE, "--shipped stats", both);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "dfgnn-db: stats " + damaged + ": DAMAGED: ")) << r.output;
  EXPECT_TRUE(contains(r.output, "database disk image is malformed")) << r.output;
  EXPECT_TRUE(contains(r.output, good + " (shipped, read-only)")) << r.output;
  EXPECT_EQ(stats_line(r.output, "results"), fmt::format("  results             {} (0 without a winner)", results))
      << r.output;

  r = run_tool(DFGNN_DB_EXE, "--shipped verify", both);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "verify " + damaged + ": ")) << r.output;
  EXPECT_TRUE(contains(r.output, "  integrity: ")) << r.output;
  EXPECT_TRUE(contains(r.output, "verify " + good + ": OK")) << r.output;
}

// Issue 26: list and show report a database whose pages they cannot read and go on to the next
// (exit 1): results pages damaged (list and show cannot read its rows), or candidate statistics
// pages damaged (show prints the result, then reports its pooled candidates).
TEST(Cli, DbListAndShowReportDamagedPagesAndGoOn) {
  TempDir dir;
  const std::string good = dir / "good.db", results = dir / "results.db", candidates = dir / "candidates.db";
  const fs::path shipped = fs::path(DFGNN_SOURCE_DIR) / "data/tuning/sm90.db";
  for (const std::string& copy : {good, results, candidates}) fs::copy_file(shipped, copy);
  const int64_t rows = dfgnn::test::raw_int(shipped, "SELECT count(*) FROM results");
  ASSERT_GT(rows, 0);
  ASSERT_GT(dfgnn::test::damage_leaf_pages(results, "results"), 20);
  ASSERT_GT(dfgnn::test::damage_leaf_pages(candidates, "candidate_stats"), 400);
  const std::string env = "export DFGNN_SHIPPED_DB=off;";
  const std::string sites = "--site " + quote(results) + " --site " + quote(good);

  Result r = run_tool(DFGNN_DB_EXE, sites + " list", env);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "dfgnn-db: list " + results + ": DAMAGED: ")) << r.output;
  EXPECT_TRUE(contains(r.output, "database disk image is malformed")) << r.output;
  EXPECT_TRUE(contains(r.output, "== " + good + " (site)")) << r.output;
  EXPECT_FALSE(contains(r.output, "== " + results)) << r.output;
  EXPECT_TRUE(contains(r.output, fmt::format("{} result(s); 1 database(s) could not be read", rows))) << r.output;

  r = run_tool(DFGNN_DB_EXE, sites + " show 1", env);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "dfgnn-db: show " + results + ": DAMAGED: ")) << r.output;
  EXPECT_TRUE(contains(r.output, "result 1 in " + good + " (site)")) << r.output;
  EXPECT_TRUE(contains(r.output, "  pooled candidates (")) << r.output;
  // Only in the damaged file: not found, and why it may be there.
  r = run_tool(DFGNN_DB_EXE, "--site " + quote(results) + " show 1", env);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "no result with id 1 in " + results + "; 1 database(s) could not be read")) << r.output;

  // The rows read, the candidate statistics do not.
  r = run_tool(DFGNN_DB_EXE, "--site " + quote(candidates) + " list", env);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, fmt::format("{} result(s)", rows))) << r.output;
  r = run_tool(DFGNN_DB_EXE, "--site " + quote(candidates) + " --site " + quote(good) + " show 1", env);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(count_of(r.output, "result 1 in "), 2) << r.output;
  EXPECT_TRUE(contains(r.output, "dfgnn-db: show " + candidates + ": pooled candidates of result 1: DAMAGED: "))
      << r.output;
  EXPECT_EQ(count_of(r.output, "  pooled candidates ("), 1) << r.output;  // the good file's
}

#endif  // DFGNN_TUNE_EXE && DFGNN_DB_EXE
