// dfgnnGraphCreateCoo / dfgnnGraphCreateCsr on host arrays of int32 or int64, with every option.
// Input: a flags byte, a node-count byte, then the array elements (raw little-endian values, or one
// byte per element with small values when the "small ids" flag is set, so that many inputs are
// valid). Property: the call succeeds exactly when an independent check of the documented rules
// says the input is valid, and then the graph is exactly the reference CSR built here (rows by
// destination, input order kept, self-loops dropped and appended, edge ids as documented).
#include "fuzz_util.hpp"

#include <algorithm>
#include <limits>

namespace {

dfgnn_context_t context() {
  static dfgnn_context_t ctx = [] {
    dfgnn_context_t c = nullptr;
    if (dfgnnCreate(&c) != DFGNN_STATUS_SUCCESS) std::abort();
    return c;
  }();
  return ctx;
}

struct Reference {
  bool valid = true;
  bool duplicate = false;  // valid input with a repeated edge (rejected only under DUPLICATES_REJECT)
  std::vector<std::vector<std::pair<int32_t, int32_t>>> rows;  // (source, edge id) per row
};

// Edges (src, dst) in input order -> the documented CSR.
Reference build(int64_t n, const std::vector<std::pair<int64_t, int64_t>>& edges, bool loops) {
  Reference r;
  r.rows.resize(static_cast<size_t>(n));
  int32_t id = 0;
  for (const auto& [s, d] : edges) {
    if (loops && s == d) continue;
    r.rows[d].push_back({static_cast<int32_t>(s), id++});
  }
  if (loops)
    for (int64_t i = 0; i < n; ++i) r.rows[i].push_back({static_cast<int32_t>(i), id++});
  for (auto row : r.rows) {
    std::sort(row.begin(), row.end(), [](auto a, auto b) { return a.first < b.first; });
    for (size_t k = 1; k < row.size(); ++k) r.duplicate |= row[k].first == row[k - 1].first;
  }
  return r;
}

int64_t node_count(uint8_t b) {
  switch (b) {
    case 0xff: return -1;
    case 0xfe: return std::numeric_limits<int64_t>::min();
    case 0xfd: return std::numeric_limits<int32_t>::max();      // one more than dfgnn's limit
    case 0xfc: return std::numeric_limits<int64_t>::max();
    default: return b % 64;  // larger valid counts only cost memory (O(N) by design)
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t flags = data[0];
  const bool csr = flags & 1, wide = flags & 2, small = flags & 16;
  dfgnn_graph_options_t options = dfgnnGraphDefaultOptions();
  options.add_self_loops = (flags & 4) != 0;
  options.duplicates = (flags & 8) ? DFGNN_DUPLICATES_REJECT : DFGNN_DUPLICATES_KEEP;
  const int64_t n = node_count(data[1]);
  data += 2;
  size -= 2;

  // Elements as int64 values, and the same values in the index type given to the library.
  const size_t width = small ? 1 : (wide ? 8 : 4);
  std::vector<int64_t> values;
  for (size_t k = 0; k + width <= size; k += width) {
    int64_t v = 0;
    if (small) v = static_cast<int64_t>(data[k]) - 8;
    else if (wide) std::memcpy(&v, data + k, 8);
    else { int32_t w; std::memcpy(&w, data + k, 4); v = w; }
    values.push_back(v);
  }
  std::vector<int32_t> a32;
  std::vector<int64_t> a64;
  for (int64_t v : values) {
    if (wide) a64.push_back(v);
    else a32.push_back(static_cast<int32_t>(v));  // small values fit; raw int32 values came from int32
  }
  const void* array = wide ? static_cast<const void*>(a64.data()) : static_cast<const void*>(a32.data());
  const dfgnn_index_type_t type = wide ? DFGNN_INDEX_INT64 : DFGNN_INDEX_INT32;
  const int64_t count = static_cast<int64_t>(values.size());

  // The documented rules, checked here.
  bool valid = n >= 0 && n <= std::numeric_limits<int32_t>::max() - 1;
  std::vector<std::pair<int64_t, int64_t>> edges;
  dfgnn_status_t status;
  dfgnn_graph_t graph = nullptr;
  if (csr) {
    if (valid && count < n + 1) return 0;  // row_ptr must have N + 1 entries (the caller's contract)
    const int64_t rows = valid ? n : 0;
    const int64_t nnz = count - (rows + 1);
    const char* base = static_cast<const char*>(array);
    const void* row_ptr = count > 0 ? array : nullptr;
    const void* col_idx = nnz > 0 ? base + (rows + 1) * static_cast<int64_t>(wide ? 8 : 4) : nullptr;
    if (valid) {
      valid = values[0] == 0;
      for (int64_t i = 0; valid && i < n; ++i) valid = values[i] <= values[i + 1] && values[i + 1] <= nnz;
      valid = valid && values[n] == nnz;
      for (int64_t i = 0; valid && i < n; ++i)
        for (int64_t p = values[i]; valid && p < values[i + 1]; ++p) {
          const int64_t j = values[n + 1 + p];
          valid = j >= 0 && j < n;
          edges.emplace_back(j, i);
        }
    }
    status = dfgnnGraphCreateCsr(context(), n, std::max<int64_t>(nnz, 0), row_ptr, col_idx, type,
                                 DFGNN_MEMORY_HOST, &options, &graph);
  } else {
    const int64_t e = count / 2;
    for (int64_t k = 0; valid && k < e; ++k) {
      const int64_t s = values[k], d = values[e + k];
      valid = s >= 0 && s < n && d >= 0 && d < n;
      edges.emplace_back(s, d);
    }
    status = dfgnnGraphCreateCoo(context(), n, e, e > 0 ? array : nullptr, type, DFGNN_MEMORY_HOST, &options, &graph);
  }
  fuzz::check_error_message(status);

  Reference ref;
  if (valid) {
    ref = build(n, edges, options.add_self_loops != 0);
    if (ref.duplicate && options.duplicates == DFGNN_DUPLICATES_REJECT) valid = false;
  }
  FUZZ_CHECK((status == DFGNN_STATUS_SUCCESS) == valid,
             std::string("status ") + std::to_string(status) + " for " + (valid ? "valid" : "invalid") + " input: " +
                 dfgnnGetLastErrorMessage());
  if (!valid) {
    if (ref.duplicate) FUZZ_CHECK(status == DFGNN_STATUS_DUPLICATE_EDGE, "duplicate not reported as such");
    return 0;
  }
  fuzz::check_graph(graph);
  const int32_t *ptr = nullptr, *idx = nullptr, *eid = nullptr;
  dfgnnGraphGetCsr(graph, DFGNN_MEMORY_HOST, &ptr, &idx, &eid);
  for (int64_t i = 0; i < n; ++i) {
    FUZZ_CHECK(ptr[i + 1] - ptr[i] == static_cast<int64_t>(ref.rows[i].size()), "row length differs");
    for (int32_t p = ptr[i]; p < ptr[i + 1]; ++p)
      FUZZ_CHECK(ref.rows[i][p - ptr[i]] == std::make_pair(idx[p], eid[p]), "CSR entry differs from the reference");
  }
  dfgnnGraphDestroy(graph);
  return 0;
}
