// The fitted default rule (runtime/src/default_rule.*): parsing and its errors, the tree walk (out of
// range features included), the choice of a leaf's first usable schedule and the hand-rule fallback,
// DFGNN_DEFAULT_RULE, and that the embedded rule walks the committed extract's cases to the leaves
// tools/fit_default_rule.py put them in (the two compute the same features).
#include "test_util.hpp"

#include "default_rule.hpp"
#include "error.hpp"
#include "fingerprint.hpp"
#include "graph.hpp"
#include "graph_io.hpp"
#include "logging.hpp"
#include "ops.hpp"
#include "schedule.hpp"
#include "solver.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/sinks/ostream_sink.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>

using dfgnn::DefaultChoice;
using dfgnn::FittedRule;
using dfgnn::PassKind;
using dfgnn::PassProblem;
using dfgnn::Schedule;

namespace {

using Json = nlohmann::json;

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

std::unique_ptr<dfgnn::Graph> planted(int64_t n, int32_t avg, int32_t hubs, int64_t hub_degree) {
  const dfgnn::EdgeList e = dfgnn::generate_planted_hubs(n, avg, hubs, hub_degree, 5);
  return dfgnn::Graph::from_coo(e.num_nodes, e.num_edges(), e.edge_index.data(), DFGNN_INDEX_INT64,
                                dfgnnGraphDefaultOptions());
}

const dfgnn_op_t kOp128 = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 128);
const dfgnn_op_t kOp64 = dfgnnOpDefault(DFGNN_MODEL_TRANSFORMER, DFGNN_DTYPE_FLOAT32, 4, 64);

const std::string kSub128 = "subwarp:lanes=32,groups=4,team=1,vec=4,mid=0,threshold=0,chunk=0";
const std::string kSub64 = "subwarp:lanes=16,groups=8,team=1,vec=4,mid=0,threshold=0,chunk=0";
const std::string kHub128 = "hub_split:lanes=32,groups=8,team=1,vec=4,mid=0,threshold=256,chunk=128";

// Root: max degree <= 255 (log2(256) = 8) -> leaf 10 (sub-warp texts for D 128, then D 64), else
// D <= 96 -> leaf 11 (D 64 sub-warp), else leaf 12 (hub split for D 128).
std::string test_rule(const std::string& leaf10_first = kSub128) {
  Json j = {{"format", "dfgnn-default-rule"},
            {"version", 1},
            {"nodes",
             {{{"feature", "log2_max_degree"}, {"threshold", 8.0}, {"left", 1}, {"right", 2}},
              {{"leaf", 10}, {"schedules", {leaf10_first, kSub64}}},
              {{"feature", "dim"}, {"threshold", 96.0}, {"left", 3}, {"right", 4}},
              {{"leaf", 11}, {"schedules", {kSub64}}},
              {{"leaf", 12}, {"schedules", {kHub128}}}}}};
  return j.dump();
}

PassProblem problem(const dfgnn::Graph& g, const dfgnn_op_t& op, PassKind pass = PassKind::Forward, int32_t max_vec = 4) {
  return dfgnn::pass_problem(g, op, pass, max_vec);
}

// A fingerprint far outside anything fitted: it only steers the walk.
dfgnn_fingerprint_t extreme_fingerprint(int64_t max_degree) {
  dfgnn_fingerprint_t fp{};
  fp.version = DFGNN_FINGERPRINT_VERSION;
  fp.num_nodes = int64_t{1} << 40;
  fp.num_edges = int64_t{1} << 50;
  fp.mean_degree = 1024;
  fp.max_degree = max_degree;
  return fp;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST(DefaultRule, WalksTheTreeToTheLeafOfTheFeatures) {
  const FittedRule rule = FittedRule::parse(test_rule());
  const auto flat = planted(3000, 8, 0, 0);  // max degree well below 256
  const auto hubs = planted(3000, 8, 3, 1500);
  ASSERT_LT(problem(*flat, kOp128).fingerprint->max_degree, 255);
  ASSERT_GE(problem(*hubs, kOp128).fingerprint->max_degree, 1500);
  EXPECT_EQ(rule.leaf_for(problem(*flat, kOp128)).id, 10);
  EXPECT_EQ(rule.leaf_for(problem(*flat, kOp64)).id, 10);
  EXPECT_EQ(rule.leaf_for(problem(*hubs, kOp64)).id, 11);
  EXPECT_EQ(rule.leaf_for(problem(*hubs, kOp128)).id, 12);

  // The boundary: value <= threshold goes left (log2(255 + 1) = 8 exactly).
  for (const auto& [max_degree, leaf] : {std::pair{255, 10}, std::pair{256, 12}}) {
    const dfgnn_fingerprint_t fp = extreme_fingerprint(max_degree);
    PassProblem p{kOp128, PassKind::Forward, &fp, 4};
    EXPECT_EQ(rule.leaf_for(p).id, leaf) << max_degree;
  }
  // Far out of the fitted range, in every feature: the walk still ends at the nearest leaf.
  dfgnn_fingerprint_t fp = extreme_fingerprint(int64_t{1} << 40);
  dfgnn_op_t wide = dfgnnOpDefault(DFGNN_MODEL_AGNN, DFGNN_DTYPE_BFLOAT16, 64, 2048);
  EXPECT_EQ(rule.leaf_for(PassProblem{wide, PassKind::BackwardCol, &fp, 8}).id, 12);
  dfgnn_fingerprint_t empty{};
  empty.version = DFGNN_FINGERPRINT_VERSION;
  dfgnn_op_t tiny = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 1);
  EXPECT_EQ(rule.leaf_for(PassProblem{tiny, PassKind::Forward, &empty, 1}).id, 10);
}

TEST(DefaultRule, FeaturesAreTheFittersFormulas) {
  const auto hubs = planted(3000, 8, 3, 1500);
  const PassProblem p = problem(*hubs, kOp64, PassKind::BackwardRow);
  const dfgnn_fingerprint_t& fp = *p.fingerprint;
  EXPECT_DOUBLE_EQ(*dfgnn::rule_feature("log2_nodes", p), std::log2(3000.0));
  EXPECT_DOUBLE_EQ(*dfgnn::rule_feature("log2_edges", p), std::log2(static_cast<double>(fp.num_edges)));
  EXPECT_DOUBLE_EQ(*dfgnn::rule_feature("log2_max_degree", p), std::log2(fp.max_degree + 1.0));
  EXPECT_DOUBLE_EQ(*dfgnn::rule_feature("hub_row_share", p), static_cast<double>(fp.hub_rows[0]) / 3000.0);
  EXPECT_DOUBLE_EQ(*dfgnn::rule_feature("log2_long_rows", p), std::log2(fp.hub_rows[2] + 1.0));
  EXPECT_EQ(fp.hub_rows[2], 3);  // the three planted hubs have >= 256 in-edges
  EXPECT_EQ(*dfgnn::rule_feature("pass", p), 1.0);
  EXPECT_EQ(*dfgnn::rule_feature("model", p), 2.0);
  EXPECT_EQ(*dfgnn::rule_feature("heads", p), 4.0);
  EXPECT_EQ(*dfgnn::rule_feature("dim", p), 64.0);
  EXPECT_EQ(*dfgnn::rule_feature("dtype_bytes", p), 4.0);
  EXPECT_EQ(*dfgnn::rule_feature("cv", p), fp.cv);
  EXPECT_FALSE(dfgnn::rule_feature("max_degree", p).has_value());  // not a feature name
}

TEST(DefaultRule, TakesTheLeafsFirstUsableSchedule) {
  const auto flat = planted(3000, 8, 0, 0);
  const auto hubs = planted(3000, 8, 3, 1500);
  const FittedRule rule = FittedRule::parse(test_rule());
  {
    const std::optional<DefaultChoice> c = rule.choose(problem(*hubs, kOp128));
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(dfgnn::to_string(c->schedule), kHub128);
    EXPECT_EQ(c->rule, "fitted rule leaf 12");
  }
  {
    // Leaf 10 for D 64: its first text (lanes 32, vec 4, 4 groups) is among D 64's candidates too.
    const std::optional<DefaultChoice> c = rule.choose(problem(*flat, kOp64));
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->rule, "fitted rule leaf 10");
    EXPECT_NO_THROW(dfgnn::require_valid(problem(*flat, kOp64), c->schedule));
  }
  // Skipped in turn: a text that does not parse, one whose vector width the alignment forbids, one
  // whose solver does not apply (hub split without long rows), then the usable one.
  for (const std::string& bad : {std::string("nonsense:lanes=4"), std::string("subwarp:lanes=32,groups=4,vec=8"),
                                 std::string("hub_split:lanes=32,groups=8,vec=4,threshold=256,chunk=128")}) {
    const FittedRule r = FittedRule::parse(test_rule(bad));
    const std::optional<DefaultChoice> c = r.choose(problem(*flat, kOp64));
    ASSERT_TRUE(c.has_value()) << bad;
    EXPECT_EQ(dfgnn::to_string(c->schedule), kSub64) << bad;
    EXPECT_EQ(c->rule, "fitted rule leaf 10");
  }
  // Valid, but not among the tuner's candidates here (the fit never saw it measured): skipped.
  // Blocks of 64 threads: the sub-warp search tries 128, 256 and 512.
  const std::string outside = "subwarp:lanes=32,groups=2,team=1,vec=4,mid=0,threshold=0,chunk=0";
  ASSERT_NO_THROW(dfgnn::require_valid(problem(*flat, kOp128), dfgnn::parse_schedule(outside)));
  const std::vector<Schedule> space = dfgnn::enumerate_schedules(problem(*flat, kOp128));
  ASSERT_EQ(std::find(space.begin(), space.end(), dfgnn::parse_schedule(outside)), space.end());
  EXPECT_EQ(dfgnn::to_string(FittedRule::parse(test_rule(outside)).choose(problem(*flat, kOp128))->schedule), kSub64);
}

// A leaf whose texts do not fit the op's shape (here vec 4 on unaligned data; elsewhere lanes that D
// or H do not divide) carries its first applicable text over: the same solver, plan fields and
// threads per block on the lane mapping the solver's default takes for the shape.
TEST(DefaultRule, UnusableTextIsFittedToTheShape) {
  const auto hubs = planted(3000, 8, 3, 1500);
  const PassProblem p = problem(*hubs, kOp128, PassKind::Forward, 1);
  const FittedRule rule = FittedRule::parse(test_rule());
  const std::optional<DefaultChoice> c = rule.choose(p);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(dfgnn::to_string(c->schedule), "hub_split:lanes=32,groups=8,team=1,vec=1,mid=0,threshold=256,chunk=128");
  EXPECT_EQ(c->rule, "fitted rule leaf 12, lanes fitted to H = 1, D = 128");
  // Many heads of few channels: no text of leaf 10 is a candidate for 8 heads of 8 channels; its first
  // (32 lanes, 4 groups: 128 threads) runs on groups of 16 lanes spanning the 8 heads, 8 a block.
  const auto flat = planted(3000, 8, 0, 0);
  const dfgnn_op_t many = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 8, 8);
  const std::optional<DefaultChoice> spanning = rule.choose(problem(*flat, many));
  ASSERT_TRUE(spanning.has_value());
  EXPECT_EQ(dfgnn::to_string(spanning->schedule), "subwarp:lanes=16,heads=8,groups=8,team=1,vec=4,mid=0,threshold=0,chunk=0");
}

// Many heads of few channels that need a fitted text take the leaf's text for one head of H * D
// channels, fitted: here the bfloat16 text of 64 channels (16 edges per group), not the leaf's first
// (made for 128 float32 channels, 64 edges per group), whose fit ran 2.2x slower on PubMed.
TEST(DefaultRule, ManyHeadsFitTheTextOfOneHeadOfTheirWidth) {
  const std::string wide32 = "edge_balanced:lanes=32,groups=8,team=1,vec=4,mid=0,threshold=0,chunk=512";
  const std::string bf16_64 = "edge_balanced:lanes=8,groups=32,team=1,vec=8,mid=0,threshold=0,chunk=512";
  const Json j = {{"format", "dfgnn-default-rule"},
                  {"version", 1},
                  {"nodes", {{{"leaf", 3}, {"schedules", {wide32, bf16_64}}}}}};
  const FittedRule rule = FittedRule::parse(j.dump());
  const auto g = planted(3000, 8, 0, 0);
  const dfgnn_op_t one_head = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_BFLOAT16, 1, 64);
  const std::optional<DefaultChoice> wide = rule.choose(problem(*g, one_head, PassKind::Forward, 8));
  ASSERT_TRUE(wide.has_value());
  EXPECT_EQ(dfgnn::to_string(wide->schedule), bf16_64);
  const dfgnn_op_t heads = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_BFLOAT16, 8, 8);
  const std::optional<DefaultChoice> c = rule.choose(problem(*g, heads, PassKind::Forward, 8));
  ASSERT_TRUE(c.has_value());
  const Schedule s = c->schedule;
  EXPECT_EQ(s.heads, 8);
  EXPECT_EQ(s.lanes * s.groups, 256);                // the text's threads per block
  EXPECT_EQ(s.chunk / s.groups, 512 / 32) << dfgnn::to_string(s);  // and its edges per group
  EXPECT_EQ(c->rule, "fitted rule leaf 3 for one head of 64 channels, lanes fitted to H = 8, D = 8");
  // One head keeps the leaf's own choice, float32 its first text.
  const dfgnn_op_t f32 = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 8, 8);
  const std::optional<DefaultChoice> c32 = rule.choose(problem(*g, f32, PassKind::Forward, 4));
  ASSERT_TRUE(c32.has_value());
  EXPECT_EQ(c32->schedule.chunk / c32->schedule.groups, 512 / 8) << dfgnn::to_string(c32->schedule);
}

// A text that must be fitted is taken from the leaf's text measured at the nearest lane width: a
// class layer (D = 7, 8 lanes) takes the 16-lane text's 16 edges per group, not the first text's 64
// (made for 128 channels, 32 lanes), which ran PubMed's class layer 3x slower. A shape a text fits
// as it is still takes the leaf's first such text.
TEST(DefaultRule, FittedTextsComeFromTheNearestLaneWidth) {
  const std::string wide32 = "edge_balanced:lanes=32,groups=8,team=1,vec=4,mid=0,threshold=0,chunk=512";
  const std::string f32_64 = "edge_balanced:lanes=16,groups=32,team=1,vec=4,mid=0,threshold=0,chunk=512";
  const Json j = {{"format", "dfgnn-default-rule"},
                  {"version", 1},
                  {"nodes", {{{"leaf", 3}, {"schedules", {wide32, f32_64}}}}}};
  const FittedRule rule = FittedRule::parse(j.dump());
  const auto g = planted(3000, 8, 0, 0);
  for (const int32_t dim : {3, 7}) {
    const dfgnn_op_t classes = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, dim);
    const std::optional<DefaultChoice> c = rule.choose(problem(*g, classes, PassKind::Forward, 1));
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->schedule.lanes, dim == 3 ? 4 : 8) << dfgnn::to_string(c->schedule);
    EXPECT_EQ(c->schedule.lanes * c->schedule.groups, 512) << dfgnn::to_string(c->schedule);  // f32_64's threads
    EXPECT_EQ(c->schedule.chunk / c->schedule.groups, 16) << dfgnn::to_string(c->schedule);
    EXPECT_EQ(c->rule, fmt::format("fitted rule leaf 3, lanes fitted to H = 1, D = {}", dim));
  }
  const std::optional<DefaultChoice> wide = rule.choose(problem(*g, kOp128, PassKind::Forward, 4));
  ASSERT_TRUE(wide.has_value());
  EXPECT_EQ(dfgnn::to_string(wide->schedule), wide32);
}

// On the op shapes the fit measured ("fit": {"domain": {"op_shapes"}}) the runtime does what the fit
// scored: the leaf's first text the tuner raced there, as it is, else the hand rule. It fits no text
// to such a shape, and a one-head text measured best for many heads is not respread over them.
TEST(DefaultRule, OnTheFitsOwnShapesNoTextIsFitted) {
  const std::string wide32 = "edge_balanced:lanes=32,groups=8,team=1,vec=4,mid=0,threshold=0,chunk=512";
  const std::string one_head8 = "subwarp:lanes=8,groups=16,team=1,vec=4,mid=0,threshold=0,chunk=0";
  Json j = {{"format", "dfgnn-default-rule"},
            {"version", 1},
            {"nodes", {{{"leaf", 3}, {"schedules", {wide32, one_head8}}}}},
            {"fit", {{"domain", {{"max_log2_edges", 30}, {"op_shapes", {{0, 0, 1, 7, 1}, {0, 0, 8, 8, 4}}}}}}}};
  const FittedRule seen = FittedRule::parse(j.dump());
  j["fit"]["domain"]["op_shapes"] = Json::array();
  const FittedRule unseen = FittedRule::parse(j.dump());
  const auto g = planted(3000, 8, 0, 0);
  const PassProblem classes = problem(*g, dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 7), PassKind::Forward, 1);
  EXPECT_FALSE(seen.choose(classes).has_value());  // neither text is a candidate for D = 7: the hand rule
  EXPECT_EQ(dfgnn::choose_default(&seen, classes).rule, "hand rule");
  const std::optional<DefaultChoice> fitted = unseen.choose(classes);
  ASSERT_TRUE(fitted.has_value());
  EXPECT_EQ(fitted->rule, "fitted rule leaf 3, lanes fitted to H = 1, D = 7");
  // 8 heads of 8 channels: the one-head text is a candidate there and is taken as the fit measured it.
  const PassProblem heads = problem(*g, dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 8, 8), PassKind::Forward, 4);
  const std::optional<DefaultChoice> c = seen.choose(heads);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(dfgnn::to_string(c->schedule), one_head8);
  EXPECT_EQ(c->rule, "fitted rule leaf 3");
  // Off the fit's shapes (another alignment is another shape), the one-head text takes the mapping
  // that spans the heads.
  for (const FittedRule* rule : {&unseen, &seen}) {
    const PassProblem p = rule == &seen ? problem(*g, heads.op, PassKind::Forward, 1) : heads;
    const std::optional<DefaultChoice> spread = rule->choose(p);
    ASSERT_TRUE(spread.has_value());
    EXPECT_GT(spread->schedule.heads, 1) << dfgnn::to_string(spread->schedule);
  }
  // Malformed shapes do not parse.
  for (const Json& bad : {Json(7), Json::array({Json::array({0, 0, 1, 7})}), Json::array({Json::array({0, 0, 1, 7, "x"})})}) {
    j["fit"]["domain"]["op_shapes"] = bad;
    EXPECT_THROW(FittedRule::parse(j.dump()), dfgnn::Error) << bad.dump();
  }
}

TEST(DefaultRule, NoUsableScheduleFallsBackToTheHandRule) {
  // A leaf of hub split texts alone on a graph without hubs: its solver does not apply.
  const auto flat = planted(3000, 8, 0, 0);
  const Json j = {{"format", "dfgnn-default-rule"}, {"version", 1}, {"nodes", {{{"leaf", 3}, {"schedules", {kHub128}}}}}};
  const FittedRule rule = FittedRule::parse(j.dump());
  const PassProblem p = problem(*flat, kOp128, PassKind::Forward, 1);
  EXPECT_FALSE(rule.choose(p).has_value());
  const DefaultChoice c = dfgnn::choose_default(&rule, p);
  EXPECT_EQ(c.rule, "hand rule");
  EXPECT_EQ(c.schedule, dfgnn::hand_rule_schedule(p));
  EXPECT_EQ(c.schedule.solver, dfgnn::SolverId::Subwarp);
  EXPECT_EQ(c.schedule.vec, 1);
  // No rule at all (one that did not parse): the hand rule too.
  EXPECT_EQ(dfgnn::choose_default(nullptr, p).rule, "hand rule");
}

TEST(DefaultRule, BadRuleTextIsAParseErrorNamingTheProblem) {
  const std::string node0 = R"({"format":"dfgnn-default-rule","version":1,"nodes":[)";
  const std::pair<std::string, std::string> cases[] = {
      {"", "not valid JSON"},
      {"[1]", "expected a JSON object"},
      {R"({"format":"other","version":1,"nodes":[]})", "\"format\" is \"other\""},
      {R"({"format":"dfgnn-default-rule","version":2,"nodes":[]})", "\"version\" 2 is not 1"},
      {R"({"format":"dfgnn-default-rule","version":1})", "the rule has no \"nodes\""},
      {node0 + "]}", "\"nodes\" must be a non-empty array"},
      {node0 + R"({"feature":"shoe_size","threshold":1,"left":1,"right":2}]})", "unknown feature \"shoe_size\""},
      {node0 + R"({"feature":"dim","threshold":"x","left":1,"right":2}]})", "\"threshold\" = \"x\" is not a finite number"},
      {node0 + R"({"feature":"dim","threshold":1,"left":0,"right":1},{"leaf":0,"schedules":[]}]})",
       "node 0 \"left\" = 0 is not a node index in (0, 2)"},
      {node0 + R"({"feature":"dim","threshold":1,"left":1,"right":5},{"leaf":0,"schedules":[]}]})",
       "\"right\" = 5 is not a node index"},
      {node0 + R"({"feature":"dim","threshold":1,"left":1},{"leaf":0,"schedules":[]}]})", "node 0 has no \"right\""},
      {node0 + R"({"leaf":-1,"schedules":[]}]})", "\"leaf\" = -1 is not a leaf number"},
      {node0 + R"({"leaf":0}]})", "node 0 has no \"schedules\""},
      {node0 + R"({"leaf":0,"schedules":[3]}]})", "holds a schedule that is not text: 3"},
      {node0 + R"(7]})", "node 0 is not an object"},
  };
  for (const auto& [text, expected] : cases) {
    try {
      FittedRule::parse(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const dfgnn::Error& e) {
      EXPECT_EQ(e.status(), DFGNN_STATUS_PARSE_ERROR);
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what() << "\nexpected: " << expected;
    }
  }
}

TEST(DefaultRule, CorruptRuleLogsOneWarningAndLeavesTheHandRule) {
  std::ostringstream captured;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(captured);
  spdlog::logger& logger = dfgnn::log();
  const spdlog::level::level_enum old_level = logger.level();
  logger.set_level(spdlog::level::warn);
  logger.sinks().push_back(sink);
  const std::shared_ptr<const FittedRule> rule = dfgnn::parse_rule_or_warn(R"({"format":"dfgnn-default-rule")", "test");
  logger.sinks().pop_back();
  logger.set_level(old_level);
  EXPECT_EQ(rule, nullptr);
  const std::string log = captured.str();
  EXPECT_NE(log.find("the test default rule is not usable, the hand rule answers instead: default rule: not valid JSON"),
            std::string::npos)
      << log;
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  const auto hubs = planted(3000, 8, 3, 1500);
  EXPECT_EQ(dfgnn::choose_default(rule.get(), problem(*hubs, kOp128)).rule, "hand rule");
  EXPECT_NE(dfgnn::parse_rule_or_warn(test_rule(), "test"), nullptr);
}

TEST(DefaultRule, EnvironmentSelectsTheHandRule) {
  const auto hubs = planted(3000, 8, 3, 1500);
  const PassProblem p = problem(*hubs, kOp128);
  {
    ScopedEnv env("DFGNN_DEFAULT_RULE", "hand");
    EXPECT_TRUE(dfgnn::hand_rule_selected());
    const DefaultChoice c = dfgnn::default_choice(p);
    EXPECT_EQ(c.rule, "hand rule");
    EXPECT_EQ(c.schedule, dfgnn::hand_rule_schedule(p));
    EXPECT_EQ(dfgnn::default_schedule(p), c.schedule);
  }
  for (const char* fitted : {"fitted", "", "bogus"}) {
    ScopedEnv env("DFGNN_DEFAULT_RULE", fitted);
    EXPECT_FALSE(dfgnn::hand_rule_selected()) << fitted;
    EXPECT_EQ(dfgnn::default_choice(p).schedule, dfgnn::choose_default(dfgnn::embedded_rule(), p).schedule);
  }
}

TEST(DefaultRule, EmbeddedRuleParsesAndNeverGivesAnInvalidSchedule) {
  ASSERT_NO_THROW(FittedRule::parse(dfgnn::embedded_rule_text()));
  ASSERT_NE(dfgnn::embedded_rule(), nullptr);
  // The library carries the committed file.
  const std::string committed = read_file(std::filesystem::path(DFGNN_SOURCE_DIR) / "runtime/data/default_rule.json");
  EXPECT_EQ(committed, dfgnn::embedded_rule_text());
  ScopedEnv env("DFGNN_DEFAULT_RULE", nullptr);
  const dfgnn_op_t ops[] = {kOp128, kOp64, dfgnnOpDefault(DFGNN_MODEL_GATV2, DFGNN_DTYPE_BFLOAT16, 2, 32),
                            dfgnnOpDefault(DFGNN_MODEL_AGNN, DFGNN_DTYPE_FLOAT16, 1, 7),
                            dfgnnOpDefault(DFGNN_MODEL_TRANSFORMER, DFGNN_DTYPE_FLOAT32, 8, 512)};
  for (const auto& g : {planted(3000, 8, 0, 0), planted(3000, 8, 3, 1500), planted(20000, 40, 20, 9000)})
    for (const dfgnn_op_t& op : ops)
      for (PassKind pass : {PassKind::Forward, PassKind::BackwardRow, PassKind::BackwardCol})
        for (int32_t max_vec : {1, 2, 8}) {
          const PassProblem p = problem(*g, op, pass, max_vec);
          const DefaultChoice c = dfgnn::default_choice(p);
          EXPECT_NO_THROW(dfgnn::require_valid(p, c.schedule)) << dfgnn::to_string(c.schedule) << " from " << c.rule;
        }
}

// The runtime's features and walk agree with the fitter's: every case of the committed extract
// lands in the leaf the fitter recorded for it, and gets a valid schedule.
TEST(DefaultRule, EmbeddedRuleWalksTheExtractLikeTheFitter) {
  const std::filesystem::path extract = std::filesystem::path(DFGNN_SOURCE_DIR) / "tests/data/default_rule_cases.json";
  if (!std::filesystem::exists(extract)) GTEST_SKIP() << extract << " is not committed";
  const Json cases = Json::parse(read_file(extract));
  const Json rule = Json::parse(dfgnn::embedded_rule_text());
  const Json& leaves = rule.at("fit").at("case_leaves");
  ASSERT_EQ(leaves.size(), cases.at("cases").size());
  const FittedRule fitted = FittedRule::parse(dfgnn::embedded_rule_text());
  int partly_measured = 0;
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Json& c = cases["cases"][i];
    const dfgnn_fingerprint_t fp = dfgnn::parse_fingerprint(cases["fingerprints"][c["fp"].get<size_t>()].dump());
    const Json& o = c["op"];
    dfgnn_op_t op = dfgnnOpDefault(o["model"].get<dfgnn_model_t>(), o["dtype"].get<dfgnn_dtype_t>(), o["heads"], o["dim"]);
    const int variant = o["variant"];  // as the database keys it: max_vec + 16 * edge_features
    op.edge_features = variant / 16;
    const PassProblem p{op, static_cast<PassKind>(o["pass"].get<int>()), &fp, variant % 16};
    const FittedRule::Leaf& leaf = fitted.leaf_for(p);
    EXPECT_EQ(leaf.id, leaves[i].get<int>()) << "case " << i << " (" << c["graph"] << ")";
    const DefaultChoice choice = dfgnn::choose_default(&fitted, p);
    EXPECT_NO_THROW(dfgnn::require_valid(p, choice.schedule)) << "case " << i;
    // What the fit assumed: the runtime skips exactly the texts the tuner did not race there, so it
    // runs the leaf's first text measured in the case, else the hand rule.
    std::set<std::string> measured;
    for (const Json& t : c["times"]) measured.insert(cases["schedules"][t[0].get<size_t>()].get<std::string>());
    for (const Json& t : c["slow"]) measured.insert(cases["schedules"][t.get<size_t>()].get<std::string>());
    std::string expected = "hand rule";
    for (const std::string& text : leaf.schedules)
      if (measured.count(text) != 0) {
        expected = text;
        break;
      }
    const std::string got = choice.rule == "hand rule" ? choice.rule : dfgnn::to_string(choice.schedule);
    // Where the tuner's budget ran out before every candidate was measured, the runtime may take a
    // candidate the sweep did not reach (the fit's report counts these cases).
    if (c.value("complete", Json()) == false) {
      partly_measured += got != expected;
      continue;
    }
    EXPECT_EQ(got, expected) << "case " << i << " (" << c["graph"] << ", " << choice.rule << ")";
  }
  EXPECT_LE(partly_measured, rule.at("fit").value("partly_measured_cases", 0));
}

// The rule does not extrapolate far past the graph sizes it was fitted on: beyond twice the edges
// of its largest graph ("fit": {"domain": {"max_log2_edges"}}) the hand rule answers, and says why.
TEST(DefaultRule, GraphsFarLargerThanTheFitTakeTheHandRule) {
  const auto flat = planted(3000, 8, 0, 0);
  const double log2_edges = std::log2(static_cast<double>(flat->fingerprint().num_edges));
  auto with_domain = [](double max_log2_edges) {
    Json j = Json::parse(test_rule());
    j["fit"] = {{"domain", {{"max_log2_edges", max_log2_edges}}}};
    return FittedRule::parse(j.dump());
  };
  const PassProblem p = problem(*flat, kOp128);
  const FittedRule inside = with_domain(log2_edges - 0.9);  // within one doubling: the rule answers
  EXPECT_EQ(inside.beyond_domain(p), "");
  EXPECT_EQ(dfgnn::choose_default(&inside, p).rule, "fitted rule leaf 10");
  const FittedRule small = with_domain(log2_edges - 1.5);
  const DefaultChoice c = dfgnn::choose_default(&small, p);
  EXPECT_EQ(c.schedule, dfgnn::hand_rule_schedule(p));
  EXPECT_EQ(c.rule, fmt::format("hand rule (2^{:.1f} edges, past the fitted rule's 2^{:.1f})", log2_edges, log2_edges - 1.5));
  // A rule without a domain answers everywhere; a malformed one does not parse.
  EXPECT_EQ(FittedRule::parse(test_rule()).beyond_domain(p), "");
  Json bad = Json::parse(test_rule());
  bad["fit"] = {{"domain", {{"max_log2_edges", "big"}}}};
  EXPECT_THROW(FittedRule::parse(bad.dump()), dfgnn::Error);
  // The embedded rule knows its domain: its largest completely measured graph, R-MAT 2^18 (2^21.9
  // edges; the 12-06 sweep's budget cut the searches on 2^20 and 2^22), so 2^22 edges are within it
  // and R-MAT 2^20's 2^24 past it.
  ASSERT_NE(dfgnn::embedded_rule(), nullptr);
  dfgnn_fingerprint_t big = flat->fingerprint();
  big.num_edges = int64_t{1} << 22;
  PassProblem huge = p;
  huge.fingerprint = &big;
  EXPECT_EQ(dfgnn::embedded_rule()->beyond_domain(huge), "");
  big.num_edges = int64_t{1} << 24;
  EXPECT_EQ(dfgnn::embedded_rule()->beyond_domain(huge), "2^24.0 edges, past the fitted rule's 2^21.9");
  EXPECT_EQ(dfgnn::embedded_rule()->beyond_domain(p), "");
}
