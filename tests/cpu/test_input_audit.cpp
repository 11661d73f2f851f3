// Bad user input on the host side (the audit of 2026-12-01): each refusal is asserted with its
// exact status and the phrase of its message that names the problem, and each fixed defect has a
// case that failed before its fix (the comment above it says what happened before).
#include "test_util.hpp"

#include "dispatch.hpp"
#include "env_number.hpp"
#include "error.hpp"
#include "fingerprint.hpp"
#include "graph.hpp"
#include "graph_io.hpp"
#include "plan.hpp"
#include "schedule.hpp"

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

namespace dfgnn {
namespace {

namespace fs = std::filesystem;
constexpr int32_t kInt32Max = std::numeric_limits<int32_t>::max();

// The status of a C API call and the message it left.
struct Outcome {
  dfgnn_status_t status;
  std::string message;
};
Outcome outcome(dfgnn_status_t status) {
  return {status, status == DFGNN_STATUS_SUCCESS ? std::string() : std::string(dfgnnGetLastErrorMessage())};
}

void expect_refusal(const Outcome& o, dfgnn_status_t status, const std::string& phrase) {
  EXPECT_EQ(o.status, status) << dfgnnGetStatusString(o.status) << ": " << o.message;
  EXPECT_NE(o.message.find(phrase), std::string::npos) << "'" << phrase << "' not in: " << o.message;
}

// A file in a fresh directory, removed with it.
struct TempFile {
  fs::path dir, path;
  TempFile(const std::string& name, const std::string& text) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir = fs::temp_directory_path() / ("dfgnn_audit_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    path = dir / name;
    std::ofstream(path, std::ios::binary) << text;
  }
  ~TempFile() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

Outcome load(const std::string& path) {
  auto ctx = test::make_context();
  dfgnn_graph_t g = nullptr;
  const Outcome o = outcome(dfgnnGraphCreateFromFile(ctx.get(), path.c_str(), nullptr, &g));
  dfgnnGraphDestroy(g);
  return o;
}

// Sets an environment variable for one scope, restoring what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// ---------------------------------------------------------------- graph files

// Before: the symmetric count was doubled in int64 (2 * 2^62 wrapped negative), passed the size
// check, and the read failed only later, as "file ends after 1 entries" (PARSE_ERROR).
TEST(InputAudit, MatrixMarketHugeSymmetricEntryCountIsRefusedFromTheSizeLine) {
  TempFile f("g.mtx", "%%MatrixMarket matrix coordinate pattern symmetric\n3 3 4611686018427387904\n1 2\n");
  expect_refusal(load(f.path.string()), DFGNN_STATUS_INDEX_OVERFLOW, ":2: 3 nodes / 4611686018427387904 edges exceed");
}

// Size lines and headers beyond the limits, in Matrix Market (general: the count itself; symmetric:
// twice the count, each entry being mirrored) and edge lists.
TEST(InputAudit, GraphFileSizesBeyondTheLimitsAreRefusedFromTheSizeLine) {
  struct Case {
    const char *name, *contents;
    dfgnn_status_t status;
    const char* phrase;
  };
  const Case cases[] = {
      {"g.mtx", "%%MatrixMarket matrix coordinate pattern general\n3 3 2147483648\n1 2\n", DFGNN_STATUS_INDEX_OVERFLOW,
       "3 nodes / 2147483648 edges exceed"},
      {"s.mtx", "%%MatrixMarket matrix coordinate pattern symmetric\n3 3 1073741824\n1 2\n", DFGNN_STATUS_INDEX_OVERFLOW,
       "3 nodes / 2147483648 edges exceed"},
      {"n.mtx", "%%MatrixMarket matrix coordinate pattern general\n2147483647 2147483647 1\n1 2\n",
       DFGNN_STATUS_INDEX_OVERFLOW, "2147483647 nodes / 1 edges exceed"},
      {"e.txt", "# nodes 3 edges 2147483648\n0 1\n", DFGNN_STATUS_INDEX_OVERFLOW, ":1: 3 nodes / 2147483648 edges exceed"},
      {"n.txt", "# nodes -3 edges 1\n0 1\n", DFGNN_STATUS_PARSE_ERROR, "non-negative N and E"},
      {"o.txt", "# nodes 99999999999999999999 edges 1\n0 1\n", DFGNN_STATUS_PARSE_ERROR,  // beyond int64
       "expected a '# nodes N edges E' header"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.contents);
    TempFile f(c.name, c.contents);
    expect_refusal(load(f.path.string()), c.status, c.phrase);
  }
}

TEST(InputAudit, GraphFileNullPathAndDirectoryWithoutEdges) {
  auto ctx = test::make_context();
  dfgnn_graph_t g = nullptr;
  expect_refusal(outcome(dfgnnGraphCreateFromFile(ctx.get(), nullptr, nullptr, &g)), DFGNN_STATUS_INVALID_ARGUMENT,
                 "path is null");
  TempFile f("other.txt", "");
  expect_refusal(load(f.dir.string()), DFGNN_STATUS_IO_ERROR, "has neither edges.txt nor edges.txt.gz");
  expect_refusal(load(""), DFGNN_STATUS_IO_ERROR, "cannot open ''");
}

// ---------------------------------------------------------------- generators

// Before: num_nodes was bounded only after the hubs' num_nodes-bit bitmap was allocated: 2^62
// nodes was "out of host memory" (OUT_OF_MEMORY), and 2^40 (128 GiB of bitmap) ran the host out
// of memory instead of failing.
TEST(InputAudit, PlantedHubsRefusesTooManyNodesBeforeAllocating) {
  auto ctx = test::make_context();
  dfgnn_graph_t g = nullptr;
  expect_refusal(outcome(dfgnnGraphCreatePlantedHubs(ctx.get(), int64_t{1} << 62, 0, 1, 0, 1, nullptr, &g)),
                 DFGNN_STATUS_INDEX_OVERFLOW, "num_nodes = 4611686018427387904 exceeds dfgnn's limit of 2147483646 nodes");
  EXPECT_EQ(g, nullptr);
  expect_refusal(outcome(dfgnnGraphCreatePlantedHubs(ctx.get(), int64_t{1} << 31, 0, 0, 0, 1, nullptr, &g)),
                 DFGNN_STATUS_INDEX_OVERFLOW, "num_nodes = 2147483648 exceeds dfgnn's limit");
}

TEST(InputAudit, RmatRefusals) {
  auto ctx = test::make_context();
  dfgnn_graph_t g = nullptr;
  const auto rmat = [&](int32_t scale, int64_t edges, double a, double b, double c, uint32_t flags) {
    return outcome(dfgnnGraphCreateRmat(ctx.get(), scale, edges, a, b, c, flags, 1, nullptr, &g));
  };
  expect_refusal(rmat(31, 1, 0.5, 0.2, 0.2, 0), DFGNN_STATUS_INVALID_ARGUMENT, "scale must be in [1, 30], got 31");
  expect_refusal(rmat(4, int64_t{1} << 31, 0.5, 0.2, 0.2, 0), DFGNN_STATUS_INVALID_ARGUMENT, "num_edges must be in");
  expect_refusal(rmat(4, 8, std::numeric_limits<double>::quiet_NaN(), 0.2, 0.2, 0), DFGNN_STATUS_INVALID_ARGUMENT,
                 "a must be a finite probability");
  expect_refusal(rmat(4, 8, 0.5, 0.4, 0.4, 0), DFGNN_STATUS_INVALID_ARGUMENT, "a + b + c must be <= 1");
  expect_refusal(rmat(4, 8, 0.5, 0.2, 0.2, 16), DFGNN_STATUS_INVALID_ARGUMENT, "flags has unknown bits 0x10");
  EXPECT_EQ(g, nullptr);
}

// ---------------------------------------------------------------- plans from schedule text

std::unique_ptr<Graph> graph_with_degrees(const std::vector<int32_t>& degrees) {
  const auto n = static_cast<int32_t>(degrees.size());
  std::vector<int32_t> ptr{0}, col;
  for (int32_t i = 0; i < n; ++i) {
    for (int32_t k = 0; k < degrees[i]; ++k) col.push_back((i + 1 + k) % n);
    ptr.push_back(static_cast<int32_t>(col.size()));
  }
  return Graph::from_csr(n, static_cast<int64_t>(col.size()), ptr.data(), col.data(), DFGNN_INDEX_INT32,
                         dfgnnGraphDefaultOptions());
}

// Before: split_row stepped in int32, so with chunk = 2^31 - 1 a hub row starting at edge 3 got
// chunks with negative edge bounds ({1, 3, -2147483646, 0}, ...) that kernels would read from.
TEST(InputAudit, SplitRowsWithTheLargestChunkStayInsideTheRow) {
  const auto g = graph_with_degrees({3, 100, 2});
  for (const char* text : {"hub_split:lanes=32,groups=8,threshold=64,chunk=2147483647",
                           "hybrid:lanes=8,groups=32,mid=8,threshold=64,chunk=2147483647"}) {
    SCOPED_TRACE(text);
    const HostPlan plan = make_plan(g->csr(), parse_schedule(text));
    ASSERT_FALSE(plan.parts.empty());
    EXPECT_EQ(plan.parts[0].segments, (std::vector<Segment>{{1, 3, 103, 0}}));  // the whole hub row, one chunk
    EXPECT_EQ(plan.hubs, (std::vector<Segment>{{1, 0, 1, 0}}));
    EXPECT_EQ(plan.num_slots, 1);
  }
}

// Before: a row group's cost was summed in int32: with block_edges() = 2^31 - 1, cost 2^31 - 1
// plus the next row's 2 wrapped negative and the two rows shared one group costing 2^31 + 1.
TEST(InputAudit, EdgeBalancedGroupsNeverCostMoreThanTheBlockEdges) {
  Compressed rows;  // a plan reads only the row pointers
  rows.num_rows = 2;
  rows.ptr = {0, kInt32Max - 1, kInt32Max};
  const HostPlan plan = make_plan(rows, parse_schedule("edge_balanced:lanes=32,groups=8,vec=1,chunk=2147483647"));
  ASSERT_EQ(plan.parts.size(), 1u);
  EXPECT_EQ(plan.parts[0].kind, dfgnn::HostPlan::Part::Kind::RowGroups);
  EXPECT_EQ(plan.parts[0].segments, (std::vector<Segment>{{0, 1, 0, kInt32Max - 1}, {1, 2, kInt32Max - 1, kInt32Max}}));
}

// ---------------------------------------------------------------- C API arguments

// Before: without a graph, dfgnnCompile took any direction other than DFGNN_FORWARD for a
// backward (and compiled one; here the invalid schedule was the first thing it refused).
TEST(InputAudit, CompileRefusesAnUnknownDirectionWithoutAGraph) {
  auto ctx = test::make_context();
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 32);
  expect_refusal(outcome(dfgnnCompile(ctx.get(), nullptr, &op, static_cast<dfgnn_direction_t>(7), "subwarp:lanes=3", 90)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "direction 7 is neither DFGNN_FORWARD nor DFGNN_BACKWARD");
  expect_refusal(outcome(dfgnnCompile(ctx.get(), nullptr, &op, DFGNN_FORWARD, "subwarp:lanes=32", 49)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "arch 49 is not a compute capability");
  expect_refusal(outcome(dfgnnCompile(ctx.get(), nullptr, &op, DFGNN_FORWARD, nullptr, 90)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "needs a graph or a schedule");
}

TEST(InputAudit, GraphCreationRefusalsNameTheArgument) {
  auto ctx = test::make_context();
  dfgnn_graph_t g = nullptr;
  const int64_t ei[2] = {0, 1};
  const int32_t ptr[2] = {0, 0};
  expect_refusal(outcome(dfgnnGraphCreateCoo(ctx.get(), 2, 1, ei, DFGNN_INDEX_INT64, static_cast<dfgnn_memory_t>(7),
                                             nullptr, &g)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "memory 7 is neither DFGNN_MEMORY_HOST nor DFGNN_MEMORY_DEVICE");
  expect_refusal(outcome(dfgnnGraphCreateCoo(ctx.get(), 2, 1, ei, static_cast<dfgnn_index_type_t>(5),
                                             DFGNN_MEMORY_HOST, nullptr, &g)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "index_type 5 is neither");
  expect_refusal(outcome(dfgnnGraphCreateCoo(ctx.get(), 2, 3, nullptr, DFGNN_INDEX_INT64, DFGNN_MEMORY_HOST, nullptr,
                                             &g)),
                 DFGNN_STATUS_NULL_POINTER, "edge_index is null but num_edges = 3");
  expect_refusal(outcome(dfgnnGraphCreateCoo(ctx.get(), 2, int64_t{1} << 31, ei, DFGNN_INDEX_INT32,
                                             DFGNN_MEMORY_HOST, nullptr, &g)),
                 DFGNN_STATUS_INDEX_OVERFLOW, "num_edges = 2147483648 does not fit the int32 index type");
  expect_refusal(outcome(dfgnnGraphCreateCoo(ctx.get(), int64_t{1} << 31, 0, nullptr, DFGNN_INDEX_INT64,
                                             DFGNN_MEMORY_HOST, nullptr, &g)),
                 DFGNN_STATUS_INDEX_OVERFLOW, "num_nodes = 2147483648 exceeds dfgnn's limit of 2147483646 nodes");
  expect_refusal(outcome(dfgnnGraphCreateCoo(ctx.get(), 2, 1, ei, DFGNN_INDEX_INT64, DFGNN_MEMORY_HOST, nullptr,
                                             nullptr)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "graph (output) is null");
  expect_refusal(outcome(dfgnnGraphCreateCsr(ctx.get(), 1, 2, ptr, nullptr, DFGNN_INDEX_INT32, DFGNN_MEMORY_HOST,
                                             nullptr, &g)),
                 DFGNN_STATUS_NULL_POINTER, "col_idx is null but nnz = 2");
  dfgnn_graph_options_t options = dfgnnGraphDefaultOptions();
  options.duplicates = static_cast<dfgnn_duplicates_t>(3);
  expect_refusal(outcome(dfgnnGraphCreateCoo(ctx.get(), 2, 1, ei, DFGNN_INDEX_INT64, DFGNN_MEMORY_HOST, &options,
                                             &g)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "options.duplicates 3 is not a dfgnn_duplicates_t value");
  EXPECT_EQ(g, nullptr);
}

TEST(InputAudit, OpAndPassRefusalsNameTheField) {
  auto ctx = test::make_context();
  auto g = test::graph_from_edges(ctx.get(), 3, {0, 1, 2}, {1, 2, 0});
  char buffer[64];
  size_t length = 0;
  dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 32);
  expect_refusal(outcome(dfgnnListSchedules(ctx.get(), g.get(), &op, 3, buffer, sizeof buffer, &length)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "pass 3 is not 0, 1 or 2");
  expect_refusal(outcome(dfgnnGetSchedule(ctx.get(), g.get(), &op, static_cast<dfgnn_direction_t>(2), nullptr, buffer,
                                          sizeof buffer, &length)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "direction 2 is neither");
  expect_refusal(outcome(dfgnnSetTuneMode(ctx.get(), static_cast<dfgnn_tune_mode_t>(9))), DFGNN_STATUS_INVALID_ARGUMENT,
                 "tune mode 9 is neither");
  size_t bytes = 0;
  expect_refusal(outcome(dfgnnGetWorkspaceSize(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, nullptr)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "bytes (output) is null");
  op.heads = 1 << 12;
  op.dim = (1 << 12) + 1;
  expect_refusal(outcome(dfgnnGetWorkspaceSize(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, &bytes)),
                 DFGNN_STATUS_NOT_SUPPORTED, "op.heads * op.dim = 4096 * 4097 exceeds 16777216 channels per node");
  op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 32);
  op.edge_features = 2;
  expect_refusal(outcome(dfgnnGetWorkspaceSize(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, &bytes)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "op.edge_features must be 0 or 1 (got 2)");
  op = dfgnnOpDefault(static_cast<dfgnn_model_t>(4), DFGNN_DTYPE_FLOAT32, 1, 32);
  expect_refusal(outcome(dfgnnGetWorkspaceSize(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, &bytes)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "model 4 is not a dfgnn_model_t value");
  op = dfgnnOpDefault(DFGNN_MODEL_GAT, static_cast<dfgnn_dtype_t>(-1), 1, 32);
  expect_refusal(outcome(dfgnnGetWorkspaceSize(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, &bytes)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "dtype -1 is not a dfgnn_dtype_t value");
  // A forced schedule: a value out of range is invalid, one beyond int32 malformed; both name the field.
  op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 32);
  expect_refusal(outcome(dfgnnGetWorkspaceSize(ctx.get(), g.get(), &op, DFGNN_FORWARD,
                                               "subwarp:lanes=32,groups=2147483647", &bytes)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "groups = 2147483647 of 32 lanes is not a block");
  expect_refusal(outcome(dfgnnGetWorkspaceSize(ctx.get(), g.get(), &op, DFGNN_FORWARD, "subwarp:lanes=99999999999",
                                               &bytes)),
                 DFGNN_STATUS_PARSE_ERROR, "lanes = '99999999999' is not an integer");
}

// The buffer protocol: the full length is always reported; a buffer too small is filled and
// terminated, never overrun; a null buffer with a capacity is refused.
TEST(InputAudit, TextBuffersAreNeverOverrun) {
  auto ctx = test::make_context();
  auto g = test::graph_from_edges(ctx.get(), 3, {0, 1, 2}, {1, 2, 0});
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 32);
  size_t length = 0;
  DFGNN_ASSERT_OK(dfgnnGetSchedule(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, nullptr, 0, &length));
  ASSERT_GT(length, 8u);
  std::string full(length + 1, '\0');
  DFGNN_ASSERT_OK(dfgnnGetSchedule(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, full.data(), full.size(), &length));
  full.resize(length);
  char small[8 + 1];
  std::fill(std::begin(small), std::end(small), 'X');
  size_t reported = 0;
  DFGNN_ASSERT_OK(dfgnnGetSchedule(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, small, 8, &reported));
  EXPECT_EQ(reported, full.size());
  EXPECT_EQ(std::string(small), full.substr(0, 7));  // 7 bytes and the terminating zero
  EXPECT_EQ(small[8], 'X');                          // nothing written past the capacity
  expect_refusal(outcome(dfgnnGetSchedule(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, nullptr, 16, &length)),
                 DFGNN_STATUS_NULL_POINTER, "buffer is null but capacity = 16");
}

TEST(InputAudit, FingerprintTextRefusals) {
  dfgnn_fingerprint_t fp{};
  expect_refusal(outcome(dfgnnFingerprintParse(nullptr, &fp)), DFGNN_STATUS_INVALID_ARGUMENT, "text is null");
  expect_refusal(outcome(dfgnnFingerprintParse("{\"version\": 2}", &fp)), DFGNN_STATUS_PARSE_ERROR,
                 "unsupported \"version\" 2");
  expect_refusal(outcome(dfgnnFingerprintParse("[1]", &fp)), DFGNN_STATUS_PARSE_ERROR, "expected a JSON object");
  expect_refusal(outcome(dfgnnFingerprintParse("{\"version\": 1", &fp)), DFGNN_STATUS_PARSE_ERROR, "not valid JSON");
  // Deep nesting is a parse result, not a crash.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_refusal(outcome(dfgnnFingerprintParse(deep.c_str(), &fp)), DFGNN_STATUS_PARSE_ERROR, "expected a JSON object");
  // A fingerprint with a field out of its range is refused before it is written.
  auto ctx = test::make_context();
  auto g = test::graph_from_edges(ctx.get(), 3, {0, 1, 2}, {1, 2, 0});
  DFGNN_ASSERT_OK(dfgnnGraphGetFingerprint(g.get(), &fp));
  fp.num_edges = -5;
  size_t length = 0;
  expect_refusal(outcome(dfgnnFingerprintSerialize(&fp, nullptr, 0, &length)), DFGNN_STATUS_INVALID_ARGUMENT,
                 "\"num_edges\" must be >= 0 (got -5)");
  // An unknown key, as a typo would make it.
  DFGNN_ASSERT_OK(dfgnnGraphGetFingerprint(g.get(), &fp));
  std::string text(512, '\0');
  DFGNN_ASSERT_OK(dfgnnFingerprintSerialize(&fp, text.data(), text.size(), &length));
  text.resize(length);
  text.insert(1, "\"num_nodez\":1,");
  expect_refusal(outcome(dfgnnFingerprintParse(text.c_str(), &fp)), DFGNN_STATUS_PARSE_ERROR,
                 "unknown key \"num_nodez\"");
}

// ---------------------------------------------------------------- environment

// Before: "nan" was taken (NaN compares false with every distance: the nearest level never
// answered, without a word) and "0.5km" was read as 0.5.
TEST(InputAudit, NearestDistanceFromTheEnvironmentMustBeANumber) {
  const double calibrated = nearest_calibration().radius;
  for (const char* bad : {"nan", "-1", "0.5km", "", "far"}) {
    SCOPED_TRACE(bad);
    ScopedEnv env("DFGNN_NEAREST_MAX_DISTANCE", bad);
    EXPECT_EQ(Dispatcher().max_distance(), calibrated);
  }
  ScopedEnv env("DFGNN_NEAREST_MAX_DISTANCE", "0.25");
  EXPECT_EQ(Dispatcher().max_distance(), 0.25);
}

// DFGNN_TUNE_BUDGET (read on a GPU's dispatch miss) shares the parser: "20s" was read as 20.
TEST(InputAudit, EnvironmentNumbersAreWholeFiniteNumbers) {
  for (const char* bad : {"", "20s", "far", "nan", "inf", "1e400", " "}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(parse_env_number(bad).has_value());
  }
  EXPECT_FALSE(parse_env_number(nullptr).has_value());
  EXPECT_EQ(parse_env_number("20"), 20.0);
  EXPECT_EQ(parse_env_number("0.25"), 0.25);
  EXPECT_EQ(parse_env_number("-3"), -3.0);  // the sign is the caller's rule
}

}  // namespace
}  // namespace dfgnn
