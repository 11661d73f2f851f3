// Schedules: the text form (to_string / parse_schedule), parse errors and validity reasons as the
// C API reports them, the default rule, backward "ROW|COL" schedules, and the candidate lists
// (every listed schedule is accepted back, no duplicates, thresholds inside the degree range).
#include "test_util.hpp"

#include "default_rule.hpp"
#include "error.hpp"
#include "graph.hpp"
#include "graph_io.hpp"
#include "ops.hpp"
#include "schedule.hpp"
#include "solver.hpp"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace dfgnn::test;
using dfgnn::Schedule;
using dfgnn::SolverId;

namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

// Result of dfgnnGetSchedule: status, text (on success) and the last error message (on failure).
struct ScheduleResult {
  dfgnn_status_t status;
  std::string text;
  std::string message;
};

ScheduleResult get_schedule(dfgnn_context_t ctx, dfgnn_graph_t g, const dfgnn_op_t& op, dfgnn_direction_t dir,
                            const char* forced) {
  size_t length = 0;
  dfgnn_status_t s = dfgnnGetSchedule(ctx, g, &op, dir, forced, nullptr, 0, &length);
  if (s != DFGNN_STATUS_SUCCESS) return {s, "", dfgnnGetLastErrorMessage()};
  std::string text(length + 1, '\0');
  s = dfgnnGetSchedule(ctx, g, &op, dir, forced, text.data(), text.size(), &length);
  if (s != DFGNN_STATUS_SUCCESS) return {s, "", dfgnnGetLastErrorMessage()};
  text.resize(length);
  return {s, text, ""};
}

std::vector<std::string> list_schedules(dfgnn_context_t ctx, dfgnn_graph_t g, const dfgnn_op_t& op, int pass) {
  size_t length = 0;
  EXPECT_EQ(dfgnnListSchedules(ctx, g, &op, pass, nullptr, 0, &length), DFGNN_STATUS_SUCCESS)
      << dfgnnGetLastErrorMessage();
  std::string text(length + 1, '\0');
  EXPECT_EQ(dfgnnListSchedules(ctx, g, &op, pass, text.data(), text.size(), &length), DFGNN_STATUS_SUCCESS)
      << dfgnnGetLastErrorMessage();
  text.resize(length);
  return split_lines(text);
}

// A star: node 0 receives `hub` in-edges from nodes 1..hub, every other node one in-edge from its
// predecessor. CSR max degree = hub; CSC (out-degree) max = 2.
GraphPtr star_graph(dfgnn_context_t ctx, int64_t hub) {
  const int64_t n = hub + 1;
  std::vector<int64_t> src, dst;
  for (int64_t j = 1; j <= hub; ++j) src.push_back(j), dst.push_back(0);
  for (int64_t i = 1; i < n; ++i) src.push_back(i - 1), dst.push_back(i);
  return graph_from_edges(ctx, n, src, dst);
}

GraphPtr small_graph(dfgnn_context_t ctx) { return random_graph(ctx, 64, 6, 7); }

GraphPtr planted_hubs(dfgnn_context_t ctx, int64_t n, int32_t avg, int32_t hubs, int64_t hub_degree, uint64_t seed) {
  dfgnn_graph_t g = nullptr;
  EXPECT_EQ(dfgnnGraphCreatePlantedHubs(ctx, n, avg, hubs, hub_degree, seed, nullptr, &g), DFGNN_STATUS_SUCCESS)
      << dfgnnGetLastErrorMessage();
  return GraphPtr(g);
}

dfgnn_fingerprint_t fingerprint_of(dfgnn_graph_t g) {
  dfgnn_fingerprint_t fp{};
  EXPECT_EQ(dfgnnGraphGetFingerprint(g, &fp), DFGNN_STATUS_SUCCESS);
  return fp;
}

// Out-degree (CSC) maximum of a graph, via the host CSC arrays.
int64_t max_out_degree(dfgnn_graph_t g) {
  int64_t n = 0, e = 0;
  EXPECT_EQ(dfgnnGraphGetSize(g, &n, &e), DFGNN_STATUS_SUCCESS);
  const int32_t* ptr = nullptr;
  EXPECT_EQ(dfgnnGraphGetCsc(g, DFGNN_MEMORY_HOST, &ptr, nullptr, nullptr), DFGNN_STATUS_SUCCESS);
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max<int64_t>(m, ptr[i + 1] - ptr[i]);
  return m;
}

// Internal graph with planted hubs (same generator as dfgnnGraphCreatePlantedHubs).
std::unique_ptr<dfgnn::Graph> internal_planted(int64_t n, int32_t avg, int32_t hubs, int64_t hub_degree,
                                               uint64_t seed) {
  const dfgnn::EdgeList e = dfgnn::generate_planted_hubs(n, avg, hubs, hub_degree, seed);
  return dfgnn::Graph::from_coo(e.num_nodes, e.num_edges(), e.edge_index.data(), DFGNN_INDEX_INT64,
                                dfgnnGraphDefaultOptions());
}

Schedule make(SolverId solver, int lanes, int groups, int team, int vec, int mid, int threshold, int chunk) {
  Schedule s;
  s.solver = solver;
  s.lanes = lanes;
  s.groups = groups;
  s.team = team;
  s.vec = vec;
  s.mid = mid;
  s.threshold = threshold;
  s.chunk = chunk;
  return s;
}

}  // namespace

// ---------------------------------------------------------------- text form

TEST(Schedule, ToStringListsEveryFieldInOrder) {
  EXPECT_EQ(dfgnn::to_string(make(SolverId::HubSplit, 32, 8, 1, 4, 0, 1024, 512)),
            "hub_split:lanes=32,groups=8,team=1,vec=4,mid=0,threshold=1024,chunk=512");
  EXPECT_EQ(dfgnn::to_string(Schedule{}), "subwarp:lanes=32,groups=8,team=1,vec=1,mid=0,threshold=0,chunk=0");
}

TEST(Schedule, RoundTripEverySolver) {
  const std::vector<Schedule> cases{
      make(SolverId::Subwarp, 8, 32, 1, 2, 0, 0, 0),
      make(SolverId::BlockRow, 16, 4, 2, 8, 0, 0, 0),
      make(SolverId::HubSplit, 4, 64, 1, 1, 0, 256, 128),
      make(SolverId::Hybrid, 16, 16, 1, 4, 32, 2048, 512),
      make(SolverId::EdgeBalanced, 16, 32, 1, 4, 0, 0, 2048),
      // Values the parser must carry even where a solver would reject them.
      make(SolverId::Hybrid, 5, -3, 7, 3, 2147483647, -2147483647 - 1, 0),
  };
  for (const Schedule& s : cases) {
    const std::string text = dfgnn::to_string(s);
    SCOPED_TRACE(text);
    const Schedule back = dfgnn::parse_schedule(text);
    EXPECT_EQ(back, s);
    EXPECT_EQ(dfgnn::to_string(back), text);
  }
  // Every solver has a name that parses back to its id.
  for (const dfgnn::Solver* solver : dfgnn::all_solvers()) {
    const Schedule s = dfgnn::parse_schedule(dfgnn::solver_name(solver->id()));
    EXPECT_EQ(s.solver, solver->id());
    EXPECT_EQ(dfgnn::find_solver(solver->id()), solver);
  }
  EXPECT_EQ(dfgnn::all_solvers().size(), 5u);
}

TEST(Schedule, ParseKeepsDefaultsOfOmittedFieldsInAnyOrder) {
  const Schedule s = dfgnn::parse_schedule("hub_split:chunk=64,lanes=8");
  Schedule expected;
  expected.solver = SolverId::HubSplit;
  expected.lanes = 8;
  expected.chunk = 64;
  EXPECT_EQ(s, expected);
  EXPECT_EQ(dfgnn::parse_schedule("block_row"), make(SolverId::BlockRow, 32, 8, 1, 1, 0, 0, 0));
  EXPECT_EQ(dfgnn::parse_schedule("subwarp:"), Schedule{});
}

TEST(Schedule, ParseErrorsNameTheProblem) {
  struct Case {
    const char* text;
    const char* needle;
  };
  const Case cases[] = {
      {"warp:lanes=32", "unknown solver 'warp'"},
      {"", "unknown solver ''"},
      {"Subwarp:lanes=32", "unknown solver 'Subwarp'"},
      {"subwarp:lanez=32", "unknown field 'lanez'"},
      {"subwarp:lanes=4,lanes=16", "field 'lanes' is given twice"},  // issue 15: the last one won
      {"subwarp:lanes=32,=4", "unknown field ''"},
      {"subwarp:lanes=abc", "lanes = 'abc' is not an integer"},
      {"subwarp:lanes=4x", "lanes = '4x' is not an integer"},
      {"subwarp:lanes=", "lanes = '' is not an integer"},
      {"subwarp:lanes=1.5", "is not an integer"},
      {"subwarp:lanes=+4", "is not an integer"},
      {"subwarp:lanes= 4", "is not an integer"},
      {"subwarp:lanes=99999999999", "is not an integer"},
      {"subwarp:lanes", "'lanes' is not name=value"},
      {"subwarp:lanes=32,,vec=1", "'' is not name=value"},
      {"subwarp:lanes=32;vec=1", "is not an integer"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    try {
      dfgnn::parse_schedule(c.text);
      ADD_FAILURE() << "parsed without error";
    } catch (const dfgnn::Error& e) {
      EXPECT_EQ(e.status(), DFGNN_STATUS_PARSE_ERROR);
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string("'") + c.text + "'"), std::string::npos)
          << "message should quote the schedule: " << e.what();
    }
  }
}

TEST(Schedule, ParseErrorsThroughTheCApi) {
  auto ctx = make_context();
  auto g = small_graph(ctx.get());
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 32);
  struct Case {
    const char* text;
    const char* needle;
  };
  const Case cases[] = {
      {"nosuch:lanes=32", "unknown solver 'nosuch'"},
      {"subwarp:lanes=32,width=4", "unknown field 'width'"},
      {"subwarp:lanes=thirty", "lanes = 'thirty' is not an integer"},
      {"subwarp:groups=8.0", "groups = '8.0' is not an integer"},
      {"subwarp:lanes=32,vec", "'vec' is not name=value"},
  };
  for (const Case& c : cases) {
    for (dfgnn_direction_t dir : {DFGNN_FORWARD, DFGNN_BACKWARD}) {
      SCOPED_TRACE(std::string(c.text) + (dir == DFGNN_FORWARD ? " forward" : " backward"));
      const ScheduleResult r = get_schedule(ctx.get(), g.get(), op, dir, c.text);
      EXPECT_EQ(r.status, DFGNN_STATUS_PARSE_ERROR) << r.text;
      EXPECT_NE(r.message.find(c.needle), std::string::npos) << r.message;
      // The other entry points that take a schedule report the same.
      size_t bytes = 0;
      EXPECT_EQ(dfgnnGetWorkspaceSize(ctx.get(), g.get(), &op, dir, c.text, &bytes), DFGNN_STATUS_PARSE_ERROR);
      EXPECT_NE(std::string(dfgnnGetLastErrorMessage()).find(c.needle), std::string::npos);
      EXPECT_EQ(dfgnnCompile(ctx.get(), g.get(), &op, dir, c.text, 90), DFGNN_STATUS_PARSE_ERROR);
    }
  }
  uint64_t compiles = 1;
  DFGNN_ASSERT_OK(dfgnnGetCacheCounters(ctx.get(), &compiles, nullptr, nullptr));
  EXPECT_EQ(compiles, 0u) << "a malformed schedule must not reach NVRTC";
}

// ---------------------------------------------------------------- validity

TEST(Schedule, InvalidSchedulesNameTheReason) {
  auto ctx = make_context();
  auto g = small_graph(ctx.get());
  struct Case {
    dfgnn_dtype_t dtype;
    int dim;
    const char* text;
    const char* needle;
  };
  const Case cases[] = {
      {DFGNN_DTYPE_FLOAT32, 32, "subwarp:lanes=5,groups=8,vec=1", "lanes = 5 is not 4, 8, 16 or 32"},
      {DFGNN_DTYPE_FLOAT32, 32, "subwarp:lanes=64,groups=4,vec=1", "lanes = 64 is not 4, 8, 16 or 32"},
      {DFGNN_DTYPE_FLOAT32, 32, "subwarp:lanes=0,groups=8,vec=1", "lanes = 0 is not"},
      {DFGNN_DTYPE_FLOAT32, 48, "subwarp:lanes=32,groups=8,vec=3", "vec = 3 is not 1, 2, 4 or 8"},
      {DFGNN_DTYPE_FLOAT32, 32, "subwarp:lanes=32,groups=8,vec=0", "vec = 0 is not 1, 2, 4 or 8"},
      {DFGNN_DTYPE_FLOAT16, 32, "subwarp:lanes=32,groups=8,vec=16", "vec = 16 is not 1, 2, 4 or 8"},
      {DFGNN_DTYPE_FLOAT32, 32, "subwarp:lanes=32,groups=8,vec=8", "vec = 8 float32 values exceed a 16-byte load"},
      {DFGNN_DTYPE_FLOAT32, 6, "subwarp:lanes=4,groups=64,vec=4", "vec = 4 does not divide D = 6"},
      {DFGNN_DTYPE_BFLOAT16, 12, "subwarp:lanes=4,groups=64,vec=8", "vec = 8 does not divide D = 12"},
      {DFGNN_DTYPE_FLOAT32, 32, "subwarp:lanes=4,groups=3,vec=1", "groups = 3 of 4 lanes is not a block"},
      {DFGNN_DTYPE_FLOAT32, 32, "subwarp:lanes=32,groups=64,vec=1", "groups = 64 of 32 lanes is not a block"},
      {DFGNN_DTYPE_FLOAT32, 32, "subwarp:lanes=32,groups=0,vec=1", "groups = 0 of 32 lanes"},
      // groups * lanes wrapped to -32 and passed (found by tests/fuzz/fuzz_schedule).
      {DFGNN_DTYPE_FLOAT32, 32, "subwarp:lanes=32,groups=2147483647,vec=1", "groups = 2147483647 of 32 lanes"},
      {DFGNN_DTYPE_FLOAT32, 32, "block_row:lanes=32,groups=4,team=3,vec=4", "team = 3 does not divide groups = 4"},
      {DFGNN_DTYPE_FLOAT32, 32, "block_row:lanes=32,groups=4,team=1,vec=4", "block_row schedules have team >= 2"},
      {DFGNN_DTYPE_FLOAT32, 32, "block_row:lanes=32,groups=4,team=2,vec=4,threshold=64",
       "block_row schedules take no mid/threshold/chunk"},
      {DFGNN_DTYPE_FLOAT32, 2048, "block_row:lanes=32,groups=32,team=2,vec=4", "team merge needs"},
      {DFGNN_DTYPE_FLOAT32, 32, "subwarp:lanes=8,groups=32,vec=4,threshold=64",
       "subwarp schedules take no mid/threshold/chunk"},
      {DFGNN_DTYPE_FLOAT32, 32, "subwarp:lanes=8,groups=32,vec=4,mid=8", "subwarp schedules take no mid/threshold/chunk"},
      {DFGNN_DTYPE_FLOAT32, 32, "subwarp:lanes=8,groups=32,team=2,vec=4", "subwarp schedules have team = 1"},
      {DFGNN_DTYPE_FLOAT32, 32, "hub_split:lanes=8,groups=32,vec=4,threshold=64,chunk=0",
       "hub_split needs threshold >= 1 and chunk >= 1"},
      {DFGNN_DTYPE_FLOAT32, 32, "hub_split:lanes=8,groups=32,vec=4,threshold=0,chunk=64",
       "hub_split needs threshold >= 1 and chunk >= 1"},
      {DFGNN_DTYPE_FLOAT32, 32, "hub_split:lanes=8,groups=32,vec=4,mid=4,threshold=64,chunk=64",
       "hub_split schedules take no mid"},
      {DFGNN_DTYPE_FLOAT32, 32, "hub_split:lanes=8,groups=32,team=2,vec=4,threshold=64,chunk=64",
       "hub_split schedules have team = 1"},
      {DFGNN_DTYPE_FLOAT32, 32, "hybrid:lanes=32,groups=8,vec=4,mid=32,threshold=2048,chunk=512",
       "hybrid schedules use fewer than 32 lanes"},
      {DFGNN_DTYPE_FLOAT32, 32, "hybrid:lanes=8,groups=32,vec=4,mid=64,threshold=64,chunk=512",
       "hybrid needs 1 <= mid < threshold and chunk >= 1"},
      {DFGNN_DTYPE_FLOAT32, 32, "hybrid:lanes=8,groups=32,vec=4,mid=0,threshold=64,chunk=512",
       "hybrid needs 1 <= mid < threshold and chunk >= 1"},
      {DFGNN_DTYPE_FLOAT32, 32, "hybrid:lanes=8,groups=32,vec=4,mid=8,threshold=64,chunk=0",
       "hybrid needs 1 <= mid < threshold and chunk >= 1"},
      {DFGNN_DTYPE_FLOAT32, 32, "hybrid:lanes=8,groups=32,team=2,vec=4,mid=8,threshold=64,chunk=64",
       "hybrid schedules have team = 1"},
      {DFGNN_DTYPE_FLOAT32, 32, "edge_balanced:lanes=8,groups=32,vec=4,chunk=0", "edge_balanced needs chunk >= 1"},
      {DFGNN_DTYPE_FLOAT32, 32, "edge_balanced:lanes=8,groups=32,vec=4,threshold=64,chunk=512",
       "edge_balanced schedules take no mid/threshold"},
      {DFGNN_DTYPE_FLOAT32, 32, "edge_balanced:lanes=8,groups=32,team=2,vec=4,chunk=512",
       "edge_balanced schedules have team = 1"},
      {DFGNN_DTYPE_FLOAT32, 1024, "edge_balanced:lanes=32,groups=32,vec=4,chunk=512", "parked row pieces need"},
      {DFGNN_DTYPE_FLOAT32, 4096, "subwarp:lanes=4,groups=64,vec=4", "D = 4096 needs 1024 values per lane with 4 lanes (limit 64)"},
      {DFGNN_DTYPE_FLOAT32, 4096, "subwarp:lanes=4,groups=64,vec=1", "D = 4096 needs 1024 values per lane with 4 lanes"},
      {DFGNN_DTYPE_FLOAT32, 4096, "subwarp:lanes=32,groups=8,vec=4", "D = 4096 needs 128 values per lane with 32 lanes"},
      {DFGNN_DTYPE_FLOAT16, 512, "subwarp:lanes=4,groups=64,vec=8", "D = 512 needs 128 values per lane with 4 lanes"},
  };
  for (const Case& c : cases) {
    const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, c.dtype, 2, c.dim);
    for (dfgnn_direction_t dir : {DFGNN_FORWARD, DFGNN_BACKWARD}) {
      SCOPED_TRACE(std::string(c.text) + (dir == DFGNN_FORWARD ? " forward" : " backward") + " D=" + std::to_string(c.dim));
      const ScheduleResult r = get_schedule(ctx.get(), g.get(), op, dir, c.text);
      EXPECT_EQ(r.status, DFGNN_STATUS_INVALID_ARGUMENT) << r.text;
      EXPECT_NE(r.message.find(c.needle), std::string::npos) << r.message;
      // The message also names the schedule (in canonical form) and the pass.
      EXPECT_NE(r.message.find(dfgnn::to_string(dfgnn::parse_schedule(c.text))), std::string::npos) << r.message;
      EXPECT_NE(r.message.find(dir == DFGNN_FORWARD ? "forward" : "backward_"), std::string::npos) << r.message;
    }
  }
  uint64_t compiles = 1;
  DFGNN_ASSERT_OK(dfgnnGetCacheCounters(ctx.get(), &compiles, nullptr, nullptr));
  EXPECT_EQ(compiles, 0u);
}

TEST(Schedule, BoundaryCasesAreValid) {
  auto ctx = make_context();
  auto g = small_graph(ctx.get());
  struct Case {
    dfgnn_dtype_t dtype;
    int dim;
    const char* text;
  };
  const Case cases[] = {
      {DFGNN_DTYPE_FLOAT32, 2048, "subwarp:lanes=32,groups=8,vec=4"},   // exactly 64 values per lane
      {DFGNN_DTYPE_FLOAT32, 256, "subwarp:lanes=4,groups=64,vec=4"},    // 64 values per lane
      {DFGNN_DTYPE_FLOAT16, 64, "subwarp:lanes=8,groups=32,vec=8"},     // 16-byte load of f16
      {DFGNN_DTYPE_BFLOAT16, 8, "subwarp:lanes=4,groups=8,vec=8"},      // 32 threads: one warp
      {DFGNN_DTYPE_FLOAT32, 7, "subwarp:lanes=32,groups=32,vec=1"},     // 1024 threads
      {DFGNN_DTYPE_FLOAT32, 32, "block_row:lanes=16,groups=2,team=2,vec=4"},
      {DFGNN_DTYPE_FLOAT32, 32, "hub_split:lanes=8,groups=32,vec=4,threshold=1,chunk=1"},
      {DFGNN_DTYPE_FLOAT32, 32, "hybrid:lanes=4,groups=64,vec=4,mid=1,threshold=2,chunk=1"},
      {DFGNN_DTYPE_FLOAT32, 32, "edge_balanced:lanes=8,groups=128,vec=4,chunk=1"},  // 1024 threads, 1-edge rows
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_TRANSFORMER, c.dtype, 1, c.dim);
    const ScheduleResult r = get_schedule(ctx.get(), g.get(), op, DFGNN_FORWARD, c.text);
    ASSERT_EQ(r.status, DFGNN_STATUS_SUCCESS) << r.message;
    EXPECT_EQ(r.text, dfgnn::to_string(dfgnn::parse_schedule(c.text)));
  }
}

TEST(Schedule, EdgeBalancedCandidates) {
  // Blocks of 256 and 512 threads, 16, 64 or 256 edges per lane group (chunk = edges per group x
  // groups); the default (64 edges per group, 256 threads) is valid and among them.
  const auto owned = internal_planted(2000, 8, 2, 500, 3);
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_TRANSFORMER, DFGNN_DTYPE_FLOAT32, 2, 64);
  for (dfgnn::PassKind pass : {dfgnn::PassKind::Forward, dfgnn::PassKind::BackwardRow, dfgnn::PassKind::BackwardCol}) {
    const dfgnn::PassProblem p = dfgnn::pass_problem(*owned, op, pass, 4);
    const dfgnn::Solver* solver = dfgnn::find_solver(SolverId::EdgeBalanced);
    const Schedule fallback = solver->default_schedule(p);
    EXPECT_EQ(solver->invalid_reason(p, fallback), "") << dfgnn::to_string(fallback);
    EXPECT_EQ(fallback.lanes * fallback.groups, 256);
    EXPECT_EQ(fallback.chunk, 64 * fallback.groups);
    std::vector<std::pair<int32_t, int32_t>> shapes;  // (threads, edges per group)
    bool has_default = false;
    for (const Schedule& c : solver->enumerate(p)) {
      EXPECT_EQ(c.chunk % c.groups, 0) << dfgnn::to_string(c);
      shapes.emplace_back(c.lanes * c.groups, c.chunk / c.groups);
      has_default = has_default || c == fallback;
    }
    EXPECT_EQ(shapes, (std::vector<std::pair<int32_t, int32_t>>{{256, 16}, {256, 64}, {256, 256}, {512, 16}, {512, 64}, {512, 256}}));
    EXPECT_TRUE(has_default);
  }
}

TEST(Schedule, AlignmentLimitsVectorWidth) {
  // Only reachable through the internal API: the C API assumes any alignment for queries.
  const auto owned = internal_planted(2000, 8, 2, 500, 3);
  const dfgnn::Graph& graph = *owned;
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 32);
  const dfgnn::PassProblem p = dfgnn::pass_problem(graph, op, dfgnn::PassKind::Forward, 2);
  const Schedule s = dfgnn::parse_schedule("subwarp:lanes=8,groups=32,vec=4");
  try {
    dfgnn::require_valid(p, s);
    ADD_FAILURE() << "vec = 4 accepted with max_vec = 2";
  } catch (const dfgnn::Error& e) {
    EXPECT_EQ(e.status(), DFGNN_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("vec = 4 exceeds what the data's alignment allows (2)"), std::string::npos)
        << e.what();
  }
  // The default and every candidate respect the alignment.
  EXPECT_EQ(dfgnn::hand_rule_schedule(p).vec, 2);
  EXPECT_LE(dfgnn::default_schedule(p).vec, 2);
  for (const Schedule& c : dfgnn::enumerate_schedules(p)) EXPECT_LE(c.vec, 2) << dfgnn::to_string(c);
  // A solver refuses another solver's schedule (one that passes its own field checks).
  Schedule other = dfgnn::parse_schedule("subwarp:lanes=8,groups=32,vec=2,threshold=64,chunk=64");
  const std::string reason = dfgnn::find_solver(SolverId::HubSplit)->invalid_reason(p, other);
  EXPECT_NE(reason.find("belongs to solver subwarp, not hub_split"), std::string::npos) << reason;
}

// ---------------------------------------------------------------- default rule

// The hand rule (the fitted rule's fallback, DFGNN_DEFAULT_RULE=hand), through dispatch; the fitted
// rule itself: test_default_rule.cpp.
class HandRule {
 public:
  HandRule() {
    if (const char* v = std::getenv("DFGNN_DEFAULT_RULE")) old_ = v;
    setenv("DFGNN_DEFAULT_RULE", "hand", 1);
  }
  ~HandRule() {
    if (old_)
      setenv("DFGNN_DEFAULT_RULE", old_->c_str(), 1);
    else
      unsetenv("DFGNN_DEFAULT_RULE");
  }

 private:
  std::optional<std::string> old_;
};

TEST(Schedule, HandRuleIsSubwarpSizedToD) {
  HandRule hand;
  auto ctx = make_context();
  auto g = small_graph(ctx.get());
  struct Case {
    dfgnn_dtype_t dtype;
    int dim;
    const char* expected;
  };
  const Case cases[] = {
      {DFGNN_DTYPE_FLOAT32, 128, "subwarp:lanes=32,groups=8,team=1,vec=4,mid=0,threshold=0,chunk=0"},
      {DFGNN_DTYPE_FLOAT32, 256, "subwarp:lanes=32,groups=8,team=1,vec=4,mid=0,threshold=0,chunk=0"},
      {DFGNN_DTYPE_FLOAT32, 64, "subwarp:lanes=16,groups=16,team=1,vec=4,mid=0,threshold=0,chunk=0"},
      {DFGNN_DTYPE_FLOAT32, 16, "subwarp:lanes=4,groups=64,team=1,vec=4,mid=0,threshold=0,chunk=0"},
      {DFGNN_DTYPE_FLOAT32, 7, "subwarp:lanes=8,groups=32,team=1,vec=1,mid=0,threshold=0,chunk=0"},
      {DFGNN_DTYPE_FLOAT32, 6, "subwarp:lanes=4,groups=64,team=1,vec=2,mid=0,threshold=0,chunk=0"},
      {DFGNN_DTYPE_FLOAT32, 1, "subwarp:lanes=4,groups=64,team=1,vec=1,mid=0,threshold=0,chunk=0"},
      {DFGNN_DTYPE_FLOAT32, 33, "subwarp:lanes=32,groups=8,team=1,vec=1,mid=0,threshold=0,chunk=0"},
      {DFGNN_DTYPE_FLOAT16, 128, "subwarp:lanes=16,groups=16,team=1,vec=8,mid=0,threshold=0,chunk=0"},
      {DFGNN_DTYPE_FLOAT16, 64, "subwarp:lanes=8,groups=32,team=1,vec=8,mid=0,threshold=0,chunk=0"},
      {DFGNN_DTYPE_BFLOAT16, 12, "subwarp:lanes=4,groups=64,team=1,vec=4,mid=0,threshold=0,chunk=0"},
      {DFGNN_DTYPE_BFLOAT16, 1024, "subwarp:lanes=32,groups=8,team=1,vec=8,mid=0,threshold=0,chunk=0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.dim));
    const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_AGNN, c.dtype, 3, c.dim);
    const ScheduleResult f = get_schedule(ctx.get(), g.get(), op, DFGNN_FORWARD, nullptr);
    ASSERT_EQ(f.status, DFGNN_STATUS_SUCCESS) << f.message;
    EXPECT_EQ(f.text, c.expected);
    // An empty string also means dispatch.
    EXPECT_EQ(get_schedule(ctx.get(), g.get(), op, DFGNN_FORWARD, "").text, c.expected);
    const ScheduleResult b = get_schedule(ctx.get(), g.get(), op, DFGNN_BACKWARD, nullptr);
    ASSERT_EQ(b.status, DFGNN_STATUS_SUCCESS) << b.message;
    EXPECT_EQ(b.text, std::string(c.expected) + "|" + c.expected);
    // The default is accepted back when forced.
    EXPECT_EQ(get_schedule(ctx.get(), g.get(), op, DFGNN_FORWARD, f.text.c_str()).text, f.text);
    EXPECT_EQ(get_schedule(ctx.get(), g.get(), op, DFGNN_BACKWARD, b.text.c_str()).text, b.text);
  }
}

TEST(Schedule, HandRuleSwitchesToHubSplitAtTheSplitOfItsLaneWidth) {
  HandRule hand;
  auto ctx = make_context();
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 128);
  const std::string subwarp = "subwarp:lanes=32,groups=8,team=1,vec=4,mid=0,threshold=0,chunk=0";
  const std::string hub = "hub_split:lanes=32,groups=8,team=1,vec=4,mid=0,threshold=256,chunk=256";
  {
    auto g = star_graph(ctx.get(), 255);
    EXPECT_EQ(fingerprint_of(g.get()).max_degree, 255);
    EXPECT_EQ(get_schedule(ctx.get(), g.get(), op, DFGNN_FORWARD, nullptr).text, subwarp);
  }
  {
    auto g = star_graph(ctx.get(), 256);
    EXPECT_EQ(fingerprint_of(g.get()).max_degree, 256);
    EXPECT_EQ(get_schedule(ctx.get(), g.get(), op, DFGNN_FORWARD, nullptr).text, hub);
    // The column pass follows the CSC, whose out-degrees are at most 2: sub-warp there.
    EXPECT_EQ(max_out_degree(g.get()), 2);
    EXPECT_EQ(get_schedule(ctx.get(), g.get(), op, DFGNN_BACKWARD, nullptr).text, hub + "|" + subwarp);
  }
  {
    // The transpose: one node feeds 3000 others. Row pass sub-warp, column pass hub split.
    const int64_t n = 3001;
    std::vector<int64_t> src, dst;
    for (int64_t i = 1; i < n; ++i) src.push_back(0), dst.push_back(i);
    auto g = graph_from_edges(ctx.get(), n, src, dst);
    EXPECT_EQ(get_schedule(ctx.get(), g.get(), op, DFGNN_FORWARD, nullptr).text, subwarp);
    EXPECT_EQ(get_schedule(ctx.get(), g.get(), op, DFGNN_BACKWARD, nullptr).text, subwarp + "|" + hub);
  }
  {
    // Hub split sized to a small D keeps the sub-warp geometry: 2 heads of 16 fp16 channels, 2
    // lanes each, span a group of 4 lanes. Groups narrower than a warp split at 128 edges.
    auto g = star_graph(ctx.get(), 5000);
    const dfgnn_op_t small = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT16, 2, 16);
    EXPECT_EQ(get_schedule(ctx.get(), g.get(), small, DFGNN_FORWARD, nullptr).text,
              "hub_split:lanes=4,heads=2,groups=64,team=1,vec=8,mid=0,threshold=128,chunk=128");
    const dfgnn_op_t three = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT16, 3, 16);
    EXPECT_EQ(get_schedule(ctx.get(), g.get(), three, DFGNN_FORWARD, nullptr).text,
              "hub_split:lanes=4,groups=64,team=1,vec=8,mid=0,threshold=128,chunk=128");
  }
  {
    // The narrow groups' switch sits at 128: a 127-edge row runs whole, a 128-edge row is split.
    const dfgnn_op_t seven = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 7);
    auto below = star_graph(ctx.get(), 127);
    EXPECT_EQ(get_schedule(ctx.get(), below.get(), seven, DFGNN_FORWARD, nullptr).text.rfind("subwarp:lanes=8,", 0), 0u);
    auto at = star_graph(ctx.get(), 128);
    EXPECT_EQ(get_schedule(ctx.get(), at.get(), seven, DFGNN_FORWARD, nullptr).text,
              "hub_split:lanes=8,groups=32,team=1,vec=1,mid=0,threshold=128,chunk=128");
  }
}

// ---------------------------------------------------------------- backward "ROW|COL"

TEST(Schedule, BackwardRowAndColumnSchedules) {
  auto ctx = make_context();
  auto g = small_graph(ctx.get());
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_TRANSFORMER, DFGNN_DTYPE_FLOAT32, 2, 32);
  const std::string row = "subwarp:lanes=16,groups=16,team=1,vec=4,mid=0,threshold=0,chunk=0";
  const std::string col = "hub_split:lanes=8,groups=32,team=1,vec=2,mid=0,threshold=64,chunk=16";
  {
    const ScheduleResult r =
        get_schedule(ctx.get(), g.get(), op, DFGNN_BACKWARD, "subwarp:lanes=16,groups=16,vec=4|hub_split:lanes=8,groups=32,vec=2,threshold=64,chunk=16");
    ASSERT_EQ(r.status, DFGNN_STATUS_SUCCESS) << r.message;
    EXPECT_EQ(r.text, row + "|" + col);
  }
  {
    // One schedule serves both passes.
    const ScheduleResult r = get_schedule(ctx.get(), g.get(), op, DFGNN_BACKWARD, col.c_str());
    ASSERT_EQ(r.status, DFGNN_STATUS_SUCCESS) << r.message;
    EXPECT_EQ(r.text, col + "|" + col);
  }
  {
    // A forward takes one schedule: '|' is a parse error that says why.
    const ScheduleResult r = get_schedule(ctx.get(), g.get(), op, DFGNN_FORWARD, (row + "|" + col).c_str());
    EXPECT_EQ(r.status, DFGNN_STATUS_PARSE_ERROR);
    EXPECT_NE(r.message.find("'|'"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find("forward takes one"), std::string::npos) << r.message;
    size_t bytes = 0;
    EXPECT_EQ(dfgnnGetWorkspaceSize(ctx.get(), g.get(), &op, DFGNN_FORWARD, (row + "|" + col).c_str(), &bytes),
              DFGNN_STATUS_PARSE_ERROR);
  }
  {
    // The column half is validated for the column pass; errors name it.
    const ScheduleResult r = get_schedule(ctx.get(), g.get(), op, DFGNN_BACKWARD, (row + "|subwarp:lanes=5").c_str());
    EXPECT_EQ(r.status, DFGNN_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(r.message.find("backward_col"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find("lanes = 5"), std::string::npos) << r.message;
  }
  {
    const ScheduleResult r = get_schedule(ctx.get(), g.get(), op, DFGNN_BACKWARD, "subwarp:lanes=5|subwarp");
    EXPECT_EQ(r.status, DFGNN_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(r.message.find("backward_row"), std::string::npos) << r.message;
  }
  // Malformed halves.
  for (const std::string bad : {row + "|", "|" + col, row + "|" + col + "|" + col, row + "|nosuch"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(get_schedule(ctx.get(), g.get(), op, DFGNN_BACKWARD, bad.c_str()).status, DFGNN_STATUS_PARSE_ERROR);
  }
  // Bad directions are invalid arguments.
  EXPECT_EQ(get_schedule(ctx.get(), g.get(), op, static_cast<dfgnn_direction_t>(2), nullptr).status,
            DFGNN_STATUS_INVALID_ARGUMENT);
}

// ---------------------------------------------------------------- candidate lists

TEST(Schedule, ListedSchedulesAreAcceptedBackAndUnique) {
  auto ctx = make_context();
  auto g = planted_hubs(ctx.get(), 20000, 8, 3, 5000, 11);
  const dfgnn_fingerprint_t fp = fingerprint_of(g.get());
  const int64_t max_in = fp.max_degree, max_out = max_out_degree(g.get());
  ASSERT_GT(max_in, 2048);
  struct Config {
    dfgnn_model_t model;
    dfgnn_dtype_t dtype;
    int dim, heads;
  };
  const Config configs[] = {
      {DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 64, 4},
      {DFGNN_MODEL_TRANSFORMER, DFGNN_DTYPE_FLOAT16, 128, 1},
      {DFGNN_MODEL_AGNN, DFGNN_DTYPE_BFLOAT16, 7, 3},
      {DFGNN_MODEL_GATV2, DFGNN_DTYPE_FLOAT32, 1, 2},
  };
  for (const Config& c : configs) {
    const dfgnn_op_t op = dfgnnOpDefault(c.model, c.dtype, c.heads, c.dim);
    const std::string defaults = get_schedule(ctx.get(), g.get(), op, DFGNN_BACKWARD, nullptr).text;
    const size_t bar = defaults.find('|');
    ASSERT_NE(bar, std::string::npos);
    const std::string default_row = defaults.substr(0, bar), default_col = defaults.substr(bar + 1);
    for (int pass = 0; pass < 3; ++pass) {
      SCOPED_TRACE("model " + std::to_string(c.model) + " dtype " + std::to_string(c.dtype) + " D " +
                   std::to_string(c.dim) + " pass " + std::to_string(pass));
      const std::vector<std::string> listed = list_schedules(ctx.get(), g.get(), op, pass);
      ASSERT_FALSE(listed.empty());
      std::set<std::string> unique(listed.begin(), listed.end());
      EXPECT_EQ(unique.size(), listed.size()) << "duplicate candidates";
      std::set<SolverId> solvers;
      const int64_t max_degree = pass == 2 ? max_out : max_in;
      for (const std::string& text : listed) {
        SCOPED_TRACE(text);
        const Schedule s = dfgnn::parse_schedule(text);
        EXPECT_EQ(dfgnn::to_string(s), text);
        solvers.insert(s.solver);
        ScheduleResult r;
        if (pass == 0) {
          r = get_schedule(ctx.get(), g.get(), op, DFGNN_FORWARD, text.c_str());
          EXPECT_EQ(r.text, text);
        } else {
          const std::string forced = pass == 1 ? text + "|" + default_col : default_row + "|" + text;
          r = get_schedule(ctx.get(), g.get(), op, DFGNN_BACKWARD, forced.c_str());
          EXPECT_EQ(r.text, forced);
        }
        EXPECT_EQ(r.status, DFGNN_STATUS_SUCCESS) << r.message;
        if (s.solver == SolverId::HubSplit) {
          EXPECT_GE(s.threshold, 64);
          EXPECT_LT(s.threshold, max_degree);
          EXPECT_LE(s.chunk, s.threshold);
        }
        if (s.solver == SolverId::Hybrid && s.threshold != 2048) {  // 2048: the solver's default
          EXPECT_GE(s.threshold, 64);
          EXPECT_LT(s.threshold, max_degree);
        }
      }
      // Every solver applies to a planted-hub graph.
      EXPECT_EQ(solvers.size(), 5u);
      // The listing is in the solvers' order.
      std::vector<int> order;
      for (const std::string& text : listed) order.push_back(static_cast<int>(dfgnn::parse_schedule(text).solver));
      EXPECT_TRUE(std::is_sorted(order.begin(), order.end()));
    }
  }
  // Bad pass numbers.
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 8);
  size_t length = 0;
  EXPECT_EQ(dfgnnListSchedules(ctx.get(), g.get(), &op, 3, nullptr, 0, &length), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(dfgnnListSchedules(ctx.get(), g.get(), &op, -1, nullptr, 0, &length), DFGNN_STATUS_INVALID_ARGUMENT);
}

// Thresholds stay inside [64, max degree) on graphs whose max degree is close to a candidate
// (a candidate rounded up to a power of two must not pass the max degree).
TEST(Schedule, ThresholdCandidatesLieBelowMaxDegree) {
  for (int64_t hub_degree : {130, 200, 300, 700, 1500, 1999, 3000, 5000}) {
    for (int64_t n : {2000, 20000}) {
      if (hub_degree >= n) continue;
      const auto owned = internal_planted(n, 8, 3, hub_degree, 5);
      const dfgnn::Graph& graph = *owned;
      const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 32);
      for (dfgnn::PassKind pass : {dfgnn::PassKind::Forward, dfgnn::PassKind::BackwardCol}) {
        const dfgnn::PassProblem p = dfgnn::pass_problem(graph, op, pass, 4);
        SCOPED_TRACE("hub degree " + std::to_string(hub_degree) + " n " + std::to_string(n) + " max degree " +
                     std::to_string(p.fingerprint->max_degree) + " mean " + std::to_string(p.fingerprint->mean_degree) +
                     " " + dfgnn::pass_name(pass));
        for (const Schedule& s : dfgnn::enumerate_schedules(p)) {
          if (s.solver != SolverId::HubSplit && !(s.solver == SolverId::Hybrid && s.threshold != 2048)) continue;
          EXPECT_GE(s.threshold, 64) << dfgnn::to_string(s);
          EXPECT_LT(s.threshold, p.fingerprint->max_degree) << dfgnn::to_string(s);
        }
      }
    }
  }
}

// Geometry helpers against hand-worked values (they size registers, shared memory and partials,
// so they must match kernel_templates: Geo<...>::R, and NS + NV * D of each pass in passes.cuh /
// variants.cuh).
TEST(Schedule, GeometryHelpers) {
  EXPECT_EQ(dfgnn::lanes_for_dim(1, 1), 4);
  EXPECT_EQ(dfgnn::lanes_for_dim(7, 1), 8);
  EXPECT_EQ(dfgnn::lanes_for_dim(128, 4), 32);
  EXPECT_EQ(dfgnn::lanes_for_dim(64, 4), 16);
  EXPECT_EQ(dfgnn::lanes_for_dim(4096, 1), 32);
  EXPECT_EQ(dfgnn::registers_per_lane(128, 32, 4), 4);
  EXPECT_EQ(dfgnn::registers_per_lane(7, 8, 1), 1);
  EXPECT_EQ(dfgnn::registers_per_lane(33, 32, 1), 2);
  EXPECT_EQ(dfgnn::registers_per_lane(36, 4, 4), 12);  // C = ceil(36 / 16) = 3 chunks of 4
  EXPECT_EQ(dfgnn::registers_per_lane(2048, 32, 4), 64);
  struct Case {
    dfgnn_model_t model;
    int forward, row, col;  // NS + NV * D with D = 10
  };
  const Case cases[] = {
      {DFGNN_MODEL_GAT, 2 + 10, 1, 1 + 10},
      {DFGNN_MODEL_GATV2, 2 + 10, 20, 20},
      {DFGNN_MODEL_TRANSFORMER, 2 + 10, 10, 20},
      {DFGNN_MODEL_AGNN, 2 + 10, 2 + 10, 1 + 20},
  };
  for (const Case& c : cases) {
    const dfgnn_op_t op = dfgnnOpDefault(c.model, DFGNN_DTYPE_FLOAT32, 3, 10);
    EXPECT_EQ(dfgnn::state_floats(op, dfgnn::PassKind::Forward), c.forward) << c.model;
    EXPECT_EQ(dfgnn::state_floats(op, dfgnn::PassKind::BackwardRow), c.row) << c.model;
    EXPECT_EQ(dfgnn::state_floats(op, dfgnn::PassKind::BackwardCol), c.col) << c.model;
  }
}

// Above D = 2048 (64 values per lane at 32 lanes x 16-byte vectors) no schedule is valid: dispatch
// must then report DFGNN_STATUS_NOT_SUPPORTED, and whatever it does return must be accepted back.
TEST(Schedule, DefaultIsValidOrNotSupportedAboveD2048) {
  auto ctx = make_context();
  auto g = small_graph(ctx.get());
  for (int dim : {2056, 4096}) {
    SCOPED_TRACE(dim);
    const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, dim);
    const ScheduleResult r = get_schedule(ctx.get(), g.get(), op, DFGNN_FORWARD, nullptr);
    if (r.status == DFGNN_STATUS_NOT_SUPPORTED) continue;
    ASSERT_EQ(r.status, DFGNN_STATUS_SUCCESS) << r.message;
    const ScheduleResult back = get_schedule(ctx.get(), g.get(), op, DFGNN_FORWARD, r.text.c_str());
    EXPECT_EQ(back.status, DFGNN_STATUS_SUCCESS) << back.message;
  }
}

TEST(Schedule, SchedulePairTextInOnePlace) {
  const std::string row = "subwarp:lanes=16,groups=16,team=1,vec=4,mid=0,threshold=0,chunk=0";
  const std::string col = "hub_split:lanes=8,groups=32,team=1,vec=2,mid=0,threshold=64,chunk=16";
  const dfgnn::SchedulePair pair = dfgnn::parse_schedules(DFGNN_BACKWARD, row + "|" + col);
  EXPECT_EQ(pair.row, dfgnn::parse_schedule(row));
  EXPECT_EQ(pair.col, dfgnn::parse_schedule(col));
  EXPECT_EQ(dfgnn::to_string(DFGNN_BACKWARD, pair), row + "|" + col);
  // One schedule serves both passes of a backward; a forward prints its row schedule alone.
  const dfgnn::SchedulePair both = dfgnn::parse_schedules(DFGNN_BACKWARD, col);
  EXPECT_EQ(both.row, both.col);
  EXPECT_EQ(dfgnn::to_string(DFGNN_FORWARD, dfgnn::parse_schedules(DFGNN_FORWARD, row)), row);
  try {
    dfgnn::parse_schedules(DFGNN_FORWARD, row + "|" + col);
    ADD_FAILURE() << "a forward took two schedules";
  } catch (const dfgnn::Error& e) {
    EXPECT_EQ(e.status(), DFGNN_STATUS_PARSE_ERROR);
    EXPECT_NE(std::string(e.what()).find("forward takes one"), std::string::npos) << e.what();
  }
  // dfgnnCompile without a graph parses the same way (it took the text before '|' for a forward).
  auto ctx = make_context();
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_TRANSFORMER, DFGNN_DTYPE_FLOAT32, 2, 32);
  EXPECT_EQ(dfgnnCompile(ctx.get(), nullptr, &op, DFGNN_FORWARD, (row + "|" + col).c_str(), 90),
            DFGNN_STATUS_PARSE_ERROR);
}

// ---------------------------------------------------------------- groups spanning several heads

// Many heads of few channels: a group's lanes span heads as they span the channels of one wide head
// (H = 8, D = 8 fills 16 lanes, as H = 1, D = 64 does), each head a segment of lanes_per_head lanes.
TEST(Schedule, GroupsSpanHeadsOfFewChannels) {
  EXPECT_EQ(dfgnn::lanes_per_head_for_dim(8, 4), 2);
  EXPECT_EQ(dfgnn::lanes_per_head_for_dim(8, 8), 1);
  EXPECT_EQ(dfgnn::lanes_per_head_for_dim(16, 4), 4);
  EXPECT_EQ(dfgnn::lanes_per_head_for_dim(7, 1), 8);
  EXPECT_EQ(dfgnn::lanes_per_head_for_dim(1, 1), 1);
  EXPECT_EQ(dfgnn::lanes_per_head_for_dim(4096, 1), 32);
  struct Heads {
    int heads, dim, vec, expected;
  };
  const Heads heads_cases[] = {
      {8, 8, 4, 8},    // 8 segments of 2 lanes: 16 lanes
      {8, 8, 8, 8},    // bf16: 8 segments of 1 lane
      {4, 16, 4, 4},   // 16 lanes
      {8, 16, 4, 8},   // 32 lanes, a whole warp
      {16, 16, 4, 8},  // at most a warp: 8 of the 16 heads
      {2, 32, 4, 2},   // 8 lanes a head: 16 lanes, as H = 1, D = 64 has
      {8, 32, 4, 4},   // a warp of 4 heads
      {2, 64, 4, 1},   // D > 32 fills lanes by itself
      {3, 8, 4, 1},    // no power of two > 1 divides H = 3
      {6, 8, 4, 2},    // 2 divides 6
      {8, 7, 1, 4},    // 8 lanes a head (7 channels, 1 idle): 4 heads fill a warp
      {1, 8, 4, 1},    // one head
  };
  for (const Heads& c : heads_cases) {
    const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, c.heads, c.dim);
    EXPECT_EQ(dfgnn::default_group_heads(op, c.vec), c.expected) << "H " << c.heads << " D " << c.dim << " vec " << c.vec;
  }

  // The text names heads only when a group spans more than one: texts from before the field read back the same.
  Schedule s = make(SolverId::Subwarp, 16, 16, 1, 4, 0, 0, 0);
  s.heads = 8;
  EXPECT_EQ(dfgnn::to_string(s), "subwarp:lanes=16,heads=8,groups=16,team=1,vec=4,mid=0,threshold=0,chunk=0");
  EXPECT_EQ(dfgnn::parse_schedule(dfgnn::to_string(s)), s);
  EXPECT_EQ(dfgnn::parse_schedule("subwarp:lanes=16,groups=16,vec=4").heads, 1);
  EXPECT_EQ(dfgnn::to_string(dfgnn::parse_schedule("subwarp:lanes=16,heads=1,groups=16,vec=4")),
            "subwarp:lanes=16,groups=16,team=1,vec=4,mid=0,threshold=0,chunk=0");

  // The default and the hand rule span heads for H = 8, D = 8 (fp32: 16 lanes of 2 per head; bf16: 8 of 1).
  HandRule hand;
  auto ctx = make_context();
  auto g = small_graph(ctx.get());
  struct Default {
    dfgnn_dtype_t dtype;
    int heads, dim;
    const char* expected;
  };
  const Default defaults[] = {
      {DFGNN_DTYPE_FLOAT32, 8, 8, "subwarp:lanes=16,heads=8,groups=16,team=1,vec=4,mid=0,threshold=0,chunk=0"},
      {DFGNN_DTYPE_BFLOAT16, 8, 8, "subwarp:lanes=8,heads=8,groups=32,team=1,vec=8,mid=0,threshold=0,chunk=0"},
      {DFGNN_DTYPE_FLOAT32, 4, 16, "subwarp:lanes=16,heads=4,groups=16,team=1,vec=4,mid=0,threshold=0,chunk=0"},
      {DFGNN_DTYPE_FLOAT32, 2, 4, "subwarp:lanes=4,heads=2,groups=64,team=1,vec=4,mid=0,threshold=0,chunk=0"},
      {DFGNN_DTYPE_FLOAT32, 2, 32, "subwarp:lanes=16,heads=2,groups=16,team=1,vec=4,mid=0,threshold=0,chunk=0"},
      {DFGNN_DTYPE_FLOAT32, 2, 64, "subwarp:lanes=16,groups=16,team=1,vec=4,mid=0,threshold=0,chunk=0"},
  };
  for (const Default& c : defaults) {
    const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_TRANSFORMER, c.dtype, c.heads, c.dim);
    const ScheduleResult f = get_schedule(ctx.get(), g.get(), op, DFGNN_FORWARD, nullptr);
    ASSERT_EQ(f.status, DFGNN_STATUS_SUCCESS) << f.message;
    EXPECT_EQ(f.text, c.expected) << "H " << c.heads << " D " << c.dim;
  }

  // Validity: heads is a power of two dividing both lanes and H; registers count per head's lanes.
  struct Invalid {
    int heads, dim;
    const char* text;
    const char* needle;
  };
  const Invalid invalid[] = {
      {8, 8, "subwarp:lanes=16,heads=3,groups=16,vec=4", "heads = 3 is not a power of two dividing lanes = 16 and H = 8"},
      {8, 8, "subwarp:lanes=4,heads=8,groups=64,vec=4", "heads = 8 is not a power of two dividing lanes = 4"},
      {4, 8, "subwarp:lanes=16,heads=8,groups=16,vec=4", "and H = 4"},
      {8, 8, "subwarp:lanes=16,heads=0,groups=16,vec=4", "heads = 0 is not"},
      {8, 512, "subwarp:lanes=32,heads=8,groups=8,vec=4", "D = 512 needs 128 values per lane with 4 lanes per head"},
  };
  for (const Invalid& c : invalid) {
    const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, c.heads, c.dim);
    const ScheduleResult r = get_schedule(ctx.get(), g.get(), op, DFGNN_FORWARD, c.text);
    EXPECT_EQ(r.status, DFGNN_STATUS_INVALID_ARGUMENT) << c.text;
    EXPECT_NE(r.message.find(c.needle), std::string::npos) << r.message;
  }
  // Team merges keep one state per (group, head): 32 groups x 8 heads x (2 + 64) floats x 4 bytes
  // = 67584 bytes, over 48 KiB; with 2 heads a group, 4 groups take 2112.
  const dfgnn_op_t wide = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 8, 64);
  const ScheduleResult team = get_schedule(ctx.get(), g.get(), wide, DFGNN_FORWARD, "block_row:lanes=32,heads=2,groups=4,team=2,vec=4");
  EXPECT_EQ(team.status, DFGNN_STATUS_SUCCESS) << team.message;
  const ScheduleResult big = get_schedule(ctx.get(), g.get(), wide, DFGNN_FORWARD, "block_row:lanes=32,heads=8,groups=32,team=2,vec=4");
  EXPECT_EQ(big.status, DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(big.message.find("team merge needs 67584 bytes of shared memory"), std::string::npos) << big.message;
}

// The candidate lists hold spanning groups for many heads of few channels, and none for one head.
TEST(Schedule, CandidatesSpanHeadsOnlyWhereTheyFit) {
  auto ctx = make_context();
  auto g = planted_hubs(ctx.get(), 3000, 4, 2, 600, 3);
  auto spans = [](const std::string& text) { return text.find(",heads=") != std::string::npos; };
  for (dfgnn_dtype_t dtype : {DFGNN_DTYPE_FLOAT32, DFGNN_DTYPE_BFLOAT16}) {
    const dfgnn_op_t many = dfgnnOpDefault(DFGNN_MODEL_GAT, dtype, 8, 8);
    for (int pass = 0; pass < 3; ++pass) {
      std::set<std::string> solvers_spanning;
      for (const std::string& text : list_schedules(ctx.get(), g.get(), many, pass))
        if (spans(text)) solvers_spanning.insert(text.substr(0, text.find(':')));
      // block_row splits one head's long row; every other solver races spanning groups.
      EXPECT_EQ(solvers_spanning, (std::set<std::string>{"subwarp", "hub_split", "hybrid", "edge_balanced"})) << pass;
    }
    for (const dfgnn_op_t& op : {dfgnnOpDefault(DFGNN_MODEL_GAT, dtype, 1, 64), dfgnnOpDefault(DFGNN_MODEL_GAT, dtype, 4, 64),
                                 dfgnnOpDefault(DFGNN_MODEL_GAT, dtype, 3, 8)})
      for (int pass = 0; pass < 3; ++pass)
        for (const std::string& text : list_schedules(ctx.get(), g.get(), op, pass)) EXPECT_FALSE(spans(text)) << text;
  }
}

// ---------------------------------------------------------------- text and validity at the limits
namespace dfgnn {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
using test::make_context;

// The lane geometry holds up to D = 2^31 - 1 (64-bit steps: no hang, no wrap).
TEST(Schedule, LaneArithmeticHoldsUpToInt32Max) {
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
  for (int32_t vec : {1, 2, 4, 8}) {
    EXPECT_EQ(lanes_for_dim(kMax, vec), 32) << vec;
    EXPECT_EQ(lanes_for_dim((1 << 30) + 1, vec), 32) << vec;
  }
  EXPECT_EQ(registers_per_lane(kMax, 32, 1), 67108864);  // ceil((2^31 - 1) / 32)
  EXPECT_EQ(registers_per_lane(kMax, 32, 8), 67108864);  // ceil((2^31 - 1) / 256) * 8
  EXPECT_EQ(lanes_for_dim(3, 1), 4);
  EXPECT_EQ(lanes_for_dim(64, 4), 16);
}

TEST(Schedule, RepeatedScheduleFieldIsParseError) {
  try {
    parse_schedule("subwarp:lanes=32,lanes=4");
    ADD_FAILURE() << "accepted a repeated field";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), DFGNN_STATUS_PARSE_ERROR);
    EXPECT_TRUE(contains(e.what(), "field 'lanes' is given twice")) << e.what();
  }
  auto ctx = make_context();
  auto g = test::graph_from_edges(ctx.get(), 4, {0, 1, 2, 3}, {1, 2, 3, 0});
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 32);
  char buffer[256];
  size_t length = 0;
  EXPECT_EQ(dfgnnGetSchedule(ctx.get(), g.get(), &op, DFGNN_FORWARD, "subwarp:lanes=8,groups=32,lanes=8", buffer,
                             sizeof buffer, &length),
            DFGNN_STATUS_PARSE_ERROR);
  EXPECT_EQ(parse_schedule("subwarp:lanes=8,groups=32").lanes, 8);  // each field once is fine
}

// groups * lanes is checked in 64 bits: 2^29 groups of 8 lanes is no block.
TEST(Schedule, HugeGroupCountIsNotABlock) {
  auto ctx = make_context();
  auto g = test::graph_from_edges(ctx.get(), 4, {0, 1, 2, 3}, {1, 2, 3, 0});
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 32);
  char buffer[256];
  size_t length = 0;
  for (const char* text : {"subwarp:lanes=8,groups=536870912,vec=1", "subwarp:lanes=32,groups=134217728,vec=1"}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(dfgnnGetSchedule(ctx.get(), g.get(), &op, DFGNN_FORWARD, text, buffer, sizeof buffer, &length),
              DFGNN_STATUS_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(dfgnnGetLastErrorMessage(), "is not a block of 32..1024 whole warps")) << dfgnnGetLastErrorMessage();
  }
}

}  // namespace
}  // namespace dfgnn
