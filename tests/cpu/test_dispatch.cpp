// Dispatch through the tuning database without a GPU: an injected environment stands in for the
// device, so exact hits, nearest-fingerprint reuse, hostile rows, the default fallback, explain,
// and compiled modules served from the database are all checked on the CPU.
#include "test_util.hpp"
#include "damaged_pages.hpp"
#include "log_capture.hpp"

#include "dispatch.hpp"
#include "op.hpp"
#include "fingerprint.hpp"
#include "handles.hpp"
#include "logging.hpp"
#include "nvrtc.hpp"
#include "schedule.hpp"
#include "tuning_db.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/ostream_sink.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include <unistd.h>

using namespace dfgnn::test;
namespace fs = std::filesystem;

namespace {

dfgnn::db::EnvironmentInfo test_environment() {
  dfgnn::db::EnvironmentInfo env;
  env.gpu_name = "Test GPU";
  env.compute_capability = 90;
  env.sm_count = 132;
  env.library_version = dfgnnGetVersion();
  env.template_hash = dfgnn::kernel_source_hash();
  env.nvrtc_version = dfgnn::nvrtc_version();
  return env;
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("dfgnn-dispatch-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// A context on its own user database, dispatching as if on the test environment.
ContextPtr context_on(const fs::path& db) {
  dfgnn_context_t raw = nullptr;
  EXPECT_EQ(dfgnnCreate(&raw), DFGNN_STATUS_SUCCESS);
  EXPECT_EQ(dfgnnSetDatabase(raw, db.c_str(), ""), DFGNN_STATUS_SUCCESS);
  dfgnn::context_of(raw).dispatcher.set_environment(test_environment());
  return ContextPtr(raw);
}

std::string schedule_of(dfgnn_context_t ctx, dfgnn_graph_t g, const dfgnn_op_t& op) {
  size_t length = 0;
  EXPECT_EQ(dfgnnGetSchedule(ctx, g, &op, DFGNN_FORWARD, nullptr, nullptr, 0, &length), DFGNN_STATUS_SUCCESS)
      << dfgnnGetLastErrorMessage();
  std::string text(length + 1, '\0');
  dfgnnGetSchedule(ctx, g, &op, DFGNN_FORWARD, nullptr, text.data(), text.size(), &length);
  text.resize(length);
  return text;
}

// Explain's entries for a direction: one per pass it runs (the backward's row and column passes).
nlohmann::json explain_passes(dfgnn_context_t ctx, dfgnn_graph_t g, const dfgnn_op_t& op, dfgnn_direction_t direction) {
  size_t length = 0;
  EXPECT_EQ(dfgnnExplain(ctx, g, &op, direction, nullptr, 0, &length), DFGNN_STATUS_SUCCESS)
      << dfgnnGetLastErrorMessage();
  std::string text(length + 1, '\0');
  dfgnnExplain(ctx, g, &op, direction, text.data(), text.size(), &length);
  text.resize(length);
  return nlohmann::json::parse(text);
}

nlohmann::json explain(dfgnn_context_t ctx, dfgnn_graph_t g, const dfgnn_op_t& op) {
  return explain_passes(ctx, g, op, DFGNN_FORWARD).at(0);
}

dfgnn_fingerprint_t fingerprint_of(dfgnn_graph_t g) {
  dfgnn_fingerprint_t fp;
  EXPECT_EQ(dfgnnGraphGetFingerprint(g, &fp), DFGNN_STATUS_SUCCESS);
  return fp;
}

// Stores a tuning run in which `winner` beat the default by far.
void store_winner(const fs::path& db, dfgnn_graph_t g, const dfgnn_op_t& op, const std::string& winner,
                  const std::string& default_text, bool validate = true) {
  dfgnn::db::TuningDb::Options options;
  if (validate) options.validator = dfgnn::row_problem;
  auto file = dfgnn::db::TuningDb::open_user(db, options);
  dfgnn::db::TuningRun run;
  run.environment = test_environment();
  run.op = dfgnn::op_key(op, dfgnn::PassKind::Forward, 4);
  run.fingerprint = dfgnn::db_fingerprint(fingerprint_of(g));
  run.default_schedule = default_text;
  run.candidates.push_back(dfgnn::db::summarize_samples(winner, static_cast<int32_t>(dfgnn::parse_schedule(winner).solver),
                                                        {0.50, 0.51, 0.49}));
  run.candidates.push_back(dfgnn::db::summarize_samples(
      default_text, static_cast<int32_t>(dfgnn::parse_schedule(default_text).solver), {1.0, 1.02, 0.98}));
  ASSERT_TRUE(file->put_result(run).has_value());
}

GraphPtr hub_graph(dfgnn_context_t ctx, uint64_t seed) {
  dfgnn_graph_t g = nullptr;
  EXPECT_EQ(dfgnnGraphCreatePlantedHubs(ctx, 4000, 6, 2, 1500, seed, nullptr, &g), DFGNN_STATUS_SUCCESS);
  return GraphPtr(g);
}

const dfgnn_op_t kOp = dfgnnOpDefault(DFGNN_MODEL_TRANSFORMER, DFGNN_DTYPE_FLOAT32, 1, 64);
const std::string kWinner = "hybrid:lanes=8,groups=32,team=1,vec=4,mid=8,threshold=128,chunk=512";

}  // namespace

// Lookups never need NVRTC's version (loading NVRTC to ask cost 5.6 ms of a first dispatch); the
// environment stored with a tuning run has it.
TEST(Dispatch, OnlyTheEnvironmentForWritesAsksNvrtcItsVersion) {
  dfgnn::Dispatcher dispatcher;
  dfgnn::db::EnvironmentInfo env = test_environment();
  env.nvrtc_version = 0;  // as environment() reads it from a device
  dispatcher.set_environment(env);
  EXPECT_EQ(dispatcher.environment().nvrtc_version, 0);
  const dfgnn::db::EnvironmentInfo written = dispatcher.environment_for_writes();
  EXPECT_EQ(written.nvrtc_version, dfgnn::nvrtc_version());
  EXPECT_EQ(dfgnn::db::environment_class(written), dfgnn::db::environment_class(env));
  EXPECT_EQ(dispatcher.environment().nvrtc_version, 0);  // the lookups' copy is unchanged
  env.nvrtc_version = 12080;  // an injected version is kept
  dispatcher.set_environment(env);
  EXPECT_EQ(dispatcher.environment_for_writes().nvrtc_version, 12080);
}

TEST(Dispatch, ExactHitThenCache) {
  TempDir dir;
  auto ctx = context_on(dir.path / "user.db");
  auto g = hub_graph(ctx.get(), 1);
  const std::string default_text = schedule_of(make_context().get(), g.get(), kOp);
  EXPECT_NE(default_text, kWinner);
  store_winner(dir.path / "user.db", g.get(), kOp, kWinner, default_text);
  const nlohmann::json first = explain(ctx.get(), g.get(), kOp);
  EXPECT_EQ(first.at("level"), "cache");  // explain dispatches once, then reports the remembered answer
  EXPECT_EQ(first.at("origin"), "exact");
  EXPECT_EQ(first.at("schedule"), kWinner);
  EXPECT_NEAR(first.at("median_ms").get<double>(), 0.50, 1e-9);
  EXPECT_EQ(first.at("default_schedule"), default_text);
  EXPECT_EQ(schedule_of(ctx.get(), g.get(), kOp), kWinner);
}

// database_answer (what the tuner measures right after the default) is what dispatch answers from the
// layers: the graph's own row, a nearby graph's winner, nothing for a far graph or an empty database,
// and nothing without a GPU's identity.
TEST(Dispatch, DatabaseAnswerIsTheLayersAnswer) {
  TempDir dir;
  auto ctx = context_on(dir.path / "user.db");
  auto tuned = hub_graph(ctx.get(), 1);
  auto similar = hub_graph(ctx.get(), 2);
  auto uniform = random_graph(ctx.get(), 3000, 8, 5);
  dfgnn::Dispatcher& dispatcher = dfgnn::context_of(ctx.get()).dispatcher;
  const auto answer = [&](dfgnn_graph_t g) {
    return dispatcher.database_answer(dfgnn::graph_of(g), kOp, dfgnn::PassKind::Forward, 4);
  };
  EXPECT_FALSE(answer(tuned.get()));  // nothing stored yet
  store_winner(dir.path / "user.db", tuned.get(), kOp, kWinner, schedule_of(make_context().get(), tuned.get(), kOp));
  dispatcher.forget();  // as a tuning does once it stored its winner
  const std::optional<dfgnn::Decision> own = answer(tuned.get());
  ASSERT_TRUE(own);
  EXPECT_EQ(own->origin, dfgnn::DispatchLevel::Exact);
  EXPECT_EQ(dfgnn::to_string(own->schedule), kWinner);
  const std::optional<dfgnn::Decision> near = answer(similar.get());
  ASSERT_TRUE(near);
  EXPECT_EQ(near->origin, dfgnn::DispatchLevel::Nearest);
  EXPECT_EQ(dfgnn::to_string(near->schedule), kWinner);
  EXPECT_FALSE(answer(uniform.get()));
  dfgnn::Dispatcher unknown;  // no environment injected and no GPU: no database answer
  EXPECT_FALSE(unknown.database_answer(dfgnn::graph_of(tuned.get()), kOp, dfgnn::PassKind::Forward, 4));
}

// The bucket cache never hides a graph's own tuned row: a graph of the same fingerprint bucket as
// one answered before, but tuned itself, gets its own winner (it got its bucket-mate's before).
TEST(Dispatch, BucketMatesKeepTheirOwnTunedRows) {
  TempDir dir;
  auto ctx = context_on(dir.path / "user.db");
  auto a = hub_graph(ctx.get(), 1), b = hub_graph(ctx.get(), 2);
  const dfgnn_fingerprint_t fa = fingerprint_of(a.get()), fb = fingerprint_of(b.get());
  ASSERT_EQ(dfgnn::fingerprint_bucket_key(fa), dfgnn::fingerprint_bucket_key(fb));
  ASSERT_NE(dfgnn::db_fingerprint(fa).text, dfgnn::db_fingerprint(fb).text);
  const std::string other = "hub_split:lanes=16,groups=16,team=1,vec=4,mid=0,threshold=256,chunk=256";
  const std::string default_text = schedule_of(make_context().get(), a.get(), kOp);
  store_winner(dir.path / "user.db", a.get(), kOp, kWinner, default_text);
  store_winner(dir.path / "user.db", b.get(), kOp, other, default_text);
  EXPECT_EQ(explain(ctx.get(), a.get(), kOp).at("schedule"), kWinner);
  const nlohmann::json e = explain(ctx.get(), b.get(), kOp);
  EXPECT_EQ(e.at("origin"), "exact") << e;
  EXPECT_EQ(e.at("schedule"), other) << e;
  EXPECT_FALSE(e.contains("from_bucket")) << e;
  // An untuned graph of that bucket still takes the remembered answer without a query.
  auto c = hub_graph(ctx.get(), 3);
  if (dfgnn::fingerprint_bucket_key(fingerprint_of(c.get())) == dfgnn::fingerprint_bucket_key(fa))
    EXPECT_EQ(explain(ctx.get(), c.get(), kOp).value("from_bucket", false), true);
}

// Ops with edge features run other kernels: a winner stored for one does not serve the other.
TEST(Dispatch, EdgeFeaturesAreASeparateKey) {
  TempDir dir;
  auto ctx = context_on(dir.path / "user.db");
  auto g = hub_graph(ctx.get(), 1);
  dfgnn_op_t edge_op = kOp;
  edge_op.edge_features = 1;
  EXPECT_EQ(dfgnn::op_key(edge_op, dfgnn::PassKind::Forward, 4).key_bits, 4 + dfgnn::kEdgeFeaturesKeyBits);
  const std::string default_text = schedule_of(make_context().get(), g.get(), kOp);
  store_winner(dir.path / "user.db", g.get(), edge_op, kWinner, default_text);
  EXPECT_EQ(schedule_of(ctx.get(), g.get(), edge_op), kWinner);
  EXPECT_EQ(schedule_of(ctx.get(), g.get(), kOp), default_text);
  EXPECT_EQ(explain(ctx.get(), g.get(), edge_op).at("origin"), "exact");
}

TEST(Dispatch, NearestFingerprintWithinDistance) {
  TempDir dir;
  auto ctx = context_on(dir.path / "user.db");
  auto tuned = hub_graph(ctx.get(), 1);
  auto similar = hub_graph(ctx.get(), 2);  // same generator, other seed: a nearby fingerprint
  store_winner(dir.path / "user.db", tuned.get(), kOp, kWinner, schedule_of(make_context().get(), tuned.get(), kOp));
  double distance = 0;
  const dfgnn_fingerprint_t a = fingerprint_of(tuned.get()), b = fingerprint_of(similar.get());
  DFGNN_ASSERT_OK(dfgnnFingerprintDistance(&a, &b, &distance));
  ASSERT_GT(distance, 0);
  ASSERT_LT(distance, 1.0);
  const nlohmann::json e = explain(ctx.get(), similar.get(), kOp);
  EXPECT_EQ(e.at("origin"), "nearest");
  EXPECT_EQ(e.at("schedule"), kWinner);
  EXPECT_NEAR(e.at("distance").get<double>(), distance, 1e-12);
  // A graph of another shape is too far: the default rule answers.
  auto uniform = random_graph(ctx.get(), 3000, 8, 5);
  const nlohmann::json far = explain(ctx.get(), uniform.get(), kOp);
  EXPECT_EQ(far.at("origin"), "default");
  EXPECT_EQ(far.at("schedule"), schedule_of(make_context().get(), uniform.get(), kOp));
}

// The database hands dispatch every tuned graph of the op (no bucket pre-filter): a neighbour in
// another fingerprint bucket (here 4000 vs 4200 nodes, either side of 2^12) is still found.
TEST(Dispatch, NearestCrossesFingerprintBuckets) {
  TempDir dir;
  auto ctx = context_on(dir.path / "user.db");
  dfgnn_graph_t a_raw = nullptr, b_raw = nullptr;
  DFGNN_ASSERT_OK(dfgnnGraphCreatePlantedHubs(ctx.get(), 4000, 6, 2, 1500, 1, nullptr, &a_raw));
  DFGNN_ASSERT_OK(dfgnnGraphCreatePlantedHubs(ctx.get(), 4200, 6, 2, 1500, 2, nullptr, &b_raw));
  GraphPtr tuned(a_raw), query(b_raw);
  const dfgnn_fingerprint_t a = fingerprint_of(tuned.get()), b = fingerprint_of(query.get());
  ASSERT_NE(dfgnn::fingerprint_bucket_key(a), dfgnn::fingerprint_bucket_key(b));
  double distance = 0;
  DFGNN_ASSERT_OK(dfgnnFingerprintDistance(&a, &b, &distance));
  ASSERT_LT(distance, dfgnn::context_of(ctx.get()).dispatcher.max_distance());
  store_winner(dir.path / "user.db", tuned.get(), kOp, kWinner, schedule_of(make_context().get(), tuned.get(), kOp));
  const nlohmann::json e = explain(ctx.get(), query.get(), kOp);
  EXPECT_EQ(e.at("origin"), "nearest");
  EXPECT_EQ(e.at("schedule"), kWinner);
}

// Stores a tuning run with the given candidates (schedule, median ms).
void store_candidates(const fs::path& db, dfgnn_graph_t g, const dfgnn_op_t& op,
                      const std::vector<std::pair<std::string, double>>& candidates) {
  dfgnn::db::TuningDb::Options options;
  options.validator = dfgnn::row_problem;
  auto file = dfgnn::db::TuningDb::open_user(db, options);
  dfgnn::db::TuningRun run;
  run.environment = test_environment();
  run.op = dfgnn::op_key(op, dfgnn::PassKind::Forward, 4);
  run.fingerprint = dfgnn::db_fingerprint(fingerprint_of(g));
  run.default_schedule = candidates.front().first;
  for (const auto& [text, ms] : candidates)
    run.candidates.push_back(dfgnn::db::summarize_samples(
        text, static_cast<int32_t>(dfgnn::parse_schedule(text).solver), {ms, ms * 1.001, ms * 0.999}));
  ASSERT_TRUE(file->put_result(run).has_value());
}

// The nearest tuned graph's near-tie is broken by a farther tuned graph (the vote), while a clear
// winner of the nearest graph stands against a farther graph's preference.
TEST(Dispatch, NearestVoteBreaksNearTiesWithFartherGraphs) {
  const std::string x = "subwarp:lanes=32,groups=4,team=1,vec=4,mid=0,threshold=0,chunk=0";
  const std::string y = "subwarp:lanes=32,groups=16,team=1,vec=4,mid=0,threshold=0,chunk=0";
  auto probe = make_context();
  auto near = hub_graph(probe.get(), 1);
  auto query = hub_graph(probe.get(), 2);
  dfgnn_graph_t far_raw = nullptr;
  DFGNN_ASSERT_OK(dfgnnGraphCreatePlantedHubs(probe.get(), 4000, 10, 2, 1500, 3, nullptr, &far_raw));
  GraphPtr far(far_raw);
  double d_near = 0, d_far = 0;
  const dfgnn_fingerprint_t q = fingerprint_of(query.get()), a = fingerprint_of(near.get()), b = fingerprint_of(far.get());
  DFGNN_ASSERT_OK(dfgnnFingerprintDistance(&q, &a, &d_near));
  DFGNN_ASSERT_OK(dfgnnFingerprintDistance(&q, &b, &d_far));
  ASSERT_LT(d_near, d_far);
  ASSERT_LT(d_far - d_near, 4.0);  // else the near graph's 1% outweighs the far graph's 80% (weights exp(-d))
  const double radius = std::max(d_near, d_far / 2) * 1.01;  // both vote, only the near one may answer alone

  for (const bool clear : {false, true}) {
    TempDir dir;
    const fs::path db = dir.path / (clear ? "clear.db" : "tie.db");
    // Near graph: x ahead of y by 1% (a tie) or 2x (clear). Far graph: y ahead of x by 1.8x.
    store_candidates(db, near.get(), kOp, {{x, 0.50}, {y, clear ? 1.00 : 0.505}});
    store_candidates(db, far.get(), kOp, {{x, 0.90}, {y, 0.50}});
    auto ctx = context_on(db);
    dfgnn::context_of(ctx.get()).dispatcher.set_max_distance(radius);
    const nlohmann::json e = explain(ctx.get(), query.get(), kOp);
    EXPECT_EQ(e.at("origin"), "nearest");
    // a clear winner needs no vote: the far graph's statistics are not read
    EXPECT_EQ(e.at("neighbours"), clear ? 1 : 2);
    EXPECT_NEAR(e.at("distance").get<double>(), d_near, 1e-12);
    EXPECT_EQ(e.at("schedule"), clear ? x : y) << (clear ? "clear winner" : "near-tie");
  }
  // A clear winner of the nearest graph stands even when two farther graphs prefer another schedule.
  {
    TempDir dir;
    const fs::path db = dir.path / "outvoted.db";
    dfgnn_graph_t far2_raw = nullptr;  // the far graph's shape, another seed
    DFGNN_ASSERT_OK(dfgnnGraphCreatePlantedHubs(probe.get(), 4000, 10, 2, 1500, 5, nullptr, &far2_raw));
    GraphPtr far2(far2_raw);
    store_candidates(db, near.get(), kOp, {{x, 0.50}, {y, 0.65}});
    store_candidates(db, far.get(), kOp, {{x, 0.90}, {y, 0.50}});
    store_candidates(db, far2.get(), kOp, {{x, 0.90}, {y, 0.50}});
    auto ctx = context_on(db);
    dfgnn::context_of(ctx.get()).dispatcher.set_max_distance(radius);
    EXPECT_EQ(explain(ctx.get(), query.get(), kOp).at("schedule"), x);
  }
  // Only the far graph tuned, beyond the radius: the default rule answers.
  TempDir dir;
  store_candidates(dir.path / "far.db", far.get(), kOp, {{x, 0.90}, {y, 0.50}});
  auto ctx = context_on(dir.path / "far.db");
  dfgnn::context_of(ctx.get()).dispatcher.set_max_distance(d_far * 0.99);
  EXPECT_EQ(explain(ctx.get(), query.get(), kOp).at("origin"), "default");
}

// No row of the op's model: another model's winner on the same op shape answers (the most alike
// first: models_alike), and explain says whose it is. Another op shape gets none of it.
TEST(Dispatch, AnotherModelsWinnerOnTheSameShapeAnswers) {
  TempDir dir;
  auto g = hub_graph(make_context().get(), 1);
  const dfgnn_op_t gatv2 = dfgnnOpDefault(DFGNN_MODEL_GATV2, DFGNN_DTYPE_FLOAT32, 1, 64);
  const dfgnn_op_t agnn = dfgnnOpDefault(DFGNN_MODEL_AGNN, DFGNN_DTYPE_FLOAT32, 1, 64);
  const std::string default_text = schedule_of(make_context().get(), g.get(), kOp);
  const std::string other_winner = "hub_split:lanes=16,groups=16,team=1,vec=4,mid=0,threshold=128,chunk=128";
  store_winner(dir.path / "user.db", g.get(), kOp, kWinner, default_text);  // transformer
  store_winner(dir.path / "user.db", g.get(), agnn, other_winner, schedule_of(make_context().get(), g.get(), agnn));
  auto ctx = context_on(dir.path / "user.db");
  const nlohmann::json j = explain(ctx.get(), g.get(), gatv2);
  EXPECT_EQ(j.at("origin"), "exact");
  EXPECT_EQ(j.at("schedule"), kWinner);  // GATv2's most alike with a row: the Transformer, not AGNN
  EXPECT_NE(j.at("origin_detail").get<std::string>().find("tuned for transformer on the same op shape"),
            std::string::npos) << j.dump();
  EXPECT_EQ(explain(ctx.get(), g.get(), kOp).at("origin_detail").get<std::string>().find("tuned for"),
            std::string::npos);  // its own row: nothing to say
  const dfgnn_op_t wider = dfgnnOpDefault(DFGNN_MODEL_GATV2, DFGNN_DTYPE_FLOAT32, 1, 128);
  EXPECT_EQ(explain(ctx.get(), g.get(), wider).at("origin"), "default");
  // Tuning on a miss tunes the op's own model: no other model answers (here the tuner cannot run,
  // so the default does).
  {
    auto on_miss = context_on(dir.path / "user.db");
    DFGNN_ASSERT_OK(dfgnnSetTuneMode(on_miss.get(), DFGNN_TUNE_ON_MISS));
    EXPECT_EQ(explain(on_miss.get(), g.get(), gatv2).at("origin"), "default");
  }
  // Once GATv2 has a row of its own on this op shape (another graph's), its own rows answer or the
  // default rule does: the Transformer's winner no longer.
  auto other = hub_graph(make_context().get(), 7);
  const std::string gatv2_winner = "subwarp:lanes=16,groups=16,team=1,vec=4,mid=0,threshold=0,chunk=0";
  store_winner(dir.path / "user.db", other.get(), gatv2, gatv2_winner, schedule_of(make_context().get(), other.get(), gatv2));
  auto fresh = context_on(dir.path / "user.db");
  const nlohmann::json own = explain(fresh.get(), g.get(), gatv2);
  EXPECT_EQ(own.at("origin_detail").get<std::string>().find("tuned for"), std::string::npos) << own.dump();
  EXPECT_NE(own.at("schedule"), kWinner) << own.dump();
  EXPECT_EQ(dfgnn::models_alike(DFGNN_MODEL_GATV2),
            (std::vector<dfgnn_model_t>{DFGNN_MODEL_GAT, DFGNN_MODEL_TRANSFORMER, DFGNN_MODEL_AGNN}));
  for (int m = 0; m < DFGNN_NUM_MODELS; ++m)
    EXPECT_EQ(dfgnn::models_alike(static_cast<dfgnn_model_t>(m)).size(), size_t{DFGNN_NUM_MODELS - 1}) << m;
}

TEST(Dispatch, OtherGpuClassOrBuildIsAMiss) {
  TempDir dir;
  auto g = hub_graph(make_context().get(), 1);
  const std::string default_text = schedule_of(make_context().get(), g.get(), kOp);
  store_winner(dir.path / "user.db", g.get(), kOp, kWinner, default_text);
  for (int variant = 0; variant < 2; ++variant) {
    auto ctx = context_on(dir.path / "user.db");
    dfgnn::db::EnvironmentInfo env = test_environment();
    if (variant == 0) env.gpu_name = "Other GPU";
    else env.template_hash = "0000000000000000";
    dfgnn::context_of(ctx.get()).dispatcher.set_environment(env);
    EXPECT_EQ(explain(ctx.get(), g.get(), kOp).at("origin"), "default") << "variant " << variant;
  }
}

TEST(Dispatch, HostileRowsAreNeverUsed) {
  TempDir dir;
  auto g = hub_graph(make_context().get(), 1);
  const std::string default_text = schedule_of(make_context().get(), g.get(), kOp);
  // Written without validation, as a hostile shared database could be: vec=8 is not a valid
  // float32 vector width, lanes=6 is no lane count.
  store_winner(dir.path / "user.db", g.get(), kOp, "subwarp:lanes=32,groups=8,team=1,vec=8,mid=0,threshold=0,chunk=0",
               default_text, /*validate=*/false);
  auto ctx = context_on(dir.path / "user.db");
  EXPECT_EQ(explain(ctx.get(), g.get(), kOp).at("origin"), "default");
  EXPECT_EQ(schedule_of(ctx.get(), g.get(), kOp), default_text);
}

TEST(Dispatch, UnusableDatabaseFallsBackToDefault) {
  TempDir dir;
  const fs::path garbage = dir.path / "garbage.db";
  {
    std::ofstream f(garbage);
    f << std::string(3000, 'x');
  }
  auto ctx = context_on(garbage);
  auto g = hub_graph(ctx.get(), 1);
  EXPECT_EQ(explain(ctx.get(), g.get(), kOp).at("origin"), "default");
  EXPECT_EQ(fs::file_size(garbage), 3000u);  // left untouched
}

TEST(Dispatch, SecondContextTakesCompiledModulesFromTheDatabase) {
  TempDir dir;
  auto g = hub_graph(make_context().get(), 1);
  uint64_t compiles = 0, from_db = 0;
  {
    auto ctx = context_on(dir.path / "user.db");
    DFGNN_ASSERT_OK(dfgnnCompile(ctx.get(), g.get(), &kOp, DFGNN_BACKWARD, nullptr, 90));
    DFGNN_ASSERT_OK(dfgnnGetCacheCounters(ctx.get(), &compiles, nullptr, nullptr));
    DFGNN_ASSERT_OK(dfgnnGetModulesFromDatabase(ctx.get(), &from_db));
    EXPECT_EQ(compiles, 3u);  // prep/reduce helpers, row pass, column pass
    EXPECT_EQ(from_db, 0u);
  }
  auto ctx = context_on(dir.path / "user.db");  // a fresh context: an empty in-process cache
  DFGNN_ASSERT_OK(dfgnnCompile(ctx.get(), g.get(), &kOp, DFGNN_BACKWARD, nullptr, 90));
  DFGNN_ASSERT_OK(dfgnnGetCacheCounters(ctx.get(), &compiles, nullptr, nullptr));
  DFGNN_ASSERT_OK(dfgnnGetModulesFromDatabase(ctx.get(), &from_db));
  EXPECT_EQ(compiles, 0u);
  EXPECT_EQ(from_db, 3u);
}

TEST(Dispatch, TuningNeedsAGpuAndModesAreChecked) {
  auto ctx = make_context();
  auto g = hub_graph(ctx.get(), 1);
  int has = 0;
  DFGNN_ASSERT_OK(dfgnnHasDevice(ctx.get(), &has, nullptr));
  if (!has) {
    EXPECT_EQ(dfgnnTune(ctx.get(), g.get(), &kOp, DFGNN_FORWARD, 5.0, nullptr, 0, nullptr), DFGNN_STATUS_NO_DEVICE);
    EXPECT_NE(std::string(dfgnnGetLastErrorMessage()).find("no CUDA device"), std::string::npos);
  }
  EXPECT_EQ(dfgnnTune(ctx.get(), g.get(), &kOp, DFGNN_FORWARD, 0.0, nullptr, 0, nullptr), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(dfgnnSetTuneMode(ctx.get(), static_cast<dfgnn_tune_mode_t>(7)), DFGNN_STATUS_INVALID_ARGUMENT);
  DFGNN_ASSERT_OK(dfgnnSetTuneMode(ctx.get(), DFGNN_TUNE_ON_MISS));
  // Without a device (and without an injected environment) dispatch cannot tune: default rule.
  if (!has) EXPECT_EQ(explain(ctx.get(), g.get(), kOp).at("origin"), "default");
}

// The database keeps fingerprints as opaque text (it parses nothing); the runtime's row check judges
// the text: it must parse, be canonical and carry its own bucket key, or the row is never used.
TEST(Dispatch, RowProblemJudgesTheFingerprintText) {
  TempDir dir;
  auto g = hub_graph(make_context().get(), 1);
  const std::string default_text = schedule_of(make_context().get(), g.get(), kOp);
  const std::string winner = kWinner;
  const dfgnn::db::FingerprintText fp = dfgnn::db_fingerprint(fingerprint_of(g.get()));
  ASSERT_EQ(fp.text, dfgnn::serialize_fingerprint(fingerprint_of(g.get())));
  ASSERT_EQ(fp.bucket_key, dfgnn::fingerprint_bucket_key(fingerprint_of(g.get())));
  store_winner(dir.path / "good.db", g.get(), kOp, winner, default_text);
  auto row = dfgnn::db::TuningDb::open_user(dir.path / "good.db")
                 ->find_exact(test_environment(), dfgnn::op_key(kOp, dfgnn::PassKind::Forward, 4),
                              dfgnn::db::fingerprint_hash(fp.text));
  ASSERT_TRUE(row);
  EXPECT_EQ(row->fingerprint_text, fp.text);
  EXPECT_EQ(dfgnn::row_problem(*row), "");
  auto problem_with = [&](const std::string& text, const std::string& bucket) {
    dfgnn::db::TuningResult r = *row;
    r.fingerprint_text = text;
    r.bucket_key = bucket;
    return dfgnn::row_problem(r);
  };
  EXPECT_NE(problem_with("{\"version\": 1", fp.bucket_key), "");
  EXPECT_NE(problem_with(" " + fp.text, fp.bucket_key).find("canonical"), std::string::npos);
  EXPECT_NE(problem_with(fp.text, "n2^1.e2^1.max2^1.cv0").find("bucket key"), std::string::npos);
  // Found by fuzz_db_open: a model of 6 reached the C enum cast (undefined behaviour) before any check.
  for (const auto& [model, dtype, words] : std::vector<std::tuple<int, int, std::string>>{
           {6, 0, "model 6 is unknown"}, {-1, 0, "model -1 is unknown"}, {0, 9, "dtype 9 is unknown"},
           {0, -2, "dtype -2 is unknown"}}) {
    dfgnn::db::TuningResult r = *row;
    r.op.model = model;
    r.op.dtype = dtype;
    EXPECT_EQ(dfgnn::row_problem(r), words);
  }

  // End to end: a hostile database whose fingerprint text is not canonical (its hash matches, so the
  // database itself accepts it) is never dispatched.
  {
    auto file = dfgnn::db::TuningDb::open_user(dir.path / "bad.db");
    dfgnn::db::TuningRun run;
    run.environment = test_environment();
    run.op = dfgnn::op_key(kOp, dfgnn::PassKind::Forward, 4);
    run.fingerprint = {" " + fp.text, fp.bucket_key};
    run.default_schedule = default_text;
    run.candidates.push_back(dfgnn::db::summarize_samples(
        winner, static_cast<int32_t>(dfgnn::parse_schedule(winner).solver), {0.50, 0.51, 0.49}));
    run.candidates.push_back(dfgnn::db::summarize_samples(
        default_text, static_cast<int32_t>(dfgnn::parse_schedule(default_text).solver), {1.0, 1.02, 0.98}));
    ASSERT_TRUE(file->put_result(run));
  }
  auto ctx = context_on(dir.path / "bad.db");
  EXPECT_EQ(explain(ctx.get(), g.get(), kOp).at("origin"), "default");
  // The same row with the canonical text is used.
  auto good = context_on(dir.path / "good.db");
  EXPECT_EQ(schedule_of(good.get(), g.get(), kOp), winner);
}

TEST(Dispatch, KeyBitsPackBothFacts) {
  // The database's key_bits column holds max_vec + 16 * edge_features.
  EXPECT_EQ(dfgnn::pack_key_bits({4, 1}), 20);
  EXPECT_EQ(dfgnn::pack_key_bits({8, 0}), 8);
  const dfgnn::KeyBits bits = dfgnn::unpack_key_bits(18);
  EXPECT_EQ(bits.max_vec, 2);
  EXPECT_EQ(bits.edge_features, 1);
}

// ------------------------------------------------------------------ origin (issue 14 item 5)

namespace {

// Sets (or unsets, nullptr) environment variables for one test and restores them after.
class ScopedEnv {
 public:
  void set(const char* name, const char* value) {
    if (saved_.find(name) == saved_.end()) {
      const char* old = std::getenv(name);
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value != nullptr) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_)
      if (value) ::setenv(name.c_str(), value->c_str(), 1);
      else ::unsetenv(name.c_str());
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

int occurrences(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + 1)) ++n;
  return n;
}

// A read-only snapshot (as dfgnn-db export writes) of a database holding `winner` for graph g.
void make_snapshot(const fs::path& out, const fs::path& scratch, dfgnn_graph_t g, const std::string& winner,
                   const std::string& default_text) {
  store_winner(scratch, g, kOp, winner, default_text);
  dfgnn::db::TuningDb::open_user(scratch)->export_to(out);
}

// A context on an empty user database and no site databases (the shipped layer as the
// environment says), dispatching as if on the test environment.
ContextPtr context_with_sites(const fs::path& user, const std::string& sites) {
  dfgnn_context_t raw = nullptr;
  EXPECT_EQ(dfgnnCreate(&raw), DFGNN_STATUS_SUCCESS);
  EXPECT_EQ(dfgnnSetDatabase(raw, user.c_str(), sites.c_str()), DFGNN_STATUS_SUCCESS);
  dfgnn::context_of(raw).dispatcher.set_environment(test_environment());
  return ContextPtr(raw);
}

}  // namespace

// A graph tuned for itself is answered from its own row alone. The op's other rows, each decoded
// and validated (most of an exact hit's cost in a process's first decisions), are read for the first
// graph without a row of its own. Here another graph's row is one that dispatch rejects, and only
// the untuned graph's decision reads it.
TEST(Dispatch, ExactHitReadsNoOtherRow) {
  TempDir dir;
  auto ctx = context_on(dir.path / "user.db");
  auto tuned = hub_graph(ctx.get(), 1), hostile = hub_graph(ctx.get(), 2);
  auto untuned = random_graph(ctx.get(), 3000, 8, 5);
  const std::string default_text = schedule_of(make_context().get(), tuned.get(), kOp);
  store_winner(dir.path / "user.db", tuned.get(), kOp, kWinner, default_text);
  store_winner(dir.path / "user.db", hostile.get(), kOp, "subwarp:lanes=32,groups=8,team=1,vec=8,mid=0,threshold=0,chunk=0",
               default_text, /*validate=*/false);
  LogCapture log;
  const nlohmann::json e = explain(ctx.get(), tuned.get(), kOp);
  EXPECT_EQ(e.at("origin"), "exact") << e;
  EXPECT_EQ(e.at("schedule"), kWinner) << e;
  EXPECT_EQ(occurrences(log.text(), "rejected"), 0) << log.text();
  EXPECT_NE(explain(ctx.get(), untuned.get(), kOp).at("origin"), "exact");
  EXPECT_GE(occurrences(log.text(), "rejected"), 1) << log.text();
}

// The origin of an exact hit names the layer and file, and survives the in-process cache.
TEST(DispatchOrigin, ExactHitNamesItsLayerAlsoWhenCached) {
  TempDir dir;
  auto ctx = context_on(dir.path / "user.db");
  auto g = hub_graph(ctx.get(), 1);
  const std::string default_text = schedule_of(make_context().get(), g.get(), kOp);
  store_winner(dir.path / "user.db", g.get(), kOp, kWinner, default_text);
  EXPECT_EQ(schedule_of(ctx.get(), g.get(), kOp), kWinner);  // dispatched once: now cached
  for (int call = 0; call < 2; ++call) {
    const nlohmann::json e = explain(ctx.get(), g.get(), kOp);
    EXPECT_EQ(e.at("level"), "cache");
    EXPECT_EQ(e.at("cached"), true);
    EXPECT_EQ(e.at("origin"), "exact");
    EXPECT_EQ(e.at("layer"), "user");
    EXPECT_EQ(e.at("source"), (dir.path / "user.db").string());
    EXPECT_EQ(e.at("origin_detail"), "exact hit of the user database " + (dir.path / "user.db").string());
    EXPECT_FALSE(e.contains("rule"));
  }
}

// The shipped database is the lowest layer: it answers a fresh context when nothing above it does,
// a site database's row for the same graph wins over it, and explain names which one answered.
TEST(DispatchOrigin, ShippedDatabaseIsTheLowestLayer) {
  TempDir dir;
  auto g = hub_graph(make_context().get(), 1);
  const std::string default_text = schedule_of(make_context().get(), g.get(), kOp);
  const std::string site_winner = "subwarp:lanes=32,groups=4,team=1,vec=4,mid=0,threshold=0,chunk=0";
  fs::create_directories(dir.path / "share");
  const fs::path shipped = dir.path / "share/sm90.db";
  make_snapshot(shipped, dir.path / "shipped-src.db", g.get(), kWinner, default_text);
  make_snapshot(dir.path / "site.db", dir.path / "site-src.db", g.get(), site_winner, default_text);
  ScopedEnv env;
  env.set("DFGNN_SHIPPED_DB", (dir.path / "share").c_str());  // a directory: its *.db files
  {
    auto ctx = context_with_sites(dir.path / "user.db", "");
    const nlohmann::json e = explain(ctx.get(), g.get(), kOp);
    EXPECT_EQ(e.at("origin"), "exact");
    EXPECT_EQ(e.at("layer"), "shipped");
    EXPECT_EQ(e.at("source"), shipped.string());
    EXPECT_EQ(e.at("schedule"), kWinner);
    EXPECT_EQ(schedule_of(ctx.get(), g.get(), kOp), kWinner);
    // A similar graph of the same fingerprint bucket takes that answer from the bucket cache, and
    // says so; a fresh context finds its nearest neighbour in the shipped layer.
    auto similar = hub_graph(ctx.get(), 2);
    const nlohmann::json b = explain(ctx.get(), similar.get(), kOp);
    EXPECT_EQ(b.at("origin"), "exact");
    EXPECT_EQ(b.at("from_bucket"), true);
    EXPECT_NE(b.at("origin_detail").get<std::string>().find("earlier graph of the same fingerprint bucket"),
              std::string::npos);
    auto fresh = context_with_sites(dir.path / "user.db", "");
    const nlohmann::json n = explain(fresh.get(), similar.get(), kOp);
    EXPECT_EQ(n.at("origin"), "nearest");
    EXPECT_EQ(n.at("layer"), "shipped");
    EXPECT_FALSE(n.contains("from_bucket"));
  }
  {
    auto ctx = context_with_sites(dir.path / "user.db", (dir.path / "site.db").string());
    const nlohmann::json e = explain(ctx.get(), g.get(), kOp);
    EXPECT_EQ(e.at("layer"), "site");
    EXPECT_EQ(e.at("schedule"), site_winner);
  }
  env.set("DFGNN_SHIPPED_DB", "off");  // switched off: nothing answers
  auto ctx = context_with_sites(dir.path / "user.db", "");
  EXPECT_EQ(explain(ctx.get(), g.get(), kOp).at("origin"), "default");
}

// A nearest answer names the neighbour (its fingerprint hash and size), the distance and the radius.
TEST(DispatchOrigin, NearestNamesTheNeighbour) {
  TempDir dir;
  auto ctx = context_on(dir.path / "user.db");
  auto tuned = hub_graph(ctx.get(), 1);
  auto similar = hub_graph(ctx.get(), 2);
  store_winner(dir.path / "user.db", tuned.get(), kOp, kWinner, schedule_of(make_context().get(), tuned.get(), kOp));
  dfgnn::context_of(ctx.get()).dispatcher.set_max_distance(1.5);
  const dfgnn_fingerprint_t a = fingerprint_of(tuned.get()), b = fingerprint_of(similar.get());
  double distance = 0;
  DFGNN_ASSERT_OK(dfgnnFingerprintDistance(&a, &b, &distance));
  for (int call = 0; call < 2; ++call) {  // the first explain dispatches, the second is served from the cache
    const nlohmann::json e = explain(ctx.get(), similar.get(), kOp);
    EXPECT_EQ(e.at("origin"), "nearest");
    EXPECT_EQ(e.at("cached"), true);
    EXPECT_EQ(e.at("layer"), "user");
    EXPECT_NEAR(e.at("distance").get<double>(), distance, 1e-12);
    EXPECT_EQ(e.at("radius").get<double>(), 1.5);
    const nlohmann::json& n = e.at("neighbour");
    EXPECT_EQ(n.at("fingerprint_hash"), dfgnn::db::fingerprint_hash(dfgnn::db_fingerprint(a).text));
    EXPECT_EQ(n.at("nodes"), a.num_nodes);
    EXPECT_EQ(n.at("edges"), a.num_edges);
    EXPECT_NE(e.at("origin_detail").get<std::string>().find("nearest tuned graph " + dfgnn::db::fingerprint_hash(dfgnn::db_fingerprint(a).text)),
              std::string::npos)
        << e.at("origin_detail");
  }
}

// The default rule is named, also for an answer another graph of its bucket was given.
TEST(DispatchOrigin, DefaultRuleIsNamedAndKeptInTheCache) {
  TempDir dir;
  auto ctx = context_on(dir.path / "user.db");
  auto g = random_graph(ctx.get(), 3000, 8, 5);
  auto twin = random_graph(ctx.get(), 3000, 8, 5);  // same fingerprint, another graph: bucket cache
  for (dfgnn_graph_t graph : {g.get(), g.get(), twin.get()}) {
    const nlohmann::json e = explain(ctx.get(), graph, kOp);
    EXPECT_EQ(e.at("origin"), "default");
    const std::string rule = e.at("rule");
    EXPECT_TRUE(rule == "hand rule" || rule.rfind("fitted rule leaf ", 0) == 0) << e;
    EXPECT_EQ(e.at("origin_detail").get<std::string>().rfind("default rule: " + rule, 0), 0u) << e;
    EXPECT_EQ(e.at("cached"), true);
    EXPECT_FALSE(e.contains("layer"));
  }
  EXPECT_EQ(explain(ctx.get(), twin.get(), kOp).at("from_bucket"), true);
}

// A shipped (or site) database tuned by another build of this GPU class, or for another GPU, is
// skipped at open with one logged line saying why; dispatch keeps the default rule.
TEST(DispatchOrigin, ForeignShippedDatabaseIsSkippedWithAReason) {
  TempDir dir;
  auto g = hub_graph(make_context().get(), 1);
  const std::string default_text = schedule_of(make_context().get(), g.get(), kOp);
  const fs::path shipped = dir.path / "sm90.db";
  make_snapshot(shipped, dir.path / "src.db", g.get(), kWinner, default_text);
  ScopedEnv env;
  env.set("DFGNN_SHIPPED_DB", shipped.c_str());
  struct Case {
    const char* what;
    void (*change)(dfgnn::db::EnvironmentInfo&);
    const char* needle;
  };
  const Case cases[] = {
      {"another library version", [](dfgnn::db::EnvironmentInfo& e) { e.library_version = "99.0.0"; },
       "stale: rebuild it"},
      {"another GPU architecture",
       [](dfgnn::db::EnvironmentInfo& e) {
         e.gpu_name = "Other GPU";
         e.compute_capability += 10;
       },
       "tuned for another GPU"},
  };
  for (const Case& c : cases) {
    LogCapture log;
    for (int context = 0; context < 2; ++context) {  // every context opens the layers: one line in all
      auto ctx = context_with_sites(dir.path / (std::string("user-") + std::to_string(context) + ".db"), "");
      dfgnn::db::EnvironmentInfo e = test_environment();
      c.change(e);
      dfgnn::context_of(ctx.get()).dispatcher.set_environment(e);
      EXPECT_EQ(explain(ctx.get(), g.get(), kOp).at("origin"), "default") << c.what;
    }
    EXPECT_EQ(occurrences(log.text(), "shipped tuning database " + shipped.string() + " skipped"), 1)
        << c.what << ": " << log.text();
    EXPECT_EQ(occurrences(log.text(), c.needle), 1) << c.what << ": " << log.text();
  }
  // The matching build still uses it, and so does another GPU of the same architecture.
  auto ctx = context_with_sites(dir.path / "user.db", "");
  EXPECT_EQ(explain(ctx.get(), g.get(), kOp).at("layer"), "shipped");
  auto sibling = context_with_sites(dir.path / "user-sibling.db", "");
  dfgnn::db::EnvironmentInfo e = test_environment();
  e.gpu_name = "Other GPU";
  dfgnn::context_of(sibling.get()).dispatcher.set_environment(e);
  const nlohmann::json j = explain(sibling.get(), g.get(), kOp);
  EXPECT_EQ(j.at("layer"), "shipped");
  EXPECT_NE(j.at("origin_detail").get<std::string>().find(", tuned on " + dfgnn::db::environment_class(test_environment())),
            std::string::npos) << j.dump();
  EXPECT_EQ(schedule_of(sibling.get(), g.get(), kOp), kWinner);
}

// The committed winners files, one GPU class each. sm90.db: the H200's sweep of the datasets as read.
// sm90-h100.db: the H100's, of the zoo's configurations the H200 sweep did not reach and of the GAT
// family's on the graphs with self-loops (as their PyG layers build them). On either GPU each file
// answers its own rows, the other GPU's as a stand-in of the same architecture, and explain names it.
TEST(DispatchOrigin, EachShippedGpuClassAnswersItsRowsOnTheOther) {
  const fs::path tuning = dfgnn::test::source_dir() / "data" / "tuning";
  const fs::path h200 = tuning / "sm90.db", h100 = tuning / "sm90-h100.db";
  ASSERT_TRUE(fs::exists(h200) && fs::exists(h100));
  ScopedEnv env;
  env.set("DFGNN_SHIPPED_DB", tuning.c_str());
  TempDir dir;
  const std::string h200_class = "NVIDIA H200|sm_90|132", h100_class = "NVIDIA H100 80GB HBM3|sm_90|132";
  const dfgnn_op_t gat_8x8 = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 8, 8);
  const dfgnn_op_t gat_4x16 = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 4, 16);  // the H100 only
  struct Case {
    const char* what;
    dfgnn_op_t op;
    bool self_loops;
    fs::path file;
    std::string tuned_class;
  };
  const Case cases[] = {{"GAT 8x8, Cora as read", gat_8x8, false, h200, h200_class},
                        {"GAT 8x8, Cora with self-loops", gat_8x8, true, h100, h100_class},
                        {"GAT 4x16, Cora as read", gat_4x16, false, h100, h100_class}};
  for (const auto& [gpu, own] : {std::pair{"NVIDIA H200", h200_class}, std::pair{"NVIDIA H100 80GB HBM3", h100_class}}) {
    auto ctx = context_with_sites(dir.path / (std::string(gpu) + ".db"), "");
    dfgnn::db::EnvironmentInfo e = test_environment();
    e.gpu_name = gpu;
    dfgnn::context_of(ctx.get()).dispatcher.set_environment(e);
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(gpu) + ": " + c.what);
      auto cora = dfgnn::test::cora_graph(ctx.get(), c.self_loops);
      const nlohmann::json j = explain(ctx.get(), cora.get(), c.op);
      EXPECT_EQ(j.at("layer"), "shipped") << j.dump();
      EXPECT_EQ(j.at("origin"), "exact") << j.dump();
      EXPECT_EQ(j.at("source"), c.file.string()) << j.dump();
      const bool stand_in = c.tuned_class != own;
      EXPECT_EQ(j.at("origin_detail").get<std::string>().find(", tuned on " + c.tuned_class) != std::string::npos, stand_in)
          << j.dump();
    }
  }
}

// Issue 24: out of the box, on an H100 or H200, explain names the shipped layer and the level (exact
// or nearest) that answered every pass of every zoo configuration on Cora as GATConv takes it (with
// self-loops; the sweep tuned it as read), and the file that answered. A configuration the shipped
// files stopped covering would answer by the default rule and fail here.
TEST(DispatchOrigin, ExplainNamesTheShippedLayerAndLevelForEveryZooConfiguration) {
  const fs::path tuning = dfgnn::test::source_dir() / "data" / "tuning";
  std::set<std::string> files;
  for (const fs::path& f : dfgnn::test::shipped_winners_files()) files.insert(f.string());
  ASSERT_GE(files.size(), 2u);
  ScopedEnv env;
  env.set("DFGNN_SHIPPED_DB", tuning.c_str());
  TempDir dir;
  const std::vector<dfgnn::test::ZooEntry> zoo = dfgnn::test::read_zoo();
  ASSERT_GE(zoo.size(), 20u);
  for (const char* gpu : {"NVIDIA H200", "NVIDIA H100 80GB HBM3"}) {
    auto ctx = context_with_sites(dir.path / (std::string(gpu) + ".db"), "");
    dfgnn::db::EnvironmentInfo e = test_environment();
    e.gpu_name = gpu;
    dfgnn::context_of(ctx.get()).dispatcher.set_environment(e);
    auto cora = dfgnn::test::cora_with_loops(ctx.get());
    std::map<std::string, int> origins;
    for (const dfgnn::test::ZooEntry& z : zoo) {
      const dfgnn_op_t op = z.op();
      for (dfgnn_direction_t direction : {DFGNN_FORWARD, DFGNN_BACKWARD}) {
        const nlohmann::json passes = explain_passes(ctx.get(), cora.get(), op, direction);
        ASSERT_EQ(passes.size(), direction == DFGNN_FORWARD ? 1u : 2u) << passes.dump();
        for (const nlohmann::json& j : passes) {
          const std::string what = fmt::format("{} {} {}x{} {} on {}: {}", z.model, z.dtype, z.heads, z.dim,
                                               j.value("pass", "?"), gpu, j.dump());
          EXPECT_EQ(j.value("layer", ""), "shipped") << what;
          const std::string origin = j.value("origin", "");
          EXPECT_TRUE(origin == "exact" || origin == "nearest") << what;
          EXPECT_TRUE(files.contains(j.value("source", ""))) << what;
          ++origins[origin];
        }
      }
    }
    EXPECT_EQ(origins["exact"] + origins["nearest"], static_cast<int>(3 * zoo.size())) << gpu;
  }
}

// Issue 26: a site database that opens well but whose results pages are damaged, before a good
// one. The exact lookup reads the damaged pages; the call succeeds with the good site's answer, the
// damaged layer is logged once and skipped by every later context of the process.
TEST(DispatchOrigin, QueryOnDamagedPagesAnswersFromTheOtherLayers) {
  TempDir dir;
  auto g = hub_graph(make_context().get(), 1);
  const std::string default_text = schedule_of(make_context().get(), g.get(), kOp);
  const std::string good_winner = "subwarp:lanes=32,groups=4,team=1,vec=4,mid=0,threshold=0,chunk=0";
  const fs::path damaged = dir.path / "damaged.db", good = dir.path / "good.db";
  make_snapshot(damaged, dir.path / "damaged-src.db", g.get(), kWinner, default_text);
  make_snapshot(good, dir.path / "good-src.db", g.get(), good_winner, default_text);
  ASSERT_GT(dfgnn::test::damage_leaf_pages(damaged, "results"), 0);
  ScopedEnv env;
  env.set("DFGNN_SHIPPED_DB", "off");
  LogCapture log(spdlog::level::warn);
  for (int context = 0; context < 3; ++context) {
    SCOPED_TRACE(context);
    auto ctx = context_with_sites(dir.path / "user.db", damaged.string() + ":" + good.string());
    const nlohmann::json e = explain(ctx.get(), g.get(), kOp);
    EXPECT_EQ(e.at("origin"), "exact");
    EXPECT_EQ(e.at("layer"), "site");
    EXPECT_EQ(e.at("source"), good.string());
    EXPECT_EQ(e.at("schedule"), good_winner);
    EXPECT_EQ(schedule_of(ctx.get(), g.get(), kOp), good_winner);
  }
  EXPECT_EQ(occurrences(log.text(), "\n"), 1) << log.text();
  EXPECT_EQ(occurrences(log.text(), "site tuning database " + damaged.string() + " is damaged"), 1) << log.text();
  EXPECT_EQ(occurrences(log.text(), "database disk image is malformed"), 1) << log.text();
}

// A damaged shipped file: the default rule answers, with one warning however many contexts and
// graphs ask.
TEST(DispatchOrigin, CorruptShippedDatabaseWarnsOnce) {
  TempDir dir;
  const fs::path shipped = dir.path / "sm90.db";
  {
    std::ofstream f(shipped, std::ios::binary);
    f << "SQLite format 3" << std::string(1, '\0') << std::string(4000, 'x');
  }
  ScopedEnv env;
  env.set("DFGNN_SHIPPED_DB", shipped.c_str());
  LogCapture log(spdlog::level::warn);
  for (int context = 0; context < 2; ++context) {
    auto ctx = context_with_sites(dir.path / "user.db", "");
    for (uint64_t seed : {1, 2, 3}) {
      auto g = hub_graph(ctx.get(), seed);
      const nlohmann::json e = explain(ctx.get(), g.get(), kOp);
      EXPECT_EQ(e.at("origin"), "default");
      EXPECT_EQ(e.at("schedule"), schedule_of(make_context().get(), g.get(), kOp));
    }
  }
  EXPECT_EQ(occurrences(log.text(), "\n"), 1) << log.text();  // one line
  EXPECT_EQ(occurrences(log.text(), "shipped tuning database"), 1) << log.text();
  EXPECT_NE(log.text().find(shipped.string()), std::string::npos) << log.text();
  EXPECT_EQ(fs::file_size(shipped), 4016u);  // never touched
}

// ---------------------------------------------------------------- the environment and explain
namespace dfgnn {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
using test::make_context;

// DFGNN_NEAREST_MAX_DISTANCE is taken only as a number ("nan", "0.5km", ... leave the calibrated radius).
TEST(Dispatch, NearestDistanceFromTheEnvironmentMustBeANumber) {
  const double calibrated = nearest_calibration().radius;
  for (const char* bad : {"nan", "-1", "0.5km", "", "far"}) {
    SCOPED_TRACE(bad);
    ScopedEnv env;
    env.set("DFGNN_NEAREST_MAX_DISTANCE", bad);
    EXPECT_EQ(Dispatcher().max_distance(), calibrated);
  }
  ScopedEnv env;
  env.set("DFGNN_NEAREST_MAX_DISTANCE", "0.25");
  EXPECT_EQ(Dispatcher().max_distance(), 0.25);
}

// The spans of a first dispatch (logging.hpp), at debug level: the database opened and the decision
// made once each; a second explain of the same graph and op is answered from memory and logs neither.
TEST(Dispatch, FirstDispatchLogsItsSpansOnceAtDebug) {
  const fs::path dir = fs::temp_directory_path() / ("dfgnn-span-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto ctx = make_context();
  DFGNN_ASSERT_OK(dfgnnSetDatabase(ctx.get(), (dir / "user.db").c_str(), ""));
  auto g = test::graph_from_edges(ctx.get(), 4, {0, 1, 2, 3}, {1, 2, 3, 0});
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 32);
  const auto explained_log = [&] {
    LogCapture captured(spdlog::level::debug);
    size_t length = 0;
    EXPECT_EQ(dfgnnExplain(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, 0, &length), DFGNN_STATUS_SUCCESS)
        << dfgnnGetLastErrorMessage();
    return captured.text();
  };
  const auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  const std::string first = explained_log();
  EXPECT_EQ(count(first, "span database layers opened: "), 1u) << first;
  EXPECT_EQ(count(first, "span dispatch decision: "), 1u) << first;
  const std::string second = explained_log();
  EXPECT_EQ(count(second, "span "), 0u) << second;
  fs::remove_all(dir);
}

// Without a GPU dispatch never reads the database; explain must still open it, so that a damaged
// one is reported (logged) rather than the default rule shown as if nothing were wrong.
TEST(Dispatch, ExplainReportsADamagedDatabaseWithoutAGpu) {
  const fs::path dir = fs::temp_directory_path() / ("dfgnn-rel-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / "damaged.db";
  std::ofstream(file, std::ios::binary) << std::string(4096, 'x');
  auto ctx = make_context();
  DFGNN_ASSERT_OK(dfgnnSetDatabase(ctx.get(), file.c_str(), ""));
  auto g = test::graph_from_edges(ctx.get(), 4, {0, 1, 2, 3}, {1, 2, 3, 0});

  std::ostringstream captured;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(captured);
  spdlog::logger& logger = log();
  const spdlog::level::level_enum old_level = logger.level();
  logger.set_level(spdlog::level::warn);
  logger.sinks().push_back(sink);
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 32);
  size_t length = 0;
  const dfgnn_status_t s = dfgnnExplain(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, 0, &length);
  logger.sinks().pop_back();
  logger.set_level(old_level);

  EXPECT_EQ(s, DFGNN_STATUS_SUCCESS) << dfgnnGetLastErrorMessage();
  EXPECT_TRUE(contains(captured.str(), file.string())) << "logged: '" << captured.str() << "'";
  EXPECT_EQ(fs::file_size(file), 4096u);  // reported, not touched
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace dfgnn
