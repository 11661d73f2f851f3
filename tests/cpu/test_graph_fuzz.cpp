// Random malformed CSR and COO arrays must give a status, never a crash or an out-of-bounds read.
// CTest also runs this file in a build with AddressSanitizer + UBSan (label "sanitize").
#include <dfgnn/dfgnn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace {

// Mutates a valid CSR into a possibly invalid one; the arrays keep the lengths the call claims,
// because a caller lying about lengths is outside what any C API can check.
template <typename Index>
void fuzz_csr(std::mt19937_64& rng, dfgnn_context_t ctx, int iterations) {
  std::uniform_int_distribution<int> small(0, 40);
  for (int it = 0; it < iterations; ++it) {
    const int64_t n = small(rng);
    std::vector<Index> ptr(static_cast<size_t>(n) + 1, 0);
    for (int64_t i = 0; i < n; ++i) ptr[i + 1] = ptr[i] + small(rng) % 6;
    int64_t nnz = ptr[n];
    std::vector<Index> col(static_cast<size_t>(nnz) + 1, 0);
    for (auto& c : col) c = n > 0 ? static_cast<Index>(rng() % n) : 0;
    // Apply 0-3 random corruptions.
    const int corruptions = small(rng) % 4;
    for (int k = 0; k < corruptions; ++k) {
      switch (rng() % 6) {
        case 0: ptr[rng() % ptr.size()] = static_cast<Index>(static_cast<int64_t>(rng() % 100) - 50); break;
        case 1: col[rng() % col.size()] = static_cast<Index>(static_cast<int64_t>(rng() % 200) - 100); break;
        case 2: col[rng() % col.size()] = std::numeric_limits<Index>::max(); break;
        case 3: ptr[rng() % ptr.size()] = std::numeric_limits<Index>::min(); break;
        case 4: nnz = static_cast<int64_t>(rng() % (col.size() + 1)); break;  // stays within col's length
        case 5: ptr[n] = static_cast<Index>(nnz + 1); break;
      }
    }
    dfgnn_graph_options_t options = dfgnnGraphDefaultOptions();
    options.add_self_loops = static_cast<int>(rng() % 2);
    options.duplicates = static_cast<dfgnn_duplicates_t>(rng() % 2);
    dfgnn_graph_t g = nullptr;
    const auto type = sizeof(Index) == 4 ? DFGNN_INDEX_INT32 : DFGNN_INDEX_INT64;
    dfgnn_status_t s = dfgnnGraphCreateCsr(ctx, n, nnz, ptr.data(), col.data(), type, DFGNN_MEMORY_HOST, &options, &g);
    if (s == DFGNN_STATUS_SUCCESS) {
      ASSERT_NE(g, nullptr);
      int64_t nn = 0, ne = 0;
      ASSERT_EQ(dfgnnGraphGetSize(g, &nn, &ne), DFGNN_STATUS_SUCCESS);
      ASSERT_EQ(nn, n);
      dfgnn_fingerprint_t fp;
      (void)dfgnnGraphGetFingerprint(g, &fp);
      dfgnnGraphDestroy(g);
    } else {
      ASSERT_GE(s, DFGNN_STATUS_INVALID_ARGUMENT);
      ASSERT_LE(s, DFGNN_STATUS_DUPLICATE_EDGE) << dfgnnGetLastErrorMessage();
      ASSERT_STRNE(dfgnnGetLastErrorMessage(), "");
    }
  }
}

template <typename Index>
void fuzz_coo(std::mt19937_64& rng, dfgnn_context_t ctx, int iterations) {
  for (int it = 0; it < iterations; ++it) {
    const int64_t n = static_cast<int64_t>(rng() % 30);
    const int64_t e = static_cast<int64_t>(rng() % 60);
    std::vector<Index> edge_index(static_cast<size_t>(2 * e));
    for (auto& v : edge_index) v = static_cast<Index>(static_cast<int64_t>(rng() % (n + 4)) - (rng() % 8 == 0 ? 3 : 0));
    dfgnn_graph_options_t options = dfgnnGraphDefaultOptions();
    options.add_self_loops = static_cast<int>(rng() % 2);
    options.duplicates = static_cast<dfgnn_duplicates_t>(rng() % 2);
    dfgnn_graph_t g = nullptr;
    const auto type = sizeof(Index) == 4 ? DFGNN_INDEX_INT32 : DFGNN_INDEX_INT64;
    const int64_t claimed_n = rng() % 10 == 0 ? -n : n;
    dfgnn_status_t s = dfgnnGraphCreateCoo(ctx, claimed_n, e, edge_index.data(), type, DFGNN_MEMORY_HOST, &options, &g);
    if (s == DFGNN_STATUS_SUCCESS) {
      int64_t nn = 0, ne = 0;
      ASSERT_EQ(dfgnnGraphGetSize(g, &nn, &ne), DFGNN_STATUS_SUCCESS);
      const int32_t *ptr = nullptr, *idx = nullptr;
      ASSERT_EQ(dfgnnGraphGetCsc(g, DFGNN_MEMORY_HOST, &ptr, &idx, nullptr), DFGNN_STATUS_SUCCESS);
      ASSERT_EQ(ptr[nn], ne);
      dfgnnGraphDestroy(g);
    } else {
      ASSERT_STRNE(dfgnnGetLastErrorMessage(), "");
      ASSERT_EQ(g, nullptr);
    }
  }
}

}  // namespace

TEST(GraphFuzz, MalformedCsrNeverCrashes) {
  std::mt19937_64 rng(20261129);
  dfgnn_context_t ctx = nullptr;
  ASSERT_EQ(dfgnnCreate(&ctx), DFGNN_STATUS_SUCCESS);
  fuzz_csr<int32_t>(rng, ctx, 3000);
  fuzz_csr<int64_t>(rng, ctx, 3000);
  dfgnnDestroy(ctx);
}

TEST(GraphFuzz, MalformedCooNeverCrashes) {
  std::mt19937_64 rng(7);
  dfgnn_context_t ctx = nullptr;
  ASSERT_EQ(dfgnnCreate(&ctx), DFGNN_STATUS_SUCCESS);
  fuzz_coo<int32_t>(rng, ctx, 3000);
  fuzz_coo<int64_t>(rng, ctx, 3000);
  dfgnnDestroy(ctx);
}
