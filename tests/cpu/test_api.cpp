// The C API boundary (api.cpp, handles.hpp): refusals that name the argument, field or limit, the
// text buffer protocol, and live, destroyed, garbage and retained handles.
#include "test_util.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

namespace dfgnn {
namespace {

using test::expect_refusal;
using test::make_context;
using test::api_call;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---------------------------------------------------------------- arguments

// dfgnnCompile without a graph refuses an unknown direction, a non-arch and a missing schedule.
TEST(Api, CompileRefusesAnUnknownDirectionWithoutAGraph) {
  auto ctx = test::make_context();
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 32);
  expect_refusal(api_call(dfgnnCompile(ctx.get(), nullptr, &op, static_cast<dfgnn_direction_t>(7), "subwarp:lanes=3", 90)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "direction 7 is neither DFGNN_FORWARD nor DFGNN_BACKWARD");
  expect_refusal(api_call(dfgnnCompile(ctx.get(), nullptr, &op, DFGNN_FORWARD, "subwarp:lanes=32", 49)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "arch 49 is not a compute capability");
  expect_refusal(api_call(dfgnnCompile(ctx.get(), nullptr, &op, DFGNN_FORWARD, nullptr, 90)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "needs a graph or a schedule");
}

TEST(Api, OpAndPassRefusalsNameTheField) {
  auto ctx = test::make_context();
  auto g = test::graph_from_edges(ctx.get(), 3, {0, 1, 2}, {1, 2, 0});
  char buffer[64];
  size_t length = 0;
  dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 32);
  expect_refusal(api_call(dfgnnListSchedules(ctx.get(), g.get(), &op, 3, buffer, sizeof buffer, &length)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "pass 3 is not 0, 1 or 2");
  expect_refusal(api_call(dfgnnGetSchedule(ctx.get(), g.get(), &op, static_cast<dfgnn_direction_t>(2), nullptr, buffer,
                                           sizeof buffer, &length)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "direction 2 is neither");
  expect_refusal(api_call(dfgnnSetTuneMode(ctx.get(), static_cast<dfgnn_tune_mode_t>(9))), DFGNN_STATUS_INVALID_ARGUMENT,
                 "tune mode 9 is neither");
  size_t bytes = 0;
  expect_refusal(api_call(dfgnnGetWorkspaceSize(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, nullptr)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "bytes (output) is null");
  op.heads = 1 << 12;
  op.dim = (1 << 12) + 1;
  expect_refusal(api_call(dfgnnGetWorkspaceSize(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, &bytes)),
                 DFGNN_STATUS_NOT_SUPPORTED, "op.heads * op.dim = 4096 * 4097 exceeds 16777216 channels per node");
  op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 32);
  op.edge_features = 2;
  expect_refusal(api_call(dfgnnGetWorkspaceSize(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, &bytes)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "op.edge_features must be 0 or 1 (got 2)");
  op = dfgnnOpDefault(static_cast<dfgnn_model_t>(4), DFGNN_DTYPE_FLOAT32, 1, 32);
  expect_refusal(api_call(dfgnnGetWorkspaceSize(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, &bytes)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "model 4 is not a dfgnn_model_t value");
  op = dfgnnOpDefault(DFGNN_MODEL_GAT, static_cast<dfgnn_dtype_t>(-1), 1, 32);
  expect_refusal(api_call(dfgnnGetWorkspaceSize(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, &bytes)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "dtype -1 is not a dfgnn_dtype_t value");
  // A forced schedule: a value out of range is invalid, one beyond int32 malformed; both name the field.
  op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 32);
  expect_refusal(api_call(dfgnnGetWorkspaceSize(ctx.get(), g.get(), &op, DFGNN_FORWARD,
                                                "subwarp:lanes=32,groups=2147483647", &bytes)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "groups = 2147483647 of 32 lanes is not a block");
  expect_refusal(api_call(dfgnnGetWorkspaceSize(ctx.get(), g.get(), &op, DFGNN_FORWARD, "subwarp:lanes=99999999999",
                                                &bytes)),
                 DFGNN_STATUS_PARSE_ERROR, "lanes = '99999999999' is not an integer");
}

// The buffer protocol: the full length is always reported; a buffer too small is filled and
// terminated, never overrun; a null buffer with a capacity is refused.
TEST(Api, TextBuffersAreNeverOverrun) {
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
  expect_refusal(api_call(dfgnnGetSchedule(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, nullptr, 16, &length)),
                 DFGNN_STATUS_NULL_POINTER, "buffer is null but capacity = 16");
}

// H * D beyond DFGNN_MAX_CHANNELS is refused at once by every entry point, naming the limit (D up
// to 2^31 - 1 included: no hang).
TEST(Api, HugeHeadDimIsNotSupportedAtOnce) {
  auto ctx = make_context();
  auto g = test::graph_from_edges(ctx.get(), 4, {0, 1, 2, 3}, {1, 2, 3, 0});
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

// ---------------------------------------------------------------- handles

TEST(Api, DestroyedAndGarbageHandlesAreInvalidArguments) {
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
TEST(Api, RetainedGraphLivesUntilTheLastRelease) {
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

}  // namespace
}  // namespace dfgnn
