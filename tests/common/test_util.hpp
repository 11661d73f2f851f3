// Helpers shared by the GoogleTest suites.
#pragma once

#include <dfgnn/dfgnn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

// Asserts a C API call succeeded, printing the library's message otherwise.
#define DFGNN_ASSERT_OK(call)                                                              \
  do {                                                                                     \
    dfgnn_status_t dfgnn_status_ = (call);                                                 \
    ASSERT_EQ(dfgnn_status_, DFGNN_STATUS_SUCCESS)                                         \
        << #call << ": " << dfgnnGetStatusString(dfgnn_status_) << ": " << dfgnnGetLastErrorMessage(); \
  } while (0)

namespace dfgnn::test {

// RAII owners for C handles.
struct ContextDeleter {
  void operator()(dfgnn_context* c) const { dfgnnDestroy(c); }
};
struct GraphDeleter {
  void operator()(dfgnn_graph* g) const { dfgnnGraphDestroy(g); }
};
using ContextPtr = std::unique_ptr<dfgnn_context, ContextDeleter>;
using GraphPtr = std::unique_ptr<dfgnn_graph, GraphDeleter>;

// Whether a CUDA device is usable (else the reason); GPU tests start with REQUIRE_GPU(ctx), which
// skips them with that reason.
inline bool has_gpu(dfgnn_context_t ctx, std::string& reason) {
  int has = 0;
  const char* why = nullptr;
  dfgnnHasDevice(ctx, &has, &why);
  if (!has) reason = why;
  return has != 0;
}

#define REQUIRE_GPU(ctx)                                                           \
  do {                                                                             \
    std::string reason_;                                                           \
    if (!has_gpu(ctx, reason_)) GTEST_SKIP() << "GPU test skipped: " << reason_;   \
  } while (0)

// A context without a tuning database, so tests never read or write the user's cache and compile
// counters start from zero; database tests opt in with dfgnnSetDatabase.
inline ContextPtr make_context() {
  dfgnn_context_t ctx = nullptr;
  EXPECT_EQ(dfgnnCreate(&ctx), DFGNN_STATUS_SUCCESS);
  EXPECT_EQ(dfgnnSetDatabase(ctx, "", ""), DFGNN_STATUS_SUCCESS);
  return ContextPtr(ctx);
}

// Graph from an edge list j -> i given as (src, dst) pairs; fails the test on error.
inline GraphPtr graph_from_edges(dfgnn_context_t ctx, int64_t n, const std::vector<int64_t>& src,
                                 const std::vector<int64_t>& dst, bool add_self_loops = false) {
  std::vector<int64_t> edge_index(src);
  edge_index.insert(edge_index.end(), dst.begin(), dst.end());
  dfgnn_graph_options_t options = dfgnnGraphDefaultOptions();
  options.add_self_loops = add_self_loops ? 1 : 0;
  dfgnn_graph_t g = nullptr;
  dfgnn_status_t s = dfgnnGraphCreateCoo(ctx, n, static_cast<int64_t>(src.size()), edge_index.data(),
                                         DFGNN_INDEX_INT64, DFGNN_MEMORY_HOST, &options, &g);
  EXPECT_EQ(s, DFGNN_STATUS_SUCCESS) << dfgnnGetLastErrorMessage();
  return GraphPtr(g);
}

// Random directed graph: each node gets a random in-degree in [0, max_degree], sources uniform.
inline GraphPtr random_graph(dfgnn_context_t ctx, int64_t n, int max_degree, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> node(0, n - 1);
  std::uniform_int_distribution<int> deg(0, max_degree);
  std::vector<int64_t> src, dst;
  for (int64_t i = 0; i < n; ++i) {
    const int d = deg(rng);
    for (int k = 0; k < d; ++k) {
      src.push_back(node(rng));
      dst.push_back(i);
    }
  }
  return graph_from_edges(ctx, n, src, dst);
}

inline std::vector<double> random_vector(size_t count, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(count);
  for (double& x : v) x = u(rng);
  return v;
}

// Root of the repository (for data/) and ../shared/datasets (may be absent).
inline std::filesystem::path source_dir() { return DFGNN_SOURCE_DIR; }
inline std::filesystem::path shared_datasets() { return DFGNN_SHARED_DATASETS; }

// One configuration of bench/zoo.txt, the op shapes users run (the sweep, the shipped files and the
// benchmarks read the same list).
struct ZooEntry {
  std::string model, dtype;  // as written there: "gat", "float32"
  int heads = 0, dim = 0;
  dfgnn_op_t op() const {
    dfgnn_model_t m = DFGNN_MODEL_GAT;
    EXPECT_EQ(dfgnnModelFromName(model.c_str(), &m), DFGNN_STATUS_SUCCESS) << "bench/zoo.txt: model " << model;
    const dfgnn_dtype_t t = dtype == "float16" ? DFGNN_DTYPE_FLOAT16 : dtype == "bfloat16" ? DFGNN_DTYPE_BFLOAT16
                                                                                           : DFGNN_DTYPE_FLOAT32;
    EXPECT_TRUE(dtype == "float32" || t != DFGNN_DTYPE_FLOAT32) << "bench/zoo.txt: dtype " << dtype;
    return dfgnnOpDefault(m, t, heads, dim);
  }
};
inline std::vector<ZooEntry> read_zoo() {
  std::ifstream zoo(source_dir() / "bench" / "zoo.txt");
  EXPECT_TRUE(zoo) << "bench/zoo.txt not found";
  std::vector<ZooEntry> out;
  std::string line;
  while (std::getline(zoo, line)) {
    std::istringstream words(line.substr(0, line.find('#')));
    ZooEntry e;
    if (words >> e.model >> e.heads >> e.dim >> e.dtype) out.push_back(e);
  }
  return out;
}

// The shipped winners files of sm_90: data/tuning/sm90*.db but the modules file, one per GPU class
// tuned (sm90.db on the H200, sm90-h100.db on the H100), in name order.
inline std::vector<std::filesystem::path> shipped_winners_files() {
  std::vector<std::filesystem::path> out;
  for (const auto& entry : std::filesystem::directory_iterator(source_dir() / "data" / "tuning")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("sm90", 0) == 0 && entry.path().extension() == ".db" && name != "sm90-modules.db")
      out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The repository's Cora, as read or with a self-loop per node (as PyG's GATConv uses it).
inline GraphPtr cora_graph(dfgnn_context_t ctx, bool self_loops) {
  dfgnn_graph_options_t options = dfgnnGraphDefaultOptions();
  options.add_self_loops = self_loops ? 1 : 0;
  dfgnn_graph_t g = nullptr;
  EXPECT_EQ(dfgnnGraphCreateFromFile(ctx, (source_dir() / "data/cora").c_str(), &options, &g), DFGNN_STATUS_SUCCESS)
      << dfgnnGetLastErrorMessage();
  return GraphPtr(g);
}
inline GraphPtr cora_with_loops(dfgnn_context_t ctx) { return cora_graph(ctx, true); }

// Skips the current test with a message when ../shared/datasets is not there.
#define DFGNN_REQUIRE_SHARED_DATASETS()                                                              \
  do {                                                                                               \
    if (!std::filesystem::exists(::dfgnn::test::shared_datasets()))                                  \
      GTEST_SKIP() << "../shared/datasets not found at " << ::dfgnn::test::shared_datasets()         \
                   << "; this test reads real graphs from it";                                       \
  } while (0)

// The status of a C API call and the message it left (empty on success).
struct ApiCall {
  dfgnn_status_t status;
  std::string message;
};
inline ApiCall api_call(dfgnn_status_t status) {
  return {status, status == DFGNN_STATUS_SUCCESS ? std::string() : std::string(dfgnnGetLastErrorMessage())};
}
// A refusal with exactly `status`, whose message names the problem with `phrase`.
inline void expect_refusal(const ApiCall& o, dfgnn_status_t status, const std::string& phrase) {
  EXPECT_EQ(o.status, status) << dfgnnGetStatusString(o.status) << ": " << o.message;
  EXPECT_NE(o.message.find(phrase), std::string::npos) << "'" << phrase << "' not in: " << o.message;
}

}  // namespace dfgnn::test
