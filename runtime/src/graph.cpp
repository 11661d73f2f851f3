#include "graph.hpp"

#include "context.hpp"
#include "device_build.hpp"
#include "error.hpp"
#include "fingerprint.hpp"
#include "logging.hpp"

#include <algorithm>
#include <atomic>
#include <limits>

namespace dfgnn {
namespace {

constexpr int64_t kMaxIndex = std::numeric_limits<int32_t>::max();

// Reads element i of an int32 or int64 array as int64.
struct IndexArray {
  const void* data;
  dfgnn_index_type_t type;
  int64_t operator[](int64_t i) const {
    return type == DFGNN_INDEX_INT32 ? static_cast<const int32_t*>(data)[i] : static_cast<const int64_t*>(data)[i];
  }
};


void check_index_type(dfgnn_index_type_t type) {
  if (type != DFGNN_INDEX_INT32 && type != DFGNN_INDEX_INT64)
    fail(DFGNN_STATUS_INVALID_ARGUMENT, "index_type {} is neither DFGNN_INDEX_INT32 nor DFGNN_INDEX_INT64",
         static_cast<int>(type));
}

void check_options(const dfgnn_graph_options_t& options) {
  if (options.duplicates != DFGNN_DUPLICATES_KEEP && options.duplicates != DFGNN_DUPLICATES_REJECT)
    fail(DFGNN_STATUS_INVALID_ARGUMENT, "options.duplicates {} is not a dfgnn_duplicates_t value",
         static_cast<int>(options.duplicates));
}

// Sizes shared by CSR and COO input: non-negative, representable in the given index type and in
// dfgnn's int32 internal indices (the last node id and the edge count must fit).
void check_sizes(int64_t num_nodes, int64_t num_edges, dfgnn_index_type_t type, const char* edges_name) {
  if (num_nodes < 0) fail(DFGNN_STATUS_NEGATIVE_SIZE, "num_nodes is negative ({})", num_nodes);
  if (num_edges < 0) fail(DFGNN_STATUS_NEGATIVE_SIZE, "{} is negative ({})", edges_name, num_edges);
  if (type == DFGNN_INDEX_INT32 && num_edges > kMaxIndex)
    fail(DFGNN_STATUS_INDEX_OVERFLOW, "{} = {} does not fit the int32 index type", edges_name, num_edges);
  if (num_nodes > kMaxIndex - 1)
    fail(DFGNN_STATUS_INDEX_OVERFLOW, "num_nodes = {} exceeds dfgnn's limit of {} nodes", num_nodes, kMaxIndex - 1);
  if (num_edges > kMaxIndex)
    fail(DFGNN_STATUS_INDEX_OVERFLOW, "{} = {} exceeds dfgnn's limit of {} edges", edges_name, num_edges, kMaxIndex);
}

void check_node_index(int64_t value, int64_t num_nodes, const char* array, int64_t position) {
  if (value < 0 || value >= num_nodes)
    fail(DFGNN_STATUS_INDEX_OUT_OF_RANGE, "{}[{}] = {} is out of range [0, {})", array, position, value, num_nodes);
}

// One in-edge j -> i with its input id, during construction.
struct Edge {
  int32_t src;
  int32_t dst;
};

// Builds the final CSR by destination from validated edges in input order: drops self-loops and
// appends one per node when asked, checks duplicates when asked, keeps input order within rows.
Compressed build_csr(int32_t num_nodes, const std::vector<Edge>& edges, const dfgnn_graph_options_t& options) {
  const bool loops = options.add_self_loops != 0;
  Compressed csr;
  csr.num_rows = num_nodes;
  csr.ptr.assign(static_cast<size_t>(num_nodes) + 1, 0);
  int64_t kept = 0;
  for (const Edge& e : edges) {
    if (loops && e.src == e.dst) continue;
    ++csr.ptr[e.dst + 1];
    ++kept;
  }
  if (loops) {
    if (kept + num_nodes > kMaxIndex)
      fail(DFGNN_STATUS_INDEX_OVERFLOW, "adding {} self-loops to {} edges exceeds dfgnn's limit of {} edges",
           num_nodes, kept, kMaxIndex);
    for (int32_t i = 0; i < num_nodes; ++i) ++csr.ptr[i + 1];
  }
  for (int32_t i = 0; i < num_nodes; ++i) csr.ptr[i + 1] += csr.ptr[i];
  const int64_t nnz = csr.ptr[num_nodes];
  csr.idx.resize(nnz);
  csr.eid.resize(nnz);
  std::vector<int32_t> cursor(csr.ptr.begin(), csr.ptr.end() - 1);
  int32_t id = 0;
  for (const Edge& e : edges) {
    if (loops && e.src == e.dst) continue;
    const int32_t pos = cursor[e.dst]++;
    csr.idx[pos] = e.src;
    csr.eid[pos] = id++;
  }
  if (loops) {
    for (int32_t i = 0; i < num_nodes; ++i) {
      const int32_t pos = cursor[i]++;
      csr.idx[pos] = i;
      csr.eid[pos] = id++;
    }
  }
  if (options.duplicates == DFGNN_DUPLICATES_REJECT) {
    std::vector<int32_t> row;
    for (int32_t i = 0; i < num_nodes; ++i) {
      row.assign(csr.idx.begin() + csr.ptr[i], csr.idx.begin() + csr.ptr[i + 1]);
      std::sort(row.begin(), row.end());
      auto dup = std::adjacent_find(row.begin(), row.end());
      if (dup != row.end())
        fail(DFGNN_STATUS_DUPLICATE_EDGE, "duplicate edge {} -> {} (duplicates are rejected by the graph options)",
             *dup, i);
    }
  }
  return csr;
}

uint64_t next_graph_id() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

}  // namespace

Compressed transpose(const Compressed& csr) {
  Compressed t;
  t.num_rows = csr.num_rows;
  t.ptr.assign(static_cast<size_t>(csr.num_rows) + 1, 0);
  for (int32_t j : csr.idx) ++t.ptr[j + 1];
  for (int32_t j = 0; j < csr.num_rows; ++j) t.ptr[j + 1] += t.ptr[j];
  t.idx.resize(csr.idx.size());
  t.eid.resize(csr.idx.size());
  std::vector<int32_t> cursor(t.ptr.begin(), t.ptr.end() - 1);
  for (int32_t i = 0; i < csr.num_rows; ++i) {
    for (int32_t p = csr.ptr[i]; p < csr.ptr[i + 1]; ++p) {
      const int32_t pos = cursor[csr.idx[p]]++;
      t.idx[pos] = i;
      t.eid[pos] = p;
    }
  }
  return t;
}

Graph::Graph(Compressed csr)
    : id_(next_graph_id()), num_nodes_(csr.num_rows), num_edges_(csr.nnz()), csr_(std::move(csr)),
      csc_(transpose(csr_)) {
  std::call_once(host_once_, [] {});
}

struct Graph::DeviceBuilt {
  DeviceGraph arrays;
  int device;
};

Graph::Graph(DeviceBuilt built) : id_(next_graph_id()), num_nodes_(built.arrays.num_nodes),
                                  num_edges_(built.arrays.nnz), device_(built.device) {
  DeviceGraph& d = built.arrays;
  std::call_once(fingerprint_once_, [&] { fingerprint_ = compute_fingerprint(num_nodes_, num_edges_, d.csr_runs); });
  std::call_once(csc_fingerprint_once_,
                 [&] { csc_fingerprint_ = compute_fingerprint(num_nodes_, num_edges_, d.csc_runs); });
  device_csr_ = DeviceCompressed{std::move(d.csr_ptr), std::move(d.csr_idx), std::move(d.csr_eid)};
  device_csc_ = DeviceCompressed{std::move(d.csc_ptr), std::move(d.csc_idx), std::move(d.csc_eid)};
  csr_edge_ids_on_device_ = true;
}

namespace {
int current_device() {
  int device = 0;
  cuda_check(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

std::vector<int32_t> download_ints(const DeviceBuffer& buffer) {
  std::vector<int32_t> host(buffer.bytes() / sizeof(int32_t));
  if (!host.empty())
    cuda_check(cudaMemcpy(host.data(), buffer.get(), buffer.bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  return host;
}

Compressed download(const DeviceCompressed& d, int32_t num_rows, bool rows_only) {
  Compressed c;
  c.num_rows = num_rows;
  c.ptr = download_ints(d.ptr);
  if (!rows_only) {
    c.idx = download_ints(d.idx);
    c.eid = download_ints(d.eid);
  }
  return c;
}
}  // namespace

std::unique_ptr<Graph> Graph::from_device_coo(int64_t num_nodes, int64_t num_edges, const void* edge_index,
                                              dfgnn_index_type_t index_type, const dfgnn_graph_options_t& options,
                                              cudaStream_t stream) {
  check_coo_shape(num_nodes, num_edges, edge_index, index_type, options);
  require_device("a graph from device arrays");
  const int device = current_device();
  return std::unique_ptr<Graph>(
      new Graph(DeviceBuilt{build_device_coo(num_nodes, num_edges, edge_index, index_type, options, stream), device}));
}

std::unique_ptr<Graph> Graph::from_device_csr(int64_t num_nodes, int64_t nnz, const void* row_ptr, const void* col_idx,
                                              dfgnn_index_type_t index_type, const dfgnn_graph_options_t& options,
                                              cudaStream_t stream) {
  check_csr_shape(num_nodes, nnz, row_ptr, col_idx, index_type, options);
  require_device("a graph from device arrays");
  const int device = current_device();
  return std::unique_ptr<Graph>(
      new Graph(DeviceBuilt{build_device_csr(num_nodes, nnz, row_ptr, col_idx, index_type, options, stream), device}));
}

void Graph::require_own_device() const {
  if (device_ < 0) return;
  const int current = current_device();
  if (current != device_)
    fail(DFGNN_STATUS_INVALID_ARGUMENT, "the graph was built on CUDA device {} but the current device is {}", device_,
         current);
}

const Compressed& Graph::csr() const {
  std::call_once(host_once_, [&] {
    csr_ = download(*device_csr_, num_nodes_, false);
    csc_ = download(*device_csc_, num_nodes_, false);
  });
  return csr_;
}

const Compressed& Graph::csc() const {
  csr();
  return csc_;
}

RowPointers Graph::plan_rows(bool csc, int32_t rows_read) const {
  if (device_ < 0) return dfgnn::plan_rows(csc ? csc_ : csr_, rows_read);
  const DeviceCompressed& d = csc ? *device_csc_ : *device_csr_;
  if (rows_read > 0) {
    require_own_device();
    const std::vector<int32_t> spans = device_long_rows(d.ptr, num_nodes_, rows_read);
    RowPointers out{nullptr, num_nodes_, {}};
    for (size_t k = 0; k + 2 < spans.size(); k += 3) out.long_rows.push_back({spans[k], spans[k + 1], spans[k + 2]});
    return out;
  }
  Compressed& rows = csc ? csc_rows_ : csr_rows_;
  std::call_once(csc ? csc_rows_once_ : csr_rows_once_, [&] { rows = download(d, num_nodes_, true); });
  return RowPointers{rows.ptr.data(), num_nodes_, {}};
}

void Graph::check_csr_shape(int64_t num_nodes, int64_t nnz, const void* row_ptr, const void* col_idx,
                            dfgnn_index_type_t index_type, const dfgnn_graph_options_t& options) {
  check_index_type(index_type);
  check_options(options);
  check_sizes(num_nodes, nnz, index_type, "nnz");
  if (row_ptr == nullptr && num_nodes > 0)
    fail(DFGNN_STATUS_NULL_POINTER, "row_ptr is null but num_nodes = {}", num_nodes);
  if (col_idx == nullptr && nnz > 0) fail(DFGNN_STATUS_NULL_POINTER, "col_idx is null but nnz = {}", nnz);
  if (row_ptr == nullptr && nnz > 0) fail(DFGNN_STATUS_NULL_POINTER, "row_ptr is null but nnz = {}", nnz);
}

void Graph::check_coo_shape(int64_t num_nodes, int64_t num_edges, const void* edge_index,
                            dfgnn_index_type_t index_type, const dfgnn_graph_options_t& options) {
  check_index_type(index_type);
  check_options(options);
  check_sizes(num_nodes, num_edges, index_type, "num_edges");
  if (edge_index == nullptr && num_edges > 0)
    fail(DFGNN_STATUS_NULL_POINTER, "edge_index is null but num_edges = {}", num_edges);
}

std::unique_ptr<Graph> Graph::from_csr(int64_t num_nodes, int64_t nnz, const void* row_ptr, const void* col_idx,
                                       dfgnn_index_type_t index_type, const dfgnn_graph_options_t& options) {
  check_csr_shape(num_nodes, nnz, row_ptr, col_idx, index_type, options);

  std::vector<Edge> edges;
  if (row_ptr != nullptr) {
    const IndexArray ptr{row_ptr, index_type};
    if (ptr[0] != 0) fail(DFGNN_STATUS_ROW_PTR_START, "row_ptr[0] = {} but must be 0", ptr[0]);
    for (int64_t i = 0; i < num_nodes; ++i) {
      if (ptr[i + 1] < ptr[i])
        fail(DFGNN_STATUS_ROW_PTR_DECREASING, "row_ptr decreases at row {}: row_ptr[{}] = {} > row_ptr[{}] = {}", i, i,
             ptr[i], i + 1, ptr[i + 1]);
      // Checked per step so a corrupt row_ptr never drives reads of col_idx past nnz.
      if (ptr[i + 1] > nnz)
        fail(DFGNN_STATUS_ROW_PTR_END, "row_ptr[{}] = {} exceeds nnz = {}", i + 1, ptr[i + 1], nnz);
    }
    if (ptr[num_nodes] != nnz)
      fail(DFGNN_STATUS_ROW_PTR_END, "row_ptr[{}] = {} but must equal nnz = {}", num_nodes, ptr[num_nodes], nnz);
    const IndexArray col{col_idx, index_type};
    edges.reserve(static_cast<size_t>(nnz));
    for (int64_t i = 0; i < num_nodes; ++i) {
      for (int64_t p = ptr[i]; p < ptr[i + 1]; ++p) {
        check_node_index(col[p], num_nodes, "col_idx", p);
        edges.push_back({static_cast<int32_t>(col[p]), static_cast<int32_t>(i)});
      }
    }
  }
  return std::unique_ptr<Graph>(new Graph(build_csr(static_cast<int32_t>(num_nodes), edges, options)));
}

std::unique_ptr<Graph> Graph::from_coo(int64_t num_nodes, int64_t num_edges, const void* edge_index,
                                       dfgnn_index_type_t index_type, const dfgnn_graph_options_t& options) {
  check_coo_shape(num_nodes, num_edges, edge_index, index_type, options);
  const IndexArray index{edge_index, index_type};
  std::vector<Edge> edges(static_cast<size_t>(num_edges));
  for (int64_t e = 0; e < num_edges; ++e) {
    const int64_t src = index[e], dst = index[num_edges + e];
    check_node_index(src, num_nodes, "edge_index[0]", e);
    check_node_index(dst, num_nodes, "edge_index[1]", e);
    edges[e] = {static_cast<int32_t>(src), static_cast<int32_t>(dst)};
  }
  return std::unique_ptr<Graph>(new Graph(build_csr(static_cast<int32_t>(num_nodes), edges, options)));
}

const dfgnn_fingerprint_t& Graph::fingerprint() const {
  std::call_once(fingerprint_once_, [&] { fingerprint_ = compute_fingerprint(csr()); });
  return fingerprint_;
}

const dfgnn_fingerprint_t& Graph::csc_fingerprint() const {
  std::call_once(csc_fingerprint_once_, [&] { csc_fingerprint_ = compute_fingerprint(csc()); });
  return csc_fingerprint_;
}

std::shared_ptr<const Plan> Graph::plan(const std::string& key,
                                        const std::function<std::shared_ptr<const Plan>()>& make) const {
  std::lock_guard lock(plan_mutex_);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  return plans_.emplace(key, make()).first->second;
}

std::shared_ptr<const Recipe> Graph::recipe(const RecipeKey& key) const {
  std::lock_guard lock(recipe_mutex_);
  auto it = recipes_.find(key);
  return it == recipes_.end() ? nullptr : it->second;
}

std::shared_ptr<const Recipe> Graph::store_recipe(const RecipeKey& key, std::shared_ptr<const Recipe> recipe) const {
  std::lock_guard lock(recipe_mutex_);
  // Retire what no call can use again: older generations of this context, and every recipe of a
  // destroyed context (whose loaded modules they would otherwise keep alive with the graph).
  std::erase_if(recipes_, [&](const auto& entry) {
    return (entry.first.context == key.context && entry.first.generation < key.generation) ||
           (entry.first.context != key.context && !Context::alive(entry.first.context));
  });
  return recipes_.emplace(key, std::move(recipe)).first->second;
}

size_t RecipeKeyHash::operator()(const RecipeKey& k) const noexcept {
  size_t h = std::hash<std::string>{}(k.forced);
  auto mix = [&h](uint64_t v) { h ^= std::hash<uint64_t>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  for (uint64_t v : {k.context, k.generation}) mix(v);
  for (int32_t v : {k.model, k.dtype, k.heads, k.dim, k.edge_features, k.direction, k.max_vec, k.device, k.dropout})
    mix(static_cast<uint64_t>(v));
  return h;
}

namespace {
DeviceCompressed upload_compressed(const Compressed& c, bool edge_ids) {
  DeviceCompressed d;
  d.ptr = upload(c.ptr.data(), c.ptr.size() * sizeof(int32_t));
  d.idx = upload(c.idx.data(), c.idx.size() * sizeof(int32_t));
  if (edge_ids) d.eid = upload(c.eid.data(), c.eid.size() * sizeof(int32_t));
  return d;
}
}  // namespace

// A host-built graph's CSR edge ids go up only when a pass asks for them (edge features): a forward
// without them copies two of the CSR's three arrays (on R-MAT 2^20, 68 of 132 MB, 14-19 ms in all
// on an H100: bench/results/2026-12-08-h100.md).
const DeviceCompressed& Graph::device_csr() const {
  require_own_device();
  std::lock_guard lock(device_mutex_);
  if (!device_csr_) {
    const Span span("graph CSR uploaded");
    device_csr_ = upload_compressed(csr_, /*edge_ids=*/false);
    csr_upload_device_ = current_device();
  }
  return *device_csr_;
}

const int32_t* Graph::device_csr_edge_ids() const {
  device_csr();
  std::lock_guard lock(device_mutex_);
  if (!csr_edge_ids_on_device_) {
    // Beside the CSR's other arrays, or not at all.
    if (const int current = current_device(); current != csr_upload_device_)
      fail(DFGNN_STATUS_INVALID_ARGUMENT, "the graph's CSR was uploaded to CUDA device {} but the current device is {}",
           csr_upload_device_, current);
    const Span span("graph CSR edge ids uploaded");
    device_csr_->eid = upload(csr_.eid.data(), csr_.eid.size() * sizeof(int32_t));
    csr_edge_ids_on_device_ = true;
  }
  return device_csr_->eid.as<const int32_t>();
}

const DeviceCompressed& Graph::device_csc() const {
  require_own_device();
  std::lock_guard lock(device_mutex_);
  if (!device_csc_) {
    const Span span("graph CSC uploaded");
    device_csc_ = upload_compressed(csc_, /*edge_ids=*/true);
  }
  return *device_csc_;
}

}  // namespace dfgnn
