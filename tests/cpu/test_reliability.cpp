// Hostile and careless input to the C API (issue 15): sizes beyond what the kernels support, stale
// and garbage handles, a repeated schedule field, fingerprints that would not read back, the log
// level's spelling, and explain reporting a damaged database without a GPU.
#include "test_util.hpp"

#include "error.hpp"
#include "logging.hpp"
#include "schedule.hpp"
#include "solver.hpp"

#include <spdlog/sinks/ostream_sink.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <unistd.h>

namespace dfgnn {
namespace {

namespace fs = std::filesystem;
using test::make_context;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

test::GraphPtr small_graph(dfgnn_context_t ctx) { return test::graph_from_edges(ctx, 4, {0, 1, 2, 3}, {1, 2, 3, 0}); }

// ---------------------------------------------------------------- item 1: D and H limits

// D from 2^30 + 1 to 2^31 - 1 used to hang (next_pow2 looping on int32 overflow in lanes_for_dim);
// H * D beyond DFGNN_MAX_CHANNELS is refused at once, naming the limit, by every entry point.
TEST(Reliability, HugeHeadDimIsNotSupportedAtOnce) {
  auto ctx = make_context();
  auto g = small_graph(ctx.get());
  const std::string limit = std::to_string(DFGNN_MAX_CHANNELS);
  struct Dims {
    int32_t heads, dim;
  };
  for (const Dims d : {Dims{1, (1 << 30) + 1}, Dims{1, std::numeric_limits<int32_t>::max()}, Dims{100000, 100000},
                       Dims{DFGNN_MAX_CHANNELS / 2 + 1, 2}}) {
    SCOPED_TRACE(std::to_string(d.heads) + " x " + std::to_string(d.dim));
    const auto start = std::chrono::steady_clock::now();
    const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_TRANSFORMER, DFGNN_DTYPE_FLOAT32, d.heads, d.dim);
    const auto expect_refused = [&](dfgnn_status_t s, const char* what) {
      EXPECT_EQ(s, DFGNN_STATUS_NOT_SUPPORTED) << what << ": " << dfgnnGetLastErrorMessage();
      EXPECT_TRUE(contains(dfgnnGetLastErrorMessage(), limit)) << what << ": " << dfgnnGetLastErrorMessage();
    };
    char buffer[256];
    size_t length = 0, bytes = 0;
    expect_refused(dfgnnGetSchedule(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, buffer, sizeof buffer, &length),
                   "dfgnnGetSchedule");
    expect_refused(dfgnnExplain(ctx.get(), g.get(), &op, DFGNN_BACKWARD, buffer, sizeof buffer, &length), "dfgnnExplain");
    expect_refused(dfgnnListSchedules(ctx.get(), g.get(), &op, 0, buffer, sizeof buffer, &length), "dfgnnListSchedules");
    expect_refused(dfgnnGetWorkspaceSize(ctx.get(), g.get(), &op, DFGNN_BACKWARD, nullptr, &bytes),
                   "dfgnnGetWorkspaceSize");
    expect_refused(dfgnnCompile(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, 90), "dfgnnCompile");
    expect_refused(dfgnnCompile(ctx.get(), nullptr, &op, DFGNN_FORWARD, "subwarp:lanes=32,groups=8,vec=1", 90),
                   "dfgnnCompile without a graph");
    dfgnn_op_t f64 = op;
    f64.dtype = DFGNN_DTYPE_FLOAT64;
    dfgnn_inputs_t in{};
    expect_refused(dfgnnReferenceForward(g.get(), &f64, &in, nullptr, nullptr), "dfgnnReferenceForward");
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  }
  // The limit itself is accepted by validation (then no schedule serves D = 2^24: NOT_SUPPORTED
  // from dispatch, with its own reason).
  const dfgnn_op_t at_limit = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, DFGNN_MAX_CHANNELS);
  char buffer[256];
  size_t length = 0;
  EXPECT_EQ(dfgnnGetSchedule(ctx.get(), g.get(), &at_limit, DFGNN_FORWARD, nullptr, buffer, sizeof buffer, &length),
            DFGNN_STATUS_NOT_SUPPORTED);
  EXPECT_TRUE(contains(dfgnnGetLastErrorMessage(), "values per lane")) << dfgnnGetLastErrorMessage();
}

TEST(Reliability, LaneArithmeticHoldsUpToInt32Max) {
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

// ---------------------------------------------------------------- item 8: handles

TEST(Reliability, DestroyedAndGarbageHandlesAreInvalidArguments) {
  dfgnn_context_t ctx = nullptr;
  DFGNN_ASSERT_OK(dfgnnCreate(&ctx));
  DFGNN_ASSERT_OK(dfgnnSetDatabase(ctx, "", ""));
  std::vector<int64_t> edge_index{0, 1, 1, 0};
  dfgnn_graph_t g = nullptr;
  DFGNN_ASSERT_OK(dfgnnGraphCreateCoo(ctx, 2, 2, edge_index.data(), DFGNN_INDEX_INT64, DFGNN_MEMORY_HOST, nullptr, &g));
  int64_t n = 0, e = 0;
  DFGNN_ASSERT_OK(dfgnnGraphGetSize(g, &n, &e));
  EXPECT_EQ(n, 2);

  const auto expect_dead = [](dfgnn_status_t s, const char* name) {
    EXPECT_EQ(s, DFGNN_STATUS_INVALID_ARGUMENT) << dfgnnGetLastErrorMessage();
    EXPECT_TRUE(contains(dfgnnGetLastErrorMessage(), std::string(name) + " is not a live handle"))
        << dfgnnGetLastErrorMessage();
  };
  // A graph handle of the wrong kind, and addresses no handle ever had.
  int not_a_handle = 0;
  const auto garbage_graph = reinterpret_cast<dfgnn_graph_t>(&not_a_handle);
  expect_dead(dfgnnGraphGetSize(reinterpret_cast<dfgnn_graph_t>(ctx), &n, &e), "graph");
  expect_dead(dfgnnGraphGetSize(garbage_graph, &n, &e), "graph");
  expect_dead(dfgnnGraphGetSize(reinterpret_cast<dfgnn_graph_t>(uintptr_t{0x10}), &n, &e), "graph");
  expect_dead(dfgnnGraphDestroy(garbage_graph), "graph");
  int has_device = 0;
  expect_dead(dfgnnHasDevice(reinterpret_cast<dfgnn_context_t>(g), &has_device, nullptr), "ctx");
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 8);
  char report[64];
  size_t length = 0;
  expect_dead(dfgnnTune(reinterpret_cast<dfgnn_context_t>(&not_a_handle), g, &op, DFGNN_FORWARD, 1.0, report,
                        sizeof report, &length),
              "ctx");

  // Destroyed: using it or destroying it again is an error, not a use after free.
  DFGNN_ASSERT_OK(dfgnnGraphDestroy(g));
  expect_dead(dfgnnGraphGetSize(g, &n, &e), "graph");
  expect_dead(dfgnnGraphDestroy(g), "graph");
  DFGNN_ASSERT_OK(dfgnnDestroy(ctx));
  expect_dead(dfgnnHasDevice(ctx, &has_device, nullptr), "ctx");
  expect_dead(dfgnnDestroy(ctx), "ctx");
  // Null stays a no-op for destroy and an error elsewhere.
  EXPECT_EQ(dfgnnGraphDestroy(nullptr), DFGNN_STATUS_SUCCESS);
  EXPECT_EQ(dfgnnDestroy(nullptr), DFGNN_STATUS_SUCCESS);
  EXPECT_EQ(dfgnnGraphGetSize(nullptr, &n, &e), DFGNN_STATUS_INVALID_ARGUMENT);
}

// A retained graph lives until its last reference is released; then it is dead like any destroyed one.
TEST(Reliability, RetainedGraphLivesUntilTheLastRelease) {
  dfgnn_context_t ctx = nullptr;
  DFGNN_ASSERT_OK(dfgnnCreate(&ctx));
  std::vector<int64_t> edge_index{0, 1, 2, 1, 2, 0};
  dfgnn_graph_t g = nullptr;
  DFGNN_ASSERT_OK(dfgnnGraphCreateCoo(ctx, 3, 3, edge_index.data(), DFGNN_INDEX_INT64, DFGNN_MEMORY_HOST, nullptr, &g));
  DFGNN_ASSERT_OK(dfgnnGraphRetain(g));
  DFGNN_ASSERT_OK(dfgnnGraphRetain(g));
  int64_t n = 0, e = 0;
  for (int release = 0; release < 2; ++release) {
    DFGNN_ASSERT_OK(dfgnnGraphDestroy(g));
    n = e = 0;
    DFGNN_ASSERT_OK(dfgnnGraphGetSize(g, &n, &e));  // still held by the remaining references
    EXPECT_EQ(n, 3);
    EXPECT_EQ(e, 3);
  }
  DFGNN_ASSERT_OK(dfgnnGraphDestroy(g));  // the last one
  EXPECT_EQ(dfgnnGraphGetSize(g, &n, &e), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(dfgnnGetLastErrorMessage(), "graph is not a live handle")) << dfgnnGetLastErrorMessage();
  EXPECT_EQ(dfgnnGraphRetain(g), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(dfgnnGraphDestroy(g), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(dfgnnGraphRetain(nullptr), DFGNN_STATUS_INVALID_ARGUMENT);
  DFGNN_ASSERT_OK(dfgnnDestroy(ctx));
}

// ---------------------------------------------------------------- item 9: smaller acceptances

TEST(Reliability, RepeatedScheduleFieldIsParseError) {
  try {
    parse_schedule("subwarp:lanes=32,lanes=4");
    ADD_FAILURE() << "accepted a repeated field";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), DFGNN_STATUS_PARSE_ERROR);
    EXPECT_TRUE(contains(e.what(), "field 'lanes' is given twice")) << e.what();
  }
  auto ctx = make_context();
  auto g = small_graph(ctx.get());
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 32);
  char buffer[256];
  size_t length = 0;
  EXPECT_EQ(dfgnnGetSchedule(ctx.get(), g.get(), &op, DFGNN_FORWARD, "subwarp:lanes=8,groups=32,lanes=8", buffer,
                             sizeof buffer, &length),
            DFGNN_STATUS_PARSE_ERROR);
  EXPECT_EQ(parse_schedule("subwarp:lanes=8,groups=32").lanes, 8);  // each field once is fine
}

// groups * lanes wrapped in 32 bits: 2^29 groups of 8 lanes made a "block" of 0 threads, accepted.
TEST(Reliability, HugeGroupCountIsNotABlock) {
  auto ctx = make_context();
  auto g = small_graph(ctx.get());
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

TEST(Reliability, FingerprintThatWouldNotReadBackIsNotSerialised) {
  auto ctx = make_context();
  auto g = small_graph(ctx.get());
  dfgnn_fingerprint_t good{};
  DFGNN_ASSERT_OK(dfgnnGraphGetFingerprint(g.get(), &good));
  size_t length = 0;
  DFGNN_ASSERT_OK(dfgnnFingerprintSerialize(&good, nullptr, 0, &length));

  struct Case {
    const char* needle;
    void (*spoil)(dfgnn_fingerprint_t&);
  };
  const Case cases[] = {
      {"\"num_nodes\" must be >= 0", [](dfgnn_fingerprint_t& f) { f.num_nodes = -5; }},
      {"\"cv\" must be finite", [](dfgnn_fingerprint_t& f) { f.cv = std::numeric_limits<double>::quiet_NaN(); }},
      {"\"hist[3]\" must be finite", [](dfgnn_fingerprint_t& f) { f.hist[3] = std::numeric_limits<double>::infinity(); }},
      {"\"hub_rows[0]\" must be >= 0", [](dfgnn_fingerprint_t& f) { f.hub_rows[0] = -1; }},
      {"\"version\" 99", [](dfgnn_fingerprint_t& f) { f.version = 99; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.needle);
    dfgnn_fingerprint_t fp = good;
    c.spoil(fp);
    EXPECT_EQ(dfgnnFingerprintSerialize(&fp, nullptr, 0, &length), DFGNN_STATUS_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(dfgnnGetLastErrorMessage(), c.needle)) << dfgnnGetLastErrorMessage();
  }
}

TEST(Reliability, LogLevelIsCaseInsensitiveAndUnknownIsRefused) {
  EXPECT_EQ(parse_log_level("WARN"), spdlog::level::warn);
  EXPECT_EQ(parse_log_level("warn"), spdlog::level::warn);
  EXPECT_EQ(parse_log_level("Warning"), spdlog::level::warn);
  EXPECT_EQ(parse_log_level("DEBUG"), spdlog::level::debug);
  EXPECT_EQ(parse_log_level("Off"), spdlog::level::off);
  EXPECT_EQ(parse_log_level("loud"), std::nullopt);  // spdlog alone reads this as "off"
  EXPECT_EQ(parse_log_level(""), std::nullopt);
}

// Without a GPU dispatch never reads the database; explain must still open it, so that a damaged
// one is reported (logged) rather than the default rule shown as if nothing were wrong.
TEST(Reliability, ExplainReportsADamagedDatabaseWithoutAGpu) {
  const fs::path dir = fs::temp_directory_path() / ("dfgnn-rel-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / "damaged.db";
  std::ofstream(file, std::ios::binary) << std::string(4096, 'x');
  auto ctx = make_context();
  DFGNN_ASSERT_OK(dfgnnSetDatabase(ctx.get(), file.c_str(), ""));
  auto g = small_graph(ctx.get());

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
