// Graphs built on the GPU from device arrays against the host build of the same arrays: identical
// CSR, CSC, edge ids and fingerprints (bit for bit), identical statuses and messages for bad input,
// and no device memory kept by failed builds. Each test skips with a message where no GPU exists.
#include "test_util.hpp"

#include <cuda_runtime_api.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace dfgnn::test;

namespace {

// A device copy of a host array (freed at scope exit).
struct DeviceArray {
  void* ptr = nullptr;
  template <typename T>
  explicit DeviceArray(const std::vector<T>& host) {
    EXPECT_EQ(cudaMalloc(&ptr, std::max<size_t>(1, host.size() * sizeof(T))), cudaSuccess);
    if (!host.empty()) EXPECT_EQ(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceArray() { cudaFree(ptr); }
};

struct Outcome {
  dfgnn_status_t status;
  std::string message;
  GraphPtr graph;
};

template <typename I>
Outcome build_coo(dfgnn_context_t ctx, int64_t n, const std::vector<I>& edge_index, dfgnn_memory_t memory,
                  const dfgnn_graph_options_t& options) {
  const dfgnn_index_type_t type = sizeof(I) == 4 ? DFGNN_INDEX_INT32 : DFGNN_INDEX_INT64;
  const int64_t e = static_cast<int64_t>(edge_index.size() / 2);
  dfgnn_graph_t g = nullptr;
  dfgnn_status_t s;
  if (memory == DFGNN_MEMORY_HOST) {
    s = dfgnnGraphCreateCoo(ctx, n, e, edge_index.data(), type, memory, &options, &g);
  } else {
    DeviceArray d(edge_index);
    s = dfgnnGraphCreateCoo(ctx, n, e, d.ptr, type, memory, &options, &g);
  }
  return {s, s == DFGNN_STATUS_SUCCESS ? "" : dfgnnGetLastErrorMessage(), GraphPtr(g)};
}

template <typename I>
Outcome build_csr(dfgnn_context_t ctx, const std::vector<I>& ptr, const std::vector<I>& col, dfgnn_memory_t memory,
                  const dfgnn_graph_options_t& options) {
  const dfgnn_index_type_t type = sizeof(I) == 4 ? DFGNN_INDEX_INT32 : DFGNN_INDEX_INT64;
  const int64_t n = static_cast<int64_t>(ptr.size()) - 1, nnz = static_cast<int64_t>(col.size());
  dfgnn_graph_t g = nullptr;
  dfgnn_status_t s;
  if (memory == DFGNN_MEMORY_HOST) {
    s = dfgnnGraphCreateCsr(ctx, n, nnz, ptr.data(), col.data(), type, memory, &options, &g);
  } else {
    DeviceArray dp(ptr), dc(col);
    s = dfgnnGraphCreateCsr(ctx, n, nnz, dp.ptr, dc.ptr, type, memory, &options, &g);
  }
  return {s, s == DFGNN_STATUS_SUCCESS ? "" : dfgnnGetLastErrorMessage(), GraphPtr(g)};
}

std::vector<int32_t> to_host(const int32_t* device, size_t count) {
  std::vector<int32_t> host(count);
  if (count > 0) EXPECT_EQ(cudaMemcpy(host.data(), device, count * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

// Both structures on both sides, as host arrays and as the device graph's own device arrays.
void expect_same_graph(dfgnn_graph_t host, dfgnn_graph_t device, const std::string& what) {
  int64_t hn = 0, he = 0, dn = 0, de = 0;
  ASSERT_EQ(dfgnnGraphGetSize(host, &hn, &he), DFGNN_STATUS_SUCCESS);
  ASSERT_EQ(dfgnnGraphGetSize(device, &dn, &de), DFGNN_STATUS_SUCCESS);
  ASSERT_EQ(hn, dn) << what;
  ASSERT_EQ(he, de) << what;
  using Getter = dfgnn_status_t (*)(dfgnn_graph_t, dfgnn_memory_t, const int32_t**, const int32_t**, const int32_t**);
  for (auto [get, name] : {std::pair<Getter, const char*>{dfgnnGraphGetCsr, "CSR"}, {dfgnnGraphGetCsc, "CSC"}}) {
    const int32_t *hp, *hi, *hx, *dp, *di, *dx, *pp, *pi, *px;
    ASSERT_EQ(get(host, DFGNN_MEMORY_HOST, &hp, &hi, &hx), DFGNN_STATUS_SUCCESS);
    ASSERT_EQ(get(device, DFGNN_MEMORY_DEVICE, &dp, &di, &dx), DFGNN_STATUS_SUCCESS) << dfgnnGetLastErrorMessage();
    ASSERT_EQ(get(device, DFGNN_MEMORY_HOST, &pp, &pi, &px), DFGNN_STATUS_SUCCESS) << dfgnnGetLastErrorMessage();
    const std::vector<int32_t> ptr(hp, hp + hn + 1), idx(hi, hi + he), eid(hx, hx + he);
    EXPECT_EQ(to_host(dp, hn + 1), ptr) << what << " " << name << " ptr (device arrays)";
    EXPECT_EQ(to_host(di, he), idx) << what << " " << name << " idx (device arrays)";
    EXPECT_EQ(to_host(dx, he), eid) << what << " " << name << " eid (device arrays)";
    EXPECT_EQ(std::vector<int32_t>(pp, pp + hn + 1), ptr) << what << " " << name << " ptr (downloaded)";
    EXPECT_EQ(std::vector<int32_t>(pi, pi + he), idx) << what << " " << name << " idx (downloaded)";
    EXPECT_EQ(std::vector<int32_t>(px, px + he), eid) << what << " " << name << " eid (downloaded)";
  }
  dfgnn_fingerprint_t hf, df;
  std::memset(&hf, 0, sizeof hf);
  std::memset(&df, 0xff, sizeof df);
  ASSERT_EQ(dfgnnGraphGetFingerprint(host, &hf), DFGNN_STATUS_SUCCESS);
  ASSERT_EQ(dfgnnGraphGetFingerprint(device, &df), DFGNN_STATUS_SUCCESS);
  EXPECT_EQ(std::memcmp(&hf, &df, sizeof hf), 0) << what << ": fingerprints differ";
  double distance = -1;
  ASSERT_EQ(dfgnnFingerprintDistance(&hf, &df, &distance), DFGNN_STATUS_SUCCESS);
  EXPECT_EQ(distance, 0.0) << what;
}

// edge_index [2, E] as int64: a uniform part, a few hubs (in- and out-), loops and repeats.
std::vector<int64_t> corpus_graph(int64_t n, int64_t e, int hubs, uint64_t seed, bool repeats) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> node(0, std::max<int64_t>(n - 1, 0));
  std::vector<int64_t> src, dst;
  for (int64_t k = 0; k < e; ++k) {
    int64_t s = node(rng), d = node(rng);
    if (hubs > 0 && k % 3 == 0) d = node(rng) % hubs;       // in-hubs: rows 0..hubs-1
    if (hubs > 0 && k % 5 == 0) s = n - 1 - node(rng) % hubs;  // out-hubs: columns at the end
    if (k % 97 == 0) s = d;                                  // some self-loops
    src.push_back(s);
    dst.push_back(d);
    if (repeats && k % 41 == 0) {
      src.push_back(s);
      dst.push_back(d);
    }
  }
  std::vector<int64_t> out(src);
  out.insert(out.end(), dst.begin(), dst.end());
  return out;
}

template <typename I>
std::vector<I> narrow(const std::vector<int64_t>& v) {
  return std::vector<I>(v.begin(), v.end());
}

dfgnn_graph_options_t options(bool loops, bool reject) {
  dfgnn_graph_options_t o = dfgnnGraphDefaultOptions();
  o.add_self_loops = loops ? 1 : 0;
  o.duplicates = reject ? DFGNN_DUPLICATES_REJECT : DFGNN_DUPLICATES_KEEP;
  return o;
}

template <typename I>
void expect_same_outcome(dfgnn_context_t ctx, int64_t n, const std::vector<int64_t>& ei64,
                         const dfgnn_graph_options_t& o, const std::string& what) {
  const std::vector<I> ei = narrow<I>(ei64);
  Outcome h = build_coo(ctx, n, ei, DFGNN_MEMORY_HOST, o);
  Outcome d = build_coo(ctx, n, ei, DFGNN_MEMORY_DEVICE, o);
  ASSERT_EQ(d.status, h.status) << what << ": host says \"" << h.message << "\", device says \"" << d.message << "\"";
  EXPECT_EQ(d.message, h.message) << what;
  if (h.status == DFGNN_STATUS_SUCCESS) expect_same_graph(h.graph.get(), d.graph.get(), what);
}

}  // namespace

TEST(DeviceBuild, CooMatchesHostBuildOnCorpus) {
  ContextPtr ctx = make_context();
  REQUIRE_GPU(ctx.get());
  struct Shape {
    int64_t n, e;
    int hubs;
  };
  const Shape shapes[] = {{0, 0, 0},     {1, 0, 0},     {1, 5, 0},        {7, 40, 0},      {1000, 0, 0},
                          {1000, 3000, 0}, {5000, 60000, 3}, {20000, 400000, 8}, {3, 100000, 1}, {200000, 100, 0}};
  uint64_t seed = 1;
  for (const Shape& sh : shapes) {
    for (bool repeats : {false, true}) {
      const std::vector<int64_t> ei = corpus_graph(sh.n, sh.e, sh.hubs, seed++, repeats);
      for (bool loops : {false, true}) {
        for (bool reject : {false, true}) {
          const std::string what = "n=" + std::to_string(sh.n) + " e=" + std::to_string(sh.e) +
                                   " hubs=" + std::to_string(sh.hubs) + (repeats ? " repeats" : "") +
                                   (loops ? " +loops" : "") + (reject ? " reject" : "");
          expect_same_outcome<int32_t>(ctx.get(), sh.n, ei, options(loops, reject), what + " int32");
          expect_same_outcome<int64_t>(ctx.get(), sh.n, ei, options(loops, reject), what + " int64");
        }
      }
    }
  }
}

TEST(DeviceBuild, CoraFromFileMatchesDeviceEdgeIndex) {
  ContextPtr ctx = make_context();
  REQUIRE_GPU(ctx.get());
  dfgnn_graph_t file = nullptr;
  ASSERT_EQ(dfgnnGraphCreateFromFile(ctx.get(), (source_dir() / "data/cora").c_str(), nullptr, &file),
            DFGNN_STATUS_SUCCESS);
  GraphPtr from_file(file);
  // The file graph's own CSR, back to an edge_index in CSR order: the same edges, other ids.
  int64_t n = 0, e = 0;
  dfgnnGraphGetSize(file, &n, &e);
  const int32_t *ptr, *idx, *eid;
  ASSERT_EQ(dfgnnGraphGetCsr(file, DFGNN_MEMORY_HOST, &ptr, &idx, &eid), DFGNN_STATUS_SUCCESS);
  std::vector<int64_t> ei(2 * e);
  for (int64_t p = 0; p < e; ++p) ei[eid[p]] = idx[p];
  for (int64_t i = 0; i < n; ++i)
    for (int32_t p = ptr[i]; p < ptr[i + 1]; ++p) ei[e + eid[p]] = i;
  Outcome d = build_coo(ctx.get(), n, ei, DFGNN_MEMORY_DEVICE, dfgnnGraphDefaultOptions());
  ASSERT_EQ(d.status, DFGNN_STATUS_SUCCESS) << d.message;
  expect_same_graph(file, d.graph.get(), "cora");
}

// A host-built graph's device CSR comes up without its edge ids (a forward without edge features
// never reads them); asked for, they come up then and equal the host's, beside the same ptr and idx.
TEST(DeviceBuild, HostBuiltCsrEdgeIdsUploadWhenAskedFor) {
  ContextPtr ctx = make_context();
  REQUIRE_GPU(ctx.get());
  const std::vector<int64_t> ei = corpus_graph(3000, 40000, 3, 11, true);
  Outcome h = build_coo(ctx.get(), 3000, ei, DFGNN_MEMORY_HOST, dfgnnGraphDefaultOptions());
  ASSERT_EQ(h.status, DFGNN_STATUS_SUCCESS) << h.message;
  int64_t n = 0, e = 0;
  ASSERT_EQ(dfgnnGraphGetSize(h.graph.get(), &n, &e), DFGNN_STATUS_SUCCESS);
  const int32_t *hp, *hi, *hx, *dp, *di, *dp2, *di2, *dx;
  ASSERT_EQ(dfgnnGraphGetCsr(h.graph.get(), DFGNN_MEMORY_HOST, &hp, &hi, &hx), DFGNN_STATUS_SUCCESS);
  ASSERT_EQ(dfgnnGraphGetCsr(h.graph.get(), DFGNN_MEMORY_DEVICE, &dp, &di, nullptr), DFGNN_STATUS_SUCCESS)
      << dfgnnGetLastErrorMessage();
  ASSERT_EQ(dfgnnGraphGetCsr(h.graph.get(), DFGNN_MEMORY_DEVICE, &dp2, &di2, &dx), DFGNN_STATUS_SUCCESS)
      << dfgnnGetLastErrorMessage();
  EXPECT_EQ(dp2, dp);  // the same upload, not a second one
  EXPECT_EQ(di2, di);
  ASSERT_NE(dx, nullptr);
  EXPECT_EQ(to_host(dp, n + 1), std::vector<int32_t>(hp, hp + n + 1));
  EXPECT_EQ(to_host(di, e), std::vector<int32_t>(hi, hi + e));
  EXPECT_EQ(to_host(dx, e), std::vector<int32_t>(hx, hx + e));
}

TEST(DeviceBuild, BadIdsGetTheHostMessage) {
  ContextPtr ctx = make_context();
  REQUIRE_GPU(ctx.get());
  const int64_t n = 1000, e = 50000;
  std::vector<int64_t> base = corpus_graph(n, e, 2, 77, false);
  struct Poison {
    int64_t pos;  // in [0, 2E): source or target row
    int64_t value;
  };
  const std::vector<std::vector<Poison>> cases = {
      {{10, -1}},
      {{e + 10, n}},
      {{e - 1, n + 5}},
      {{2 * e - 1, -7}},
      {{40000, -2}, {e + 39999, n}},   // a target earlier than a bad source: the target is reported
      {{30000, n}, {e + 30000, -1}},   // both of one edge: the source is reported
      {{5, int64_t{1} << 40}},          // beyond int32 (int64 input only)
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    std::vector<int64_t> ei = base;
    for (const Poison& p : cases[c]) ei[p.pos] = p.value;
    expect_same_outcome<int64_t>(ctx.get(), n, ei, options(false, false), "bad ids case " + std::to_string(c) + " int64");
    if (c + 1 < cases.size())
      expect_same_outcome<int32_t>(ctx.get(), n, ei, options(true, false), "bad ids case " + std::to_string(c) + " int32");
  }
}

TEST(DeviceBuild, CsrInputMatchesHostIncludingErrors) {
  ContextPtr ctx = make_context();
  REQUIRE_GPU(ctx.get());
  std::mt19937_64 rng(5);
  const int64_t n = 3000;
  std::vector<int64_t> ptr{0}, col;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t deg = i % 500 == 0 ? 900 : static_cast<int64_t>(rng() % 12);
    for (int64_t k = 0; k < deg; ++k) col.push_back(static_cast<int64_t>(rng() % n));
    if (i % 7 == 0) col.push_back(i);  // a loop
    ptr.push_back(static_cast<int64_t>(col.size()));
  }
  auto same = [&](const std::vector<int64_t>& p, const std::vector<int64_t>& c, bool loops, const std::string& what) {
    for (int width : {4, 8}) {
      Outcome h, d;
      if (width == 4) {
        h = build_csr(ctx.get(), narrow<int32_t>(p), narrow<int32_t>(c), DFGNN_MEMORY_HOST, options(loops, false));
        d = build_csr(ctx.get(), narrow<int32_t>(p), narrow<int32_t>(c), DFGNN_MEMORY_DEVICE, options(loops, false));
      } else {
        h = build_csr(ctx.get(), p, c, DFGNN_MEMORY_HOST, options(loops, false));
        d = build_csr(ctx.get(), p, c, DFGNN_MEMORY_DEVICE, options(loops, false));
      }
      ASSERT_EQ(d.status, h.status) << what << ": host \"" << h.message << "\", device \"" << d.message << "\"";
      EXPECT_EQ(d.message, h.message) << what;
      if (h.status == DFGNN_STATUS_SUCCESS) expect_same_graph(h.graph.get(), d.graph.get(), what);
    }
  };
  same(ptr, col, false, "csr");
  same(ptr, col, true, "csr +loops");
  auto bad_ptr = ptr;
  bad_ptr[0] = 1;
  same(bad_ptr, col, false, "row_ptr[0] != 0");
  bad_ptr = ptr;
  bad_ptr[1500] = bad_ptr[1499] - 1;
  same(bad_ptr, col, false, "row_ptr decreasing");
  bad_ptr = ptr;
  bad_ptr[2000] = static_cast<int64_t>(col.size()) + 3;
  same(bad_ptr, col, false, "row_ptr past nnz");
  bad_ptr = ptr;
  bad_ptr[n] = static_cast<int64_t>(col.size()) - 1;
  same(bad_ptr, col, false, "row_ptr end != nnz");
  auto bad_col = col;
  bad_col[col.size() / 2] = n;
  bad_col[col.size() / 3] = -4;
  same(ptr, bad_col, false, "col_idx out of range");
}

// Free device memory once the device is idle and the default pool (stream-ordered allocations) has
// returned what it caches.
static size_t free_device_memory() {
  cudaDeviceSynchronize();
  cudaMemPool_t pool;
  int device = 0;
  cudaGetDevice(&device);
  cudaDeviceGetDefaultMemPool(&pool, device);
  cudaMemPoolTrimTo(pool, 0);
  size_t free_bytes = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  return free_bytes;
}

TEST(DeviceBuild, FailedBuildsKeepNoDeviceMemory) {
  ContextPtr ctx = make_context();
  REQUIRE_GPU(ctx.get());
  const int64_t n = 100000, e = 2000000;
  std::vector<int64_t> ei = corpus_graph(n, e, 4, 9, true);
  std::vector<int64_t> duplicated = ei;  // valid ids, with the repeats the corpus graph holds
  ei[e + e / 2] = n;  // one bad target, found after the scan of every edge
  DeviceArray d(ei), dup(duplicated);  // both inputs exist before the free memory is read
  const size_t free_before = free_device_memory();
  for (int round = 0; round < 20; ++round) {
    dfgnn_graph_t g = nullptr;
    EXPECT_EQ(dfgnnGraphCreateCoo(ctx.get(), n, e, d.ptr, DFGNN_INDEX_INT64, DFGNN_MEMORY_DEVICE, nullptr, &g),
              DFGNN_STATUS_INDEX_OUT_OF_RANGE);
    EXPECT_EQ(g, nullptr);
  }
  dfgnn_graph_options_t reject = options(false, true);
  for (int round = 0; round < 5; ++round) {
    dfgnn_graph_t g = nullptr;
    EXPECT_EQ(dfgnnGraphCreateCoo(ctx.get(), n, e, dup.ptr, DFGNN_INDEX_INT64, DFGNN_MEMORY_DEVICE, &reject, &g),
              DFGNN_STATUS_DUPLICATE_EDGE);
    EXPECT_EQ(g, nullptr);
  }
  const size_t free_after = free_device_memory();
  // e x 4 bytes is 8 MB: a leak of one edge array per build would be 200 MB.
  EXPECT_LT(static_cast<double>(free_before) - static_cast<double>(free_after), 8e6);
}

TEST(DeviceBuild, GraphIsBoundToItsDevice) {
  ContextPtr ctx = make_context();
  REQUIRE_GPU(ctx.get());
  int count = 0;
  cudaGetDeviceCount(&count);
  if (count < 2) GTEST_SKIP() << "needs two GPUs (this machine has " << count << ")";
  std::vector<int64_t> ei = corpus_graph(100, 1000, 0, 3, false);
  Outcome d = build_coo(ctx.get(), 100, ei, DFGNN_MEMORY_DEVICE, dfgnnGraphDefaultOptions());
  ASSERT_EQ(d.status, DFGNN_STATUS_SUCCESS);
  cudaSetDevice(1);
  const int32_t *p, *i, *x;
  EXPECT_EQ(dfgnnGraphGetCsr(d.graph.get(), DFGNN_MEMORY_DEVICE, &p, &i, &x), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dfgnnGetLastErrorMessage()).find("built on CUDA device 0"), std::string::npos);
  cudaSetDevice(0);
}

// Asked for more device memory than is free, a build fails with OUT_OF_MEMORY naming the allocation,
// publishes no graph, and leaves the context usable: once memory is free again the same build works.
TEST(DeviceBuild, OutOfMemoryIsReportedAndTheContextStaysUsable) {
  ContextPtr ctx = make_context();
  REQUIRE_GPU(ctx.get());
  const int64_t n = 500000, e = 4000000;
  std::vector<int32_t> ei = narrow<int32_t>(corpus_graph(n, e, 4, 11, false));
  DeviceArray d(ei);
  const size_t free_bytes = free_device_memory();
  // Leave about 8 MB: the build's sort buffers alone need e x 4 bytes = 16 MB each.
  void* hog = nullptr;
  for (size_t keep = 8u << 20; hog == nullptr && keep < free_bytes; keep *= 2)
    if (cudaMalloc(&hog, free_bytes - keep) != cudaSuccess) {
      hog = nullptr;
      cudaGetLastError();
    }
  ASSERT_NE(hog, nullptr) << "could not take most of the device memory";
  dfgnn_graph_t g = nullptr;
  const dfgnn_status_t s =
      dfgnnGraphCreateCoo(ctx.get(), n, e, d.ptr, DFGNN_INDEX_INT32, DFGNN_MEMORY_DEVICE, nullptr, &g);
  const std::string message = dfgnnGetLastErrorMessage();
  cudaFree(hog);
  EXPECT_EQ(s, DFGNN_STATUS_OUT_OF_MEMORY) << message;
  EXPECT_NE(message.find("out of device memory"), std::string::npos) << message;
  EXPECT_EQ(g, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  // The context and the device work again.
  ASSERT_EQ(dfgnnGraphCreateCoo(ctx.get(), n, e, d.ptr, DFGNN_INDEX_INT32, DFGNN_MEMORY_DEVICE, nullptr, &g),
            DFGNN_STATUS_SUCCESS)
      << dfgnnGetLastErrorMessage();
  GraphPtr built(g);
  Outcome host = build_coo(ctx.get(), n, ei, DFGNN_MEMORY_HOST, dfgnnGraphDefaultOptions());
  ASSERT_EQ(host.status, DFGNN_STATUS_SUCCESS);
  expect_same_graph(host.graph.get(), built.get(), "after out of memory");
}
