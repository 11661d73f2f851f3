// Shared by the libFuzzer targets: property checks that abort (libFuzzer then keeps the input as a
// crash), a private temp file per process, and the graph properties every accepted graph must have.
#pragma once

#include <dfgnn/dfgnn.h>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace fuzz {

// A violated property: print it and abort, so libFuzzer records the input.
[[noreturn]] inline void violated(const char* file, int line, const char* what, const std::string& detail) {
  std::fprintf(stderr, "PROPERTY VIOLATED at %s:%d: %s %s\n", file, line, what, detail.c_str());
  std::abort();
}
#define FUZZ_CHECK(cond, detail) \
  do {                           \
    if (!(cond)) ::fuzz::violated(__FILE__, __LINE__, #cond, (detail)); \
  } while (0)

// A failing call must say why: a non-OK status comes with a non-empty message.
inline void check_error_message(dfgnn_status_t status) {
  if (status == DFGNN_STATUS_SUCCESS) return;
  const char* message = dfgnnGetLastErrorMessage();
  FUZZ_CHECK(message != nullptr && message[0] != '\0', "status " + std::to_string(status) + " without a message");
}

// A file name private to this process under $TMPDIR (or /tmp), with the given suffix.
inline std::string temp_path(const std::string& suffix) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/dfgnn-fuzz-" + std::to_string(getpid()) + suffix;
}

inline void write_file(const std::string& path, const void* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();  // the harness's own failure, not the library's
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

inline std::vector<char> read_file(const std::string& path) {
  std::vector<char> out;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.insert(out.end(), buf, buf + n);
  std::fclose(f);
  return out;
}

// The host CSR and CSC of an accepted graph are consistent: row_ptr starts at 0, never decreases,
// ends at E; every index is a node; edge ids are a permutation of [0, E); the CSC is the exact
// transpose (csr_pos points at the CSR entry of the same edge).
inline void check_graph(dfgnn_graph_t graph) {
  int64_t n = -1, e = -1;
  FUZZ_CHECK(dfgnnGraphGetSize(graph, &n, &e) == DFGNN_STATUS_SUCCESS, dfgnnGetLastErrorMessage());
  FUZZ_CHECK(n >= 0 && e >= 0, "negative size");
  const int32_t *ptr = nullptr, *idx = nullptr, *eid = nullptr;
  FUZZ_CHECK(dfgnnGraphGetCsr(graph, DFGNN_MEMORY_HOST, &ptr, &idx, &eid) == DFGNN_STATUS_SUCCESS,
             dfgnnGetLastErrorMessage());
  FUZZ_CHECK(ptr != nullptr && ptr[0] == 0 && ptr[n] == e, "row_ptr ends");
  std::vector<char> seen(static_cast<size_t>(e), 0);
  for (int64_t i = 0; i < n; ++i) {
    FUZZ_CHECK(ptr[i] <= ptr[i + 1], "row_ptr decreases at " + std::to_string(i));
    for (int32_t p = ptr[i]; p < ptr[i + 1]; ++p) {
      FUZZ_CHECK(idx[p] >= 0 && idx[p] < n, "col_idx out of range");
      FUZZ_CHECK(eid[p] >= 0 && eid[p] < e && !seen[eid[p]], "edge ids are not a permutation");
      seen[eid[p]] = 1;
    }
  }
  const int32_t *cptr = nullptr, *ridx = nullptr, *pos = nullptr;
  FUZZ_CHECK(dfgnnGraphGetCsc(graph, DFGNN_MEMORY_HOST, &cptr, &ridx, &pos) == DFGNN_STATUS_SUCCESS,
             dfgnnGetLastErrorMessage());
  FUZZ_CHECK(cptr[0] == 0 && cptr[n] == e, "col_ptr ends");
  std::fill(seen.begin(), seen.end(), 0);
  for (int64_t j = 0; j < n; ++j) {
    FUZZ_CHECK(cptr[j] <= cptr[j + 1], "col_ptr decreases");
    for (int32_t q = cptr[j]; q < cptr[j + 1]; ++q) {
      const int32_t i = ridx[q], p = pos[q];
      FUZZ_CHECK(i >= 0 && i < n && p >= 0 && p < e && !seen[p], "csr_pos is not a permutation");
      seen[p] = 1;
      FUZZ_CHECK(idx[p] == j && ptr[i] <= p && p < ptr[i + 1], "CSC entry is not the transposed CSR entry");
    }
  }
  dfgnn_fingerprint_t fp{};
  FUZZ_CHECK(dfgnnGraphGetFingerprint(graph, &fp) == DFGNN_STATUS_SUCCESS, dfgnnGetLastErrorMessage());
  FUZZ_CHECK(fp.num_nodes == n && fp.num_edges == e, "fingerprint sizes");
}

}  // namespace fuzz
