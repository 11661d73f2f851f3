// Graph construction through the C API: CSR/COO input, self-loops, duplicates, the transpose, and
// one specific error per kind of bad input.
#include "test_util.hpp"

#include "context.hpp"
#include "graph.hpp"
#include "recipe.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <thread>

using namespace dfgnn::test;

namespace {

struct HostCsr {
  std::vector<int32_t> ptr, idx, eid;
};

HostCsr get_csr(dfgnn_graph_t g) {
  int64_t n = 0, e = 0;
  EXPECT_EQ(dfgnnGraphGetSize(g, &n, &e), DFGNN_STATUS_SUCCESS);
  const int32_t *ptr = nullptr, *idx = nullptr, *eid = nullptr;
  EXPECT_EQ(dfgnnGraphGetCsr(g, DFGNN_MEMORY_HOST, &ptr, &idx, &eid), DFGNN_STATUS_SUCCESS);
  return {std::vector<int32_t>(ptr, ptr + n + 1), std::vector<int32_t>(idx, idx + e), std::vector<int32_t>(eid, eid + e)};
}

HostCsr get_csc(dfgnn_graph_t g) {
  int64_t n = 0, e = 0;
  EXPECT_EQ(dfgnnGraphGetSize(g, &n, &e), DFGNN_STATUS_SUCCESS);
  const int32_t *ptr = nullptr, *idx = nullptr, *pos = nullptr;
  EXPECT_EQ(dfgnnGraphGetCsc(g, DFGNN_MEMORY_HOST, &ptr, &idx, &pos), DFGNN_STATUS_SUCCESS);
  return {std::vector<int32_t>(ptr, ptr + n + 1), std::vector<int32_t>(idx, idx + e), std::vector<int32_t>(pos, pos + e)};
}

template <typename Index>
dfgnn_status_t create_csr(dfgnn_context_t ctx, int64_t n, int64_t nnz, const std::vector<Index>& ptr,
                          const std::vector<Index>& col, dfgnn_graph_options_t options = dfgnnGraphDefaultOptions()) {
  dfgnn_graph_t g = nullptr;
  constexpr auto type = sizeof(Index) == 4 ? DFGNN_INDEX_INT32 : DFGNN_INDEX_INT64;
  dfgnn_status_t s = dfgnnGraphCreateCsr(ctx, n, nnz, ptr.empty() ? nullptr : ptr.data(),
                                         col.empty() ? nullptr : col.data(), type, DFGNN_MEMORY_HOST, &options, &g);
  dfgnnGraphDestroy(g);
  return s;
}

std::string last_message() { return dfgnnGetLastErrorMessage(); }

}  // namespace

TEST(Graph, CsrInputKeepsRowsAndOrder) {
  auto ctx = make_context();
  // Row 0: {2, 1}; row 1: {}; row 2: {0, 0, 1} (duplicate kept by default).
  std::vector<int32_t> ptr{0, 2, 2, 5}, col{2, 1, 0, 0, 1};
  dfgnn_graph_t raw = nullptr;
  DFGNN_ASSERT_OK(dfgnnGraphCreateCsr(ctx.get(), 3, 5, ptr.data(), col.data(), DFGNN_INDEX_INT32, DFGNN_MEMORY_HOST,
                                      nullptr, &raw));
  GraphPtr g(raw);
  HostCsr csr = get_csr(g.get());
  EXPECT_EQ(csr.ptr, ptr);
  EXPECT_EQ(csr.idx, col);
  EXPECT_EQ(csr.eid, (std::vector<int32_t>{0, 1, 2, 3, 4}));
}

TEST(Graph, CooIsSortedStablyByDestination) {
  auto ctx = make_context();
  // Edges (src -> dst) with ids 0..4: 1->2, 0->0, 2->0, 1->0, 0->2
  auto g = graph_from_edges(ctx.get(), 3, {1, 0, 2, 1, 0}, {2, 0, 0, 0, 2});
  HostCsr csr = get_csr(g.get());
  EXPECT_EQ(csr.ptr, (std::vector<int32_t>{0, 3, 3, 5}));
  EXPECT_EQ(csr.idx, (std::vector<int32_t>{0, 2, 1, 1, 0}));
  EXPECT_EQ(csr.eid, (std::vector<int32_t>{1, 2, 3, 0, 4}));
}

TEST(Graph, Int32AndInt64InputAgree) {
  auto ctx = make_context();
  std::vector<int32_t> e32{3, 1, 0, 2, 0, 1, 2, 3};
  std::vector<int64_t> e64(e32.begin(), e32.end());
  dfgnn_graph_t a = nullptr, b = nullptr;
  DFGNN_ASSERT_OK(dfgnnGraphCreateCoo(ctx.get(), 4, 4, e32.data(), DFGNN_INDEX_INT32, DFGNN_MEMORY_HOST, nullptr, &a));
  DFGNN_ASSERT_OK(dfgnnGraphCreateCoo(ctx.get(), 4, 4, e64.data(), DFGNN_INDEX_INT64, DFGNN_MEMORY_HOST, nullptr, &b));
  GraphPtr ga(a), gb(b);
  HostCsr x = get_csr(a), y = get_csr(b);
  EXPECT_EQ(x.ptr, y.ptr);
  EXPECT_EQ(x.idx, y.idx);
  EXPECT_EQ(x.eid, y.eid);
}

TEST(Graph, SelfLoopsReplacedLikePyG) {
  auto ctx = make_context();
  // Edges: 0->0 (loop, removed), 1->0, 2->1, 1->1 (loop, removed), 0->2.
  auto g = graph_from_edges(ctx.get(), 3, {0, 1, 2, 1, 0}, {0, 0, 1, 1, 2}, /*add_self_loops=*/true);
  HostCsr csr = get_csr(g.get());
  // Kept edges renumbered 0..2 in input order (1->0, 2->1, 0->2), then loops 3, 4, 5 for nodes 0, 1, 2.
  EXPECT_EQ(csr.ptr, (std::vector<int32_t>{0, 2, 4, 6}));
  EXPECT_EQ(csr.idx, (std::vector<int32_t>{1, 0, 2, 1, 0, 2}));
  EXPECT_EQ(csr.eid, (std::vector<int32_t>{0, 3, 1, 4, 2, 5}));
}

TEST(Graph, SelfLoopsOnEmptyAndIsolatedNodes) {
  auto ctx = make_context();
  auto g = graph_from_edges(ctx.get(), 4, {}, {}, /*add_self_loops=*/true);
  HostCsr csr = get_csr(g.get());
  EXPECT_EQ(csr.ptr, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(csr.idx, (std::vector<int32_t>{0, 1, 2, 3}));
}

TEST(Graph, TransposeListsOutEdgesWithCsrPositions) {
  auto ctx = make_context();
  auto g = random_graph(ctx.get(), 50, 7, 11);
  HostCsr csr = get_csr(g.get()), csc = get_csc(g.get());
  ASSERT_EQ(csc.idx.size(), csr.idx.size());
  std::vector<int> seen(csr.idx.size(), 0);
  for (int32_t j = 0; j < 50; ++j) {
    for (int32_t p = csc.ptr[j]; p < csc.ptr[j + 1]; ++p) {
      const int32_t i = csc.idx[p], pos = csc.eid[p];
      ASSERT_GE(pos, csr.ptr[i]);
      ASSERT_LT(pos, csr.ptr[i + 1]);  // the CSR position lies in row i ...
      EXPECT_EQ(csr.idx[pos], j);      // ... and names source j
      if (p > csc.ptr[j]) EXPECT_LT(csc.eid[p - 1], pos);  // stable order
      ++seen[pos];
    }
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
}

TEST(Graph, EmptyGraphIsValid) {
  auto ctx = make_context();
  dfgnn_graph_t raw = nullptr;
  DFGNN_ASSERT_OK(dfgnnGraphCreateCsr(ctx.get(), 0, 0, nullptr, nullptr, DFGNN_INDEX_INT32, DFGNN_MEMORY_HOST, nullptr,
                                      &raw));
  GraphPtr g(raw);
  int64_t n = -1, e = -1;
  DFGNN_ASSERT_OK(dfgnnGraphGetSize(raw, &n, &e));
  EXPECT_EQ(n, 0);
  EXPECT_EQ(e, 0);
  DFGNN_ASSERT_OK(dfgnnGraphCreateCoo(ctx.get(), 5, 0, nullptr, DFGNN_INDEX_INT64, DFGNN_MEMORY_HOST, nullptr, &raw));
  GraphPtr isolated(raw);
  DFGNN_ASSERT_OK(dfgnnGraphGetSize(raw, &n, &e));
  EXPECT_EQ(n, 5);
  EXPECT_EQ(e, 0);
}

// ---------------------------------------------------------------- one error per kind of bad input

TEST(GraphErrors, RowPtrNotStartingAtZero) {
  auto ctx = make_context();
  EXPECT_EQ(create_csr<int32_t>(ctx.get(), 2, 2, {1, 1, 2}, {0, 1}), DFGNN_STATUS_ROW_PTR_START);
  EXPECT_NE(last_message().find("row_ptr[0] = 1"), std::string::npos) << last_message();
}

TEST(GraphErrors, RowPtrDecreasing) {
  auto ctx = make_context();
  EXPECT_EQ(create_csr<int32_t>(ctx.get(), 3, 2, {0, 2, 1, 2}, {0, 1}), DFGNN_STATUS_ROW_PTR_DECREASING);
  EXPECT_NE(last_message().find("row 1"), std::string::npos) << last_message();
}

TEST(GraphErrors, RowPtrEndNotNnz) {
  auto ctx = make_context();
  EXPECT_EQ(create_csr<int32_t>(ctx.get(), 2, 3, {0, 1, 2}, {0, 1, 1}), DFGNN_STATUS_ROW_PTR_END);
  EXPECT_NE(last_message().find("nnz = 3"), std::string::npos) << last_message();
  // An interior entry beyond nnz is caught before any column index past the end is read.
  EXPECT_EQ(create_csr<int64_t>(ctx.get(), 2, 2, {0, 5, 2}, {0, 1}), DFGNN_STATUS_ROW_PTR_END);
  EXPECT_NE(last_message().find("row_ptr[1] = 5 exceeds nnz = 2"), std::string::npos) << last_message();
  EXPECT_EQ(create_csr<int64_t>(ctx.get(), 2, 2, {0, 3, 3}, {0, 1}), DFGNN_STATUS_ROW_PTR_END);
}

TEST(GraphErrors, ColumnIndexOutOfRange) {
  auto ctx = make_context();
  EXPECT_EQ(create_csr<int32_t>(ctx.get(), 2, 2, {0, 1, 2}, {0, 2}), DFGNN_STATUS_INDEX_OUT_OF_RANGE);
  EXPECT_NE(last_message().find("col_idx[1] = 2"), std::string::npos) << last_message();
  EXPECT_EQ(create_csr<int64_t>(ctx.get(), 2, 2, {0, 1, 2}, {-1, 0}), DFGNN_STATUS_INDEX_OUT_OF_RANGE);
  EXPECT_NE(last_message().find("col_idx[0] = -1"), std::string::npos) << last_message();
}

TEST(GraphErrors, CooIndexOutOfRange) {
  auto ctx = make_context();
  std::vector<int64_t> edge_index{0, 1, /* dst */ 1, 7};
  dfgnn_graph_t g = nullptr;
  EXPECT_EQ(dfgnnGraphCreateCoo(ctx.get(), 3, 2, edge_index.data(), DFGNN_INDEX_INT64, DFGNN_MEMORY_HOST, nullptr, &g),
            DFGNN_STATUS_INDEX_OUT_OF_RANGE);
  EXPECT_NE(last_message().find("edge_index[1][1] = 7"), std::string::npos) << last_message();
  EXPECT_EQ(g, nullptr);
}

TEST(GraphErrors, NegativeSizes) {
  auto ctx = make_context();
  EXPECT_EQ(create_csr<int32_t>(ctx.get(), -1, 0, {0}, {}), DFGNN_STATUS_NEGATIVE_SIZE);
  EXPECT_NE(last_message().find("num_nodes"), std::string::npos);
  EXPECT_EQ(create_csr<int32_t>(ctx.get(), 1, -4, {0, 0}, {}), DFGNN_STATUS_NEGATIVE_SIZE);
  EXPECT_NE(last_message().find("nnz"), std::string::npos);
  dfgnn_graph_t g = nullptr;
  std::vector<int64_t> e{0, 0};
  EXPECT_EQ(dfgnnGraphCreateCoo(ctx.get(), 1, -1, e.data(), DFGNN_INDEX_INT64, DFGNN_MEMORY_HOST, nullptr, &g),
            DFGNN_STATUS_NEGATIVE_SIZE);
}

TEST(GraphErrors, SizesBeyondIndexType) {
  auto ctx = make_context();
  const int64_t too_many = int64_t{std::numeric_limits<int32_t>::max()} + 1;
  std::vector<int32_t> ptr{0, 0};
  std::vector<int32_t> col{0};
  EXPECT_EQ(create_csr<int32_t>(ctx.get(), 1, too_many, ptr, col), DFGNN_STATUS_INDEX_OVERFLOW);
  EXPECT_NE(last_message().find("int32"), std::string::npos) << last_message();
  std::vector<int64_t> ptr64{0, 0};
  std::vector<int64_t> col64{0};
  EXPECT_EQ(create_csr<int64_t>(ctx.get(), too_many, 0, ptr64, col64), DFGNN_STATUS_INDEX_OVERFLOW);
  EXPECT_EQ(create_csr<int64_t>(ctx.get(), 1, too_many, ptr64, col64), DFGNN_STATUS_INDEX_OVERFLOW);
}

TEST(GraphErrors, NullPointersWithNonZeroSizes) {
  auto ctx = make_context();
  dfgnn_graph_t g = nullptr;
  std::vector<int32_t> ptr{0, 1}, col{0};
  EXPECT_EQ(dfgnnGraphCreateCsr(ctx.get(), 1, 1, nullptr, col.data(), DFGNN_INDEX_INT32, DFGNN_MEMORY_HOST, nullptr, &g),
            DFGNN_STATUS_NULL_POINTER);
  EXPECT_NE(last_message().find("row_ptr"), std::string::npos);
  EXPECT_EQ(dfgnnGraphCreateCsr(ctx.get(), 1, 1, ptr.data(), nullptr, DFGNN_INDEX_INT32, DFGNN_MEMORY_HOST, nullptr, &g),
            DFGNN_STATUS_NULL_POINTER);
  EXPECT_NE(last_message().find("col_idx"), std::string::npos);
  EXPECT_EQ(dfgnnGraphCreateCoo(ctx.get(), 2, 3, nullptr, DFGNN_INDEX_INT32, DFGNN_MEMORY_HOST, nullptr, &g),
            DFGNN_STATUS_NULL_POINTER);
  EXPECT_NE(last_message().find("edge_index"), std::string::npos);
}

TEST(GraphErrors, DuplicatesRejectedWhenAsked) {
  auto ctx = make_context();
  dfgnn_graph_options_t reject = dfgnnGraphDefaultOptions();
  reject.duplicates = DFGNN_DUPLICATES_REJECT;
  EXPECT_EQ(create_csr<int32_t>(ctx.get(), 3, 3, {0, 0, 0, 3}, {1, 0, 1}, reject), DFGNN_STATUS_DUPLICATE_EDGE);
  EXPECT_NE(last_message().find("1 -> 2"), std::string::npos) << last_message();
  EXPECT_EQ(create_csr<int32_t>(ctx.get(), 3, 3, {0, 0, 0, 3}, {1, 0, 2}, reject), DFGNN_STATUS_SUCCESS);
  EXPECT_EQ(create_csr<int32_t>(ctx.get(), 3, 3, {0, 0, 0, 3}, {1, 0, 1}), DFGNN_STATUS_SUCCESS);  // kept by default
}

TEST(GraphErrors, BadEnumsAndHandles) {
  auto ctx = make_context();
  dfgnn_graph_t g = nullptr;
  std::vector<int32_t> ptr{0, 0};
  EXPECT_EQ(dfgnnGraphCreateCsr(ctx.get(), 1, 0, ptr.data(), nullptr, static_cast<dfgnn_index_type_t>(7),
                                DFGNN_MEMORY_HOST, nullptr, &g),
            DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(dfgnnGraphCreateCsr(ctx.get(), 1, 0, ptr.data(), nullptr, DFGNN_INDEX_INT32,
                                static_cast<dfgnn_memory_t>(9), nullptr, &g),
            DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(dfgnnGraphCreateCsr(nullptr, 1, 0, ptr.data(), nullptr, DFGNN_INDEX_INT32, DFGNN_MEMORY_HOST, nullptr, &g),
            DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(last_message().find("ctx is null"), std::string::npos);
  EXPECT_EQ(dfgnnGraphCreateCsr(ctx.get(), 1, 0, ptr.data(), nullptr, DFGNN_INDEX_INT32, DFGNN_MEMORY_HOST, nullptr,
                                nullptr),
            DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(dfgnnGraphGetSize(nullptr, nullptr, nullptr), DFGNN_STATUS_INVALID_ARGUMENT);
  dfgnn_graph_options_t bad = dfgnnGraphDefaultOptions();
  bad.duplicates = static_cast<dfgnn_duplicates_t>(5);
  EXPECT_EQ(dfgnnGraphCreateCsr(ctx.get(), 1, 0, ptr.data(), nullptr, DFGNN_INDEX_INT32, DFGNN_MEMORY_HOST, &bad, &g),
            DFGNN_STATUS_INVALID_ARGUMENT);
}

TEST(GraphErrors, DeviceInputWithoutGpuSaysNoDevice) {
  int has = 0;
  auto ctx = make_context();
  DFGNN_ASSERT_OK(dfgnnHasDevice(ctx.get(), &has, nullptr));
  if (has) GTEST_SKIP() << "a CUDA device is present; this test covers machines without one";
  std::vector<int32_t> ptr{0, 1}, col{0};
  dfgnn_graph_t g = nullptr;
  EXPECT_EQ(dfgnnGraphCreateCsr(ctx.get(), 1, 1, ptr.data(), col.data(), DFGNN_INDEX_INT32, DFGNN_MEMORY_DEVICE,
                                nullptr, &g),
            DFGNN_STATUS_NO_DEVICE);
  EXPECT_NE(last_message().find("no CUDA device"), std::string::npos) << last_message();
  auto host = graph_from_edges(ctx.get(), 2, {0}, {1});
  const int32_t* p = nullptr;
  EXPECT_EQ(dfgnnGraphGetCsr(host.get(), DFGNN_MEMORY_DEVICE, &p, nullptr, nullptr), DFGNN_STATUS_NO_DEVICE);
}

TEST(Api, StatusStringsAndThreadLocalMessages) {
  for (int s = DFGNN_STATUS_SUCCESS; s <= DFGNN_STATUS_INTERNAL_ERROR; ++s)
    EXPECT_STRNE(dfgnnGetStatusString(static_cast<dfgnn_status_t>(s)), "unknown status") << s;
  EXPECT_STREQ(dfgnnGetStatusString(static_cast<dfgnn_status_t>(999)), "unknown status");
  auto ctx = make_context();
  EXPECT_EQ(create_csr<int32_t>(ctx.get(), 2, 2, {1, 1, 2}, {0, 1}), DFGNN_STATUS_ROW_PTR_START);
  std::string other;
  std::thread([&] { other = dfgnnGetLastErrorMessage(); }).join();
  EXPECT_EQ(other, "");  // a failure on this thread is not visible on another
  EXPECT_NE(last_message(), "");
  EXPECT_STREQ(dfgnnGetVersion(), "0.3.0");
}

// Ops with and without dropout run different kernels (Geo's P), so their recipes (loaded kernels) are
// kept apart: a recipe built for one must never serve the other.
TEST(Graph, RecipesWithAndWithoutDropoutAreKeptApart) {
  const int32_t edges[] = {0, 1, 1, 0};
  auto graph = dfgnn::Graph::from_coo(2, 2, edges, DFGNN_INDEX_INT32, dfgnnGraphDefaultOptions());
  auto ctx = std::make_unique<dfgnn::Context>();
  dfgnn::RecipeKey plain;
  plain.context = ctx->serial;
  plain.heads = 8;
  plain.dim = 8;
  dfgnn::RecipeKey dropped = plain;
  dropped.dropout = 1;
  graph->store_recipe(plain, std::make_shared<dfgnn::Recipe>());
  EXPECT_EQ(graph->recipe(dropped), nullptr);
  graph->store_recipe(dropped, std::make_shared<dfgnn::Recipe>());
  EXPECT_NE(graph->recipe(dropped), graph->recipe(plain));
}

TEST(Graph, RecipesOfDestroyedContextsAreDropped) {
  const int32_t edges[] = {0, 1, 1, 0};
  auto graph = dfgnn::Graph::from_coo(2, 2, edges, DFGNN_INDEX_INT32, dfgnnGraphDefaultOptions());
  auto first = std::make_unique<dfgnn::Context>();
  auto second = std::make_unique<dfgnn::Context>();
  auto key_of = [](const dfgnn::Context& c) {
    dfgnn::RecipeKey k;
    k.context = c.serial;
    k.heads = 1;
    k.dim = 8;
    return k;
  };
  const dfgnn::RecipeKey k1 = key_of(*first), k2 = key_of(*second);
  graph->store_recipe(k1, std::make_shared<dfgnn::Recipe>());
  graph->store_recipe(k2, std::make_shared<dfgnn::Recipe>());
  EXPECT_TRUE(dfgnn::Context::alive(k1.context));
  EXPECT_NE(graph->recipe(k1), nullptr);  // another live context's recipe stays
  first.reset();
  EXPECT_FALSE(dfgnn::Context::alive(k1.context));
  auto third = std::make_unique<dfgnn::Context>();
  graph->store_recipe(key_of(*third), std::make_shared<dfgnn::Recipe>());
  EXPECT_EQ(graph->recipe(k1), nullptr);  // the destroyed context's recipe went with the next store
  EXPECT_NE(graph->recipe(k2), nullptr);
}

// ---------------------------------------------------------------- graph creation through the C API
namespace dfgnn {
namespace {

using test::expect_refusal;
using test::api_call;

TEST(GraphErrors, CreationRefusalsNameTheArgument) {
  auto ctx = test::make_context();
  dfgnn_graph_t g = nullptr;
  const int64_t ei[2] = {0, 1};
  const int32_t ptr[2] = {0, 0};
  expect_refusal(api_call(dfgnnGraphCreateCoo(ctx.get(), 2, 1, ei, DFGNN_INDEX_INT64, static_cast<dfgnn_memory_t>(7),
                                              nullptr, &g)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "memory 7 is neither DFGNN_MEMORY_HOST nor DFGNN_MEMORY_DEVICE");
  expect_refusal(api_call(dfgnnGraphCreateCoo(ctx.get(), 2, 1, ei, static_cast<dfgnn_index_type_t>(5),
                                              DFGNN_MEMORY_HOST, nullptr, &g)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "index_type 5 is neither");
  expect_refusal(api_call(dfgnnGraphCreateCoo(ctx.get(), 2, 3, nullptr, DFGNN_INDEX_INT64, DFGNN_MEMORY_HOST, nullptr,
                                              &g)),
                 DFGNN_STATUS_NULL_POINTER, "edge_index is null but num_edges = 3");
  expect_refusal(api_call(dfgnnGraphCreateCoo(ctx.get(), 2, int64_t{1} << 31, ei, DFGNN_INDEX_INT32,
                                              DFGNN_MEMORY_HOST, nullptr, &g)),
                 DFGNN_STATUS_INDEX_OVERFLOW, "num_edges = 2147483648 does not fit the int32 index type");
  expect_refusal(api_call(dfgnnGraphCreateCoo(ctx.get(), int64_t{1} << 31, 0, nullptr, DFGNN_INDEX_INT64,
                                              DFGNN_MEMORY_HOST, nullptr, &g)),
                 DFGNN_STATUS_INDEX_OVERFLOW, "num_nodes = 2147483648 exceeds dfgnn's limit of 2147483646 nodes");
  expect_refusal(api_call(dfgnnGraphCreateCoo(ctx.get(), 2, 1, ei, DFGNN_INDEX_INT64, DFGNN_MEMORY_HOST, nullptr,
                                              nullptr)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "graph (output) is null");
  expect_refusal(api_call(dfgnnGraphCreateCsr(ctx.get(), 1, 2, ptr, nullptr, DFGNN_INDEX_INT32, DFGNN_MEMORY_HOST,
                                              nullptr, &g)),
                 DFGNN_STATUS_NULL_POINTER, "col_idx is null but nnz = 2");
  dfgnn_graph_options_t options = dfgnnGraphDefaultOptions();
  options.duplicates = static_cast<dfgnn_duplicates_t>(3);
  expect_refusal(api_call(dfgnnGraphCreateCoo(ctx.get(), 2, 1, ei, DFGNN_INDEX_INT64, DFGNN_MEMORY_HOST, &options,
                                              &g)),
                 DFGNN_STATUS_INVALID_ARGUMENT, "options.duplicates 3 is not a dfgnn_duplicates_t value");
  EXPECT_EQ(g, nullptr);
}

}  // namespace
}  // namespace dfgnn
