// Device graph build (see device_build.hpp). The steps mirror graph.cpp's host build:
//   validate ids (first bad entry in input order, as the host loop finds it) and count kept edges;
//   give kept edges their ids (input order, loops appended after them: PyG's add_self_loops);
//   stable radix sort by destination -> CSR (rows keep input order), lower_bound -> row pointers;
//   with duplicates rejected, sort (dst, src) keys and report the first repeated pair;
//   stable radix sort of CSR positions by source -> CSC (columns keep increasing CSR position);
//   sort each structure's degrees and run-length encode them for the fingerprints.
// Two host synchronisations per build (more for CSR input, whose row pointers are checked first):
// after validation (the kept count sizes everything after it) and at the end (one copy of the
// duplicate flag and the degree runs).
#include "device_build.hpp"

#include "error.hpp"

#include <cub/cub.cuh>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <cmath>
#include <limits>
#include <string>

namespace dfgnn {
namespace {

constexpr int kThreads = 256;
constexpr unsigned long long kNone = ULLONG_MAX;

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, int64_t{1} << 20));
}

#define DFGNN_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{gridDim.x} * blockDim.x)

// Bits that hold every key in [0, n) (at least one: CUB wants a non-empty bit range).
int key_bits(int64_t n) {
  int bits = 1;
  while (bits < 63 && (int64_t{1} << bits) < n) ++bits;
  return bits;
}

void check_launch(const char* what) { cuda_check(cudaGetLastError(), what); }

// One scratch buffer for every CUB call of a build, grown as needed (stream-ordered).
class CubScratch {
 public:
  explicit CubScratch(cudaStream_t stream) : stream_(stream) {}
  template <typename F>
  void run(const char* what, F&& call) {
    size_t bytes = 0;
    cuda_check(call(static_cast<void*>(nullptr), bytes), what);
    if (bytes > buffer_.bytes()) buffer_ = DeviceBuffer::on_stream(bytes, stream_);
    cuda_check(call(buffer_.get(), bytes), what);
  }

 private:
  cudaStream_t stream_;
  DeviceBuffer buffer_;
};

DeviceBuffer ints(int64_t n, cudaStream_t stream) {
  return DeviceBuffer::on_stream(static_cast<size_t>(n) * sizeof(int32_t), stream);
}

// What validation sends back: the first bad entry of each kind (kNone if none) and the kept count.
struct ScanResult {
  unsigned long long first_bad[2];  // COO: sources, destinations; CSR: row_ptr (2 i + kind), col_idx
  unsigned long long kept;
};

__device__ void count_block(bool kept, unsigned long long* total) {
  const int n = __syncthreads_count(kept);
  if (threadIdx.x == 0 && n > 0) atomicAdd(total, static_cast<unsigned long long>(n));
}

// COO: ids in [0, N), narrowed to int32; keep = not a loop that add_self_loops removes.
template <typename I>
__global__ void scan_coo(const I* edge_index, int64_t E, int64_t N, bool drop_loops, int32_t* src, int32_t* dst,
                         int32_t* keep, ScanResult* result) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t base = blockIdx.x * int64_t{blockDim.x}; base < E; base += stride) {
    const int64_t e = base + threadIdx.x;
    bool kept = false;
    if (e < E) {
      const I s = edge_index[e], d = edge_index[E + e];
      const bool ok_s = s >= 0 && s < N, ok_d = d >= 0 && d < N;
      if (!ok_s) atomicMin(&result->first_bad[0], static_cast<unsigned long long>(e));
      if (!ok_d) atomicMin(&result->first_bad[1], static_cast<unsigned long long>(e));
      src[e] = ok_s ? static_cast<int32_t>(s) : 0;
      dst[e] = ok_d ? static_cast<int32_t>(d) : 0;
      kept = !(drop_loops && s == d);
      keep[e] = kept;
    }
    count_block(kept, &result->kept);  // every thread of the block reaches this in every round
  }
}

// CSR row pointers: the first row i whose step fails, as 2 i (decreasing) or 2 i + 1 (past nnz).
template <typename I>
__global__ void scan_row_ptr(const I* ptr, int64_t N, int64_t nnz, ScanResult* result) {
  DFGNN_GRID_STRIDE(i, N) {
    const I a = ptr[i], b = ptr[i + 1];
    if (b < a) atomicMin(&result->first_bad[0], static_cast<unsigned long long>(2 * i));
    else if (b > nnz) atomicMin(&result->first_bad[0], static_cast<unsigned long long>(2 * i + 1));
  }
}

// CSR columns in [0, N); the row of each position by binary search over the (valid) row pointers.
template <typename I>
__global__ void scan_csr(const I* ptr, const I* col, int64_t N, int64_t nnz, bool drop_loops, int32_t* src,
                         int32_t* dst, int32_t* keep, ScanResult* result) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t base = blockIdx.x * int64_t{blockDim.x}; base < nnz; base += stride) {
    const int64_t p = base + threadIdx.x;
    bool kept = false;
    if (p < nnz) {
      const I c = col[p];
      const bool ok = c >= 0 && c < N;
      if (!ok) atomicMin(&result->first_bad[1], static_cast<unsigned long long>(p));
      int64_t lo = 0, hi = N;  // the last row r with ptr[r] <= p (rows before it are shorter)
      while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (ptr[mid] <= p) lo = mid;
        else hi = mid;
      }
      src[p] = ok ? static_cast<int32_t>(c) : 0;
      dst[p] = static_cast<int32_t>(lo);
      kept = !(drop_loops && c == lo);
      keep[p] = kept;
    }
    count_block(kept, &result->kept);
  }
}

// Kept edge e gets id rank[e]; loops of nodes 0..N-1 get ids kept..kept+N-1.
__global__ void place_edges(const int32_t* src, const int32_t* dst, const int32_t* keep, const int32_t* rank,
                            int64_t E, int32_t* key, int32_t* id, int32_t* source) {
  DFGNN_GRID_STRIDE(e, E) {
    if (!keep[e]) continue;
    const int32_t r = rank != nullptr ? rank[e] : static_cast<int32_t>(e);
    key[r] = dst[e];
    id[r] = r;
    source[r] = src[e];
  }
}

__global__ void place_loops(int64_t kept, int64_t N, int32_t* key, int32_t* id, int32_t* source) {
  DFGNN_GRID_STRIDE(i, N) {
    const int64_t r = kept + i;
    key[r] = static_cast<int32_t>(i);
    id[r] = static_cast<int32_t>(r);
    source[r] = static_cast<int32_t>(i);
  }
}

__global__ void iota(int32_t* out, int64_t n) {
  DFGNN_GRID_STRIDE(i, n) out[i] = static_cast<int32_t>(i);
}

// out[p] = table[index[p]]
__global__ void gather(const int32_t* table, const int32_t* index, int64_t n, int32_t* out) {
  DFGNN_GRID_STRIDE(p, n) out[p] = table[index[p]];
}

// ptr[r] = first position of sorted keys >= r, for r in [0, N] (ptr[N] = nnz).
__global__ void row_pointers(const int32_t* sorted, int64_t nnz, int64_t N, int32_t* ptr) {
  DFGNN_GRID_STRIDE(r, N + 1) {
    int64_t lo = 0, hi = nnz;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (sorted[mid] < r) lo = mid + 1;
      else hi = mid;
    }
    ptr[r] = static_cast<int32_t>(lo);
  }
}

__global__ void degrees(const int32_t* ptr, int64_t N, int32_t* deg) {
  DFGNN_GRID_STRIDE(i, N) deg[i] = ptr[i + 1] - ptr[i];
}

__global__ void pair_keys(const int32_t* row, const int32_t* col, int64_t n, int shift, unsigned long long* out) {
  DFGNN_GRID_STRIDE(p, n) out[p] = (static_cast<unsigned long long>(row[p]) << shift) | static_cast<unsigned>(col[p]);
}

// The smallest repeated key: in (dst, src) order, the first row with a duplicate and its smallest
// repeated source, which is the pair the host build reports.
__global__ void first_repeat(const unsigned long long* sorted, int64_t n, unsigned long long* first) {
  DFGNN_GRID_STRIDE(p, n) {
    if (p > 0 && sorted[p] == sorted[p - 1]) atomicMin(first, sorted[p]);
  }
}

template <typename T>
T read_one(const void* device_array, int64_t index, cudaStream_t stream) {
  T value{};
  cuda_check(cudaMemcpyAsync(&value, static_cast<const T*>(device_array) + index, sizeof(T), cudaMemcpyDeviceToHost,
                             stream),
             "cudaMemcpyAsync (graph validation)");
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (graph validation)");
  return value;
}

int64_t read_index(const void* array, dfgnn_index_type_t type, int64_t index, cudaStream_t stream) {
  return type == DFGNN_INDEX_INT32 ? read_one<int32_t>(array, index, stream) : read_one<int64_t>(array, index, stream);
}

ScanResult fetch(const DeviceBuffer& result, cudaStream_t stream) {
  ScanResult r;
  cuda_check(cudaMemcpyAsync(&r, result.get(), sizeof r, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync (graph scan)");
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (graph scan)");
  return r;
}

DeviceBuffer new_result(cudaStream_t stream) {
  static_assert(sizeof(ScanResult) == 24, "first_bad[2] then kept");
  DeviceBuffer result = DeviceBuffer::on_stream(sizeof(ScanResult), stream);
  cuda_check(cudaMemsetAsync(result.get(), 0xff, 16, stream), "cudaMemsetAsync");  // first_bad = kNone
  cuda_check(cudaMemsetAsync(result.as<char>() + 16, 0, 8, stream), "cudaMemsetAsync");  // kept = 0
  return result;
}

// Distinct degrees of N rows holding nnz edges: k distinct values sum to at least k (k - 1) / 2,
// so k <= sqrt(2 nnz) + 1.
int64_t max_runs(int64_t N, int64_t nnz) {
  return std::min<int64_t>(N, static_cast<int64_t>(std::sqrt(2.0 * static_cast<double>(nnz))) + 2);
}

// Everything the host reads at the end of a build, in one device allocation so that one copy
// (and one synchronisation) brings it back: the first repeated pair, the two run counts, then the
// in-degree and out-degree runs (degrees, counts), each max_runs long.
class Summary {
 public:
  Summary(int64_t max_runs, cudaStream_t stream)
      : runs_(max_runs), buffer_(DeviceBuffer::on_stream(bytes(), stream)), host_(bytes()) {
    cuda_check(cudaMemsetAsync(buffer_.get(), 0xff, 8, stream), "cudaMemsetAsync");  // repeat = kNone
  }
  unsigned long long* repeat() const { return buffer_.as<unsigned long long>(); }
  int32_t* num_runs(int s) const { return buffer_.as<int32_t>() + 2 + s; }
  int32_t* degree(int s) const { return buffer_.as<int32_t>() + 4 + (2 * s) * runs_; }
  int32_t* count(int s) const { return buffer_.as<int32_t>() + 4 + (2 * s + 1) * runs_; }
  void fetch(cudaStream_t stream) {
    cuda_check(cudaMemcpyAsync(host_.data(), buffer_.get(), bytes(), cudaMemcpyDeviceToHost, stream),
               "cudaMemcpyAsync (graph build summary)");
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (graph build)");
  }
  unsigned long long host_repeat() const {
    unsigned long long r;
    std::memcpy(&r, host_.data(), sizeof r);
    return r;
  }
  std::vector<DegreeRun> host_runs(int s) const {
    const int32_t* base = reinterpret_cast<const int32_t*>(host_.data());
    const int32_t n = base[2 + s];
    if (n < 0 || n > runs_)
      fail(DFGNN_STATUS_INTERNAL_ERROR, "graph build: {} degree runs exceed their bound of {}", n, runs_);
    std::vector<DegreeRun> out(static_cast<size_t>(n));
    for (int32_t r = 0; r < n; ++r) out[r] = {base[4 + 2 * s * runs_ + r], base[4 + (2 * s + 1) * runs_ + r]};
    return out;
  }

 private:
  size_t bytes() const { return 16 + 16 * static_cast<size_t>(runs_); }
  int64_t runs_;
  DeviceBuffer buffer_;
  std::vector<unsigned char> host_;
};

// Sorted degrees of structure s (0: CSR, 1: CSC), run-length encoded into the summary.
void encode_degrees(const DeviceBuffer& ptr, int64_t N, int64_t nnz, int s, Summary& summary,
                    CubScratch& cub_scratch, cudaStream_t stream) {
  if (N == 0) {
    cuda_check(cudaMemsetAsync(summary.num_runs(s), 0, sizeof(int32_t), stream), "cudaMemsetAsync");
    return;
  }
  DeviceBuffer deg = ints(N, stream), sorted = ints(N, stream);
  degrees<<<grid_for(N), kThreads, 0, stream>>>(ptr.as<int32_t>(), N, deg.as<int32_t>());
  check_launch("degrees kernel");
  const int bits = key_bits(nnz + 1);
  cub_scratch.run("cub::DeviceRadixSort::SortKeys (degrees)", [&](void* tmp, size_t& bytes) {
    return cub::DeviceRadixSort::SortKeys(tmp, bytes, deg.as<int32_t>(), sorted.as<int32_t>(), static_cast<int>(N), 0,
                                          bits, stream);
  });
  cub_scratch.run("cub::DeviceRunLengthEncode::Encode (degrees)", [&](void* tmp, size_t& bytes) {
    return cub::DeviceRunLengthEncode::Encode(tmp, bytes, sorted.as<int32_t>(), summary.degree(s), summary.count(s),
                                              summary.num_runs(s), static_cast<int>(N), stream);
  });
}

// The per-edge arrays of validated input: int32 ids, keep flags, and the kept count.
struct Edges {
  DeviceBuffer src, dst, keep;
  int64_t count = 0;  // input edges
  int64_t kept = 0;
};

// Everything after validation, shared by COO and CSR input.
DeviceGraph finish(Edges edges, int64_t N, const dfgnn_graph_options_t& options, cudaStream_t stream) {
  constexpr int64_t kMaxIndex = std::numeric_limits<int32_t>::max();
  const bool loops = options.add_self_loops != 0;
  const int64_t E = edges.count, kept = edges.kept;
  if (loops && kept + N > kMaxIndex)
    fail(DFGNN_STATUS_INDEX_OVERFLOW, "adding {} self-loops to {} edges exceeds dfgnn's limit of {} edges", N, kept,
         kMaxIndex);
  const int64_t M = kept + (loops ? N : 0);
  CubScratch cub_scratch(stream);
  DeviceGraph g;
  g.num_nodes = static_cast<int32_t>(N);
  g.nnz = M;

  // Edge ids: the rank among kept edges (input order), then the appended loops.
  DeviceBuffer key = ints(M, stream), id = ints(M, stream), source = ints(M, stream), rank;
  if (kept != E) {
    rank = ints(E, stream);
    cub_scratch.run("cub::DeviceScan::ExclusiveSum (edge ids)", [&](void* tmp, size_t& bytes) {
      return cub::DeviceScan::ExclusiveSum(tmp, bytes, edges.keep.as<int32_t>(), rank.as<int32_t>(),
                                           static_cast<int>(E), stream);
    });
  }
  if (E > 0) {
    place_edges<<<grid_for(E), kThreads, 0, stream>>>(edges.src.as<int32_t>(), edges.dst.as<int32_t>(),
                                                     edges.keep.as<int32_t>(), rank.as<int32_t>(), E,
                                                     key.as<int32_t>(), id.as<int32_t>(), source.as<int32_t>());
    check_launch("place_edges kernel");
  }
  if (loops && N > 0) {
    place_loops<<<grid_for(N), kThreads, 0, stream>>>(kept, N, key.as<int32_t>(), id.as<int32_t>(),
                                                     source.as<int32_t>());
    check_launch("place_loops kernel");
  }
  edges = Edges{};  // input-sized arrays are no longer needed

  // CSR: stable sort by destination.
  const int bits = key_bits(N);
  DeviceBuffer row = ints(M, stream);
  g.csr_eid = ints(M, stream);
  g.csr_idx = ints(M, stream);
  g.csr_ptr = ints(N + 1, stream);
  if (M > 0) {
    cub_scratch.run("cub::DeviceRadixSort::SortPairs (CSR)", [&](void* tmp, size_t& bytes) {
      return cub::DeviceRadixSort::SortPairs(tmp, bytes, key.as<int32_t>(), row.as<int32_t>(), id.as<int32_t>(),
                                             g.csr_eid.as<int32_t>(), static_cast<int>(M), 0, bits, stream);
    });
    gather<<<grid_for(M), kThreads, 0, stream>>>(source.as<int32_t>(), g.csr_eid.as<int32_t>(), M,
                                                g.csr_idx.as<int32_t>());
    check_launch("gather kernel (CSR)");
  }
  row_pointers<<<grid_for(N + 1), kThreads, 0, stream>>>(row.as<int32_t>(), M, N, g.csr_ptr.as<int32_t>());
  check_launch("row_pointers kernel (CSR)");
  key = DeviceBuffer();
  source = DeviceBuffer();

  // Duplicates: the first repeated (dst, src) pair.
  Summary summary(max_runs(N, M), stream);
  if (options.duplicates == DFGNN_DUPLICATES_REJECT && M > 1) {
    DeviceBuffer pairs = DeviceBuffer::on_stream(static_cast<size_t>(M) * 8, stream);
    DeviceBuffer sorted = DeviceBuffer::on_stream(static_cast<size_t>(M) * 8, stream);
    pair_keys<<<grid_for(M), kThreads, 0, stream>>>(row.as<int32_t>(), g.csr_idx.as<int32_t>(), M, bits,
                                                   pairs.as<unsigned long long>());
    check_launch("pair_keys kernel");
    cub_scratch.run("cub::DeviceRadixSort::SortKeys (duplicates)", [&](void* tmp, size_t& bytes) {
      return cub::DeviceRadixSort::SortKeys(tmp, bytes, pairs.as<unsigned long long>(),
                                            sorted.as<unsigned long long>(), static_cast<int>(M), 0, 2 * bits, stream);
    });
    first_repeat<<<grid_for(M), kThreads, 0, stream>>>(sorted.as<unsigned long long>(), M,
                                                      summary.repeat());
    check_launch("first_repeat kernel");
  }

  // CSC: CSR positions stably sorted by source.
  g.csc_eid = ints(M, stream);
  g.csc_idx = ints(M, stream);
  g.csc_ptr = ints(N + 1, stream);
  if (M > 0) {
    DeviceBuffer positions = ints(M, stream), column = ints(M, stream);
    iota<<<grid_for(M), kThreads, 0, stream>>>(positions.as<int32_t>(), M);
    check_launch("iota kernel");
    cub_scratch.run("cub::DeviceRadixSort::SortPairs (CSC)", [&](void* tmp, size_t& bytes) {
      return cub::DeviceRadixSort::SortPairs(tmp, bytes, g.csr_idx.as<int32_t>(), column.as<int32_t>(),
                                             positions.as<int32_t>(), g.csc_eid.as<int32_t>(), static_cast<int>(M), 0,
                                             bits, stream);
    });
    gather<<<grid_for(M), kThreads, 0, stream>>>(row.as<int32_t>(), g.csc_eid.as<int32_t>(), M,
                                                g.csc_idx.as<int32_t>());
    check_launch("gather kernel (CSC)");
    row_pointers<<<grid_for(N + 1), kThreads, 0, stream>>>(column.as<int32_t>(), M, N, g.csc_ptr.as<int32_t>());
  } else {
    row_pointers<<<grid_for(N + 1), kThreads, 0, stream>>>(row.as<int32_t>(), 0, N, g.csc_ptr.as<int32_t>());
  }
  check_launch("row_pointers kernel (CSC)");

  // Fingerprint inputs, and the one copy back of the summary.
  encode_degrees(g.csr_ptr, N, M, 0, summary, cub_scratch, stream);
  encode_degrees(g.csc_ptr, N, M, 1, summary, cub_scratch, stream);
  summary.fetch(stream);
  if (const unsigned long long repeat = summary.host_repeat(); repeat != kNone) {
    const unsigned long long mask = (1ull << bits) - 1;
    fail(DFGNN_STATUS_DUPLICATE_EDGE, "duplicate edge {} -> {} (duplicates are rejected by the graph options)",
         repeat & mask, repeat >> bits);
  }
  g.csr_runs = summary.host_runs(0);
  g.csc_runs = summary.host_runs(1);
  return g;
}

template <typename I>
Edges scan_coo_input(int64_t N, int64_t E, const void* edge_index, bool drop_loops, cudaStream_t stream) {
  Edges edges{ints(E, stream), ints(E, stream), ints(E, stream), E, 0};
  DeviceBuffer result = new_result(stream);
  if (E > 0) {
    scan_coo<I><<<grid_for(E), kThreads, 0, stream>>>(static_cast<const I*>(edge_index), E, N, drop_loops,
                                                      edges.src.as<int32_t>(), edges.dst.as<int32_t>(),
                                                      edges.keep.as<int32_t>(), result.as<ScanResult>());
    check_launch("scan_coo kernel");
  }
  const ScanResult r = fetch(result, stream);
  const unsigned long long bad = std::min(r.first_bad[0], r.first_bad[1]);
  if (bad != kNone) {
    const int row = r.first_bad[0] <= r.first_bad[1] ? 0 : 1;  // the host checks a source before its target
    const int64_t e = static_cast<int64_t>(bad);
    const int64_t value = read_index(edge_index, sizeof(I) == 4 ? DFGNN_INDEX_INT32 : DFGNN_INDEX_INT64,
                                     row * E + e, stream);
    fail(DFGNN_STATUS_INDEX_OUT_OF_RANGE, "edge_index[{}][{}] = {} is out of range [0, {})", row, e, value, N);
  }
  edges.kept = static_cast<int64_t>(r.kept);
  return edges;
}

template <typename I>
Edges scan_csr_input(int64_t N, int64_t nnz, const void* row_ptr, const void* col_idx, bool drop_loops,
                     cudaStream_t stream) {
  const dfgnn_index_type_t type = sizeof(I) == 4 ? DFGNN_INDEX_INT32 : DFGNN_INDEX_INT64;
  const int64_t first = read_index(row_ptr, type, 0, stream);
  if (first != 0) fail(DFGNN_STATUS_ROW_PTR_START, "row_ptr[0] = {} but must be 0", first);
  DeviceBuffer result = new_result(stream);
  if (N > 0) {
    scan_row_ptr<I><<<grid_for(N), kThreads, 0, stream>>>(static_cast<const I*>(row_ptr), N, nnz,
                                                          result.as<ScanResult>());
    check_launch("scan_row_ptr kernel");
  }
  const ScanResult rows = fetch(result, stream);
  if (rows.first_bad[0] != kNone) {
    const int64_t i = static_cast<int64_t>(rows.first_bad[0] / 2);
    const int64_t a = read_index(row_ptr, type, i, stream), b = read_index(row_ptr, type, i + 1, stream);
    if (rows.first_bad[0] % 2 == 0)
      fail(DFGNN_STATUS_ROW_PTR_DECREASING, "row_ptr decreases at row {}: row_ptr[{}] = {} > row_ptr[{}] = {}", i, i,
           a, i + 1, b);
    fail(DFGNN_STATUS_ROW_PTR_END, "row_ptr[{}] = {} exceeds nnz = {}", i + 1, b, nnz);
  }
  const int64_t last = read_index(row_ptr, type, N, stream);
  if (last != nnz) fail(DFGNN_STATUS_ROW_PTR_END, "row_ptr[{}] = {} but must equal nnz = {}", N, last, nnz);

  Edges edges{ints(nnz, stream), ints(nnz, stream), ints(nnz, stream), nnz, 0};
  if (nnz > 0) {
    scan_csr<I><<<grid_for(nnz), kThreads, 0, stream>>>(static_cast<const I*>(row_ptr), static_cast<const I*>(col_idx),
                                                        N, nnz, drop_loops, edges.src.as<int32_t>(),
                                                        edges.dst.as<int32_t>(), edges.keep.as<int32_t>(),
                                                        result.as<ScanResult>());
    check_launch("scan_csr kernel");
  }
  const ScanResult cols = fetch(result, stream);
  if (cols.first_bad[1] != kNone) {
    const int64_t p = static_cast<int64_t>(cols.first_bad[1]);
    fail(DFGNN_STATUS_INDEX_OUT_OF_RANGE, "col_idx[{}] = {} is out of range [0, {})", p,
         read_index(col_idx, type, p, stream), N);
  }
  edges.kept = static_cast<int64_t>(cols.kept);
  return edges;
}

struct IsLongRow {
  const int32_t* ptr;
  int32_t min_degree;
  __host__ __device__ bool operator()(int32_t row) const { return ptr[row + 1] - ptr[row] >= min_degree; }
};

__global__ void spans_of(const int32_t* ptr, const int32_t* rows, int32_t count, int32_t* spans) {
  for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
    const int32_t r = rows[i];
    spans[3 * i] = r;
    spans[3 * i + 1] = ptr[r];
    spans[3 * i + 2] = ptr[r + 1];
  }
}

}  // namespace

std::vector<int32_t> device_long_rows(const DeviceBuffer& ptr, int32_t rows, int32_t min_degree) {
  cudaStream_t stream = nullptr;
  if (rows <= 0) return {};
  DeviceBuffer selected = ints(rows, stream), count = ints(1, stream);
  CubScratch cub_scratch(stream);
  cub_scratch.run("cub::DeviceSelect::If (long rows)", [&](void* tmp, size_t& bytes) {
    return cub::DeviceSelect::If(tmp, bytes, thrust::counting_iterator<int32_t>(0), selected.as<int32_t>(),
                                 count.as<int32_t>(), rows, IsLongRow{ptr.as<const int32_t>(), min_degree}, stream);
  });
  int32_t n = 0;
  cuda_check(cudaMemcpyAsync(&n, count.get(), sizeof n, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync (long rows)");
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (long rows)");
  std::vector<int32_t> host(static_cast<size_t>(n) * 3);
  if (n == 0) return host;
  DeviceBuffer spans = ints(int64_t{n} * 3, stream);
  spans_of<<<static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 1024)), 256, 0, stream>>>(
      ptr.as<const int32_t>(), selected.as<const int32_t>(), n, spans.as<int32_t>());
  check_launch("spans_of (long rows)");
  cuda_check(cudaMemcpyAsync(host.data(), spans.get(), host.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync (long rows)");
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (long rows)");
  return host;
}

DeviceGraph build_device_coo(int64_t num_nodes, int64_t num_edges, const void* edge_index,
                             dfgnn_index_type_t index_type, const dfgnn_graph_options_t& options,
                             cudaStream_t stream) {
  require_device("a graph from device arrays");
  const bool drop_loops = options.add_self_loops != 0;
  Edges edges = index_type == DFGNN_INDEX_INT32
                    ? scan_coo_input<int32_t>(num_nodes, num_edges, edge_index, drop_loops, stream)
                    : scan_coo_input<int64_t>(num_nodes, num_edges, edge_index, drop_loops, stream);
  return finish(std::move(edges), num_nodes, options, stream);
}

DeviceGraph build_device_csr(int64_t num_nodes, int64_t nnz, const void* row_ptr, const void* col_idx,
                             dfgnn_index_type_t index_type, const dfgnn_graph_options_t& options,
                             cudaStream_t stream) {
  require_device("a graph from device arrays");
  const bool drop_loops = options.add_self_loops != 0;
  Edges edges = index_type == DFGNN_INDEX_INT32
                    ? scan_csr_input<int32_t>(num_nodes, nnz, row_ptr, col_idx, drop_loops, stream)
                    : scan_csr_input<int64_t>(num_nodes, nnz, row_ptr, col_idx, drop_loops, stream);
  return finish(std::move(edges), num_nodes, options, stream);
}

}  // namespace dfgnn
