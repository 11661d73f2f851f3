// Graph files through dfgnnGraphCreateFromFile: the dataset edge list and Matrix Market readers,
// plain and gzip. The first byte picks the format and how the rest is stored; the rest is the file.
// Properties: an accepted file gives a consistent graph (fuzz::check_graph); an accepted edge list
// holds exactly the header's node count and the edges of its lines (read here independently); an
// accepted symmetric Matrix Market file gives a symmetric edge multiset; a rejected one says why, in
// printable ASCII (text quoted from the file is cleaned).
#include "fuzz_util.hpp"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>

namespace {

dfgnn_context_t context() {
  static dfgnn_context_t ctx = [] {
    dfgnn_context_t c = nullptr;
    if (dfgnnCreate(&c) != DFGNN_STATUS_SUCCESS) std::abort();
    return c;
  }();
  return ctx;
}

using Edges = std::vector<std::pair<int64_t, int64_t>>;

std::vector<std::string> tokens(std::string_view line) {
  std::vector<std::string> out;
  std::string token;
  for (char c : line) {
    if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') {
      if (!token.empty()) out.push_back(std::exchange(token, {}));
    } else {
      token += c;
    }
  }
  if (!token.empty()) out.push_back(token);
  return out;
}

std::optional<int64_t> integer(const std::string& s) {
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), nullptr, 10);
  if (errno != 0) return std::nullopt;
  return v;
}

std::vector<std::string_view> lines(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    out.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

// The edge list format as documented, read independently of graph_io.cpp: header tokens
// "# nodes N edges E", then "src dst" lines. Only called for files the library accepted.
void check_edge_list(std::string_view text, dfgnn_graph_t graph) {
  const auto all = lines(text);
  FUZZ_CHECK(!all.empty(), "accepted an empty file");
  const auto header = tokens(all[0]);
  FUZZ_CHECK(header.size() >= 5 && header[0] == "#" && header[1] == "nodes" && header[3] == "edges",
             "accepted a file without the header");
  const auto n = integer(header[2]), e = integer(header[4]);
  FUZZ_CHECK(n && e, "header sizes are not integers");
  Edges expected;
  for (size_t k = 1; k < all.size(); ++k) {
    const auto t = tokens(all[k]);
    FUZZ_CHECK(t.size() == 2, "accepted a line without exactly two tokens");
    const auto s = integer(t[0]), d = integer(t[1]);
    FUZZ_CHECK(s && d && *s < *n && *d < *n, "accepted a bad node id");
    expected.emplace_back(*s, *d);
  }
  int64_t nodes = 0, edges = 0;
  dfgnnGraphGetSize(graph, &nodes, &edges);
  FUZZ_CHECK(nodes == *n, "node count differs from the header");
  FUZZ_CHECK(edges == *e && static_cast<int64_t>(expected.size()) == *e, "edge count differs from the header");
  // In-edges of row i in file order (the CSR keeps input order within a row).
  const int32_t *ptr = nullptr, *idx = nullptr, *eid = nullptr;
  dfgnnGraphGetCsr(graph, DFGNN_MEMORY_HOST, &ptr, &idx, &eid);
  for (int64_t i = 0; i < nodes; ++i)
    for (int32_t p = ptr[i]; p < ptr[i + 1]; ++p)
      FUZZ_CHECK(expected[eid[p]] == std::make_pair(int64_t{idx[p]}, i), "edge differs from its line");
}

// Entries of a symmetric file are mirrored: every edge a -> b has as many b -> a.
void check_symmetric(dfgnn_graph_t graph) {
  int64_t nodes = 0, edges = 0;
  dfgnnGraphGetSize(graph, &nodes, &edges);
  const int32_t *ptr = nullptr, *idx = nullptr;
  dfgnnGraphGetCsr(graph, DFGNN_MEMORY_HOST, &ptr, &idx, nullptr);
  std::map<std::pair<int32_t, int32_t>, int64_t> count;
  for (int32_t i = 0; i < nodes; ++i)
    for (int32_t p = ptr[i]; p < ptr[i + 1]; ++p) ++count[{idx[p], i}];
  for (const auto& [edge, c] : count) {
    const auto it = count.find({edge.second, edge.first});
    FUZZ_CHECK(it != count.end() && it->second == c, "symmetric file gave an asymmetric graph");
  }
}

bool symmetric_banner(std::string_view text) {
  const auto t = tokens(lines(text).empty() ? std::string_view{} : lines(text)[0]);
  if (t.size() < 5) return false;
  std::string s = t[4];
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s == "symmetric" || s == "skew-symmetric";
}

// A valid graph of N nodes takes O(N) memory by design, and a file's N is bounded by the edges read
// (N <= 16 min(M + 1, 2E) + 65536, README): for text given as the file (or gzipped here), E is
// bounded by the input's size, so any allocation beyond the fuzzer's limit
// (tests/fuzz/fuzz_graph_file.options) is amplification, from a header or one large node id.
// Raw gzip bytes can inflate to many lines: there sizes are kept below 2^20.
bool has_large_number(std::string_view text) {
  size_t digits = 0;
  int64_t value = 0;
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      value = ++digits > 7 ? value : value * 10 + (c - '0');
      if (digits > 7 || value >= (int64_t{1} << 20)) return true;
    } else {
      digits = 0;
      value = 0;
    }
  }
  return false;
}

// What the reader sees of a file: the bytes, inflated if they are gzip (zlib, as many members as
// there are), at most 1 MiB.
std::string decoded(const std::string& path) {
  std::string out;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  char buf[4096];
  for (int n; out.size() < (1u << 20) && (n = gzread(f, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return out;
}

void write_gzip(const std::string& path, std::string_view text) {
  gzFile f = gzopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (!text.empty() && gzwrite(f, text.data(), static_cast<unsigned>(text.size())) != static_cast<int>(text.size()))
    std::abort();
  gzclose(f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int mode = data[0] % 7;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  // mode: 0 edge list, 1 .mtx, 2 edge list gzipped here, 3 .mtx gzipped here, 4 raw bytes as .gz
  // (the gzip decoder sees the mutations), 5 raw bytes as .mtx.gz, 6 a directory with edges.txt.
  static const char* const suffix[] = {".txt", ".mtx", ".txt.gz", ".mtx.gz", ".gz", ".mtx.gz", ".d"};
  const std::string path = fuzz::temp_path(suffix[mode]);
  std::string open = path;
  if (mode == 2 || mode == 3) {
    write_gzip(path, text);
  } else if (mode == 6) {
    std::filesystem::create_directories(path);
    open = path + "/edges.txt";
    fuzz::write_file(open, text.data(), text.size());
    open = path;
  } else {
    fuzz::write_file(path, text.data(), text.size());
  }

  if ((mode == 4 || mode == 5) && has_large_number(decoded(path))) {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    return 0;
  }

  dfgnn_graph_t graph = nullptr;
  const dfgnn_status_t status = dfgnnGraphCreateFromFile(context(), open.c_str(), nullptr, &graph);
  fuzz::check_error_message(status);
  if (status != DFGNN_STATUS_SUCCESS) {
    // Text quoted from the file is cleaned (graph_io.cpp, quote()); the path here is ASCII.
    for (const char* c = dfgnnGetLastErrorMessage(); *c != '\0'; ++c)
      FUZZ_CHECK(*c >= 0x20 && *c < 0x7f, std::string("a byte outside printable ASCII in the message: ") +
                                              dfgnnGetLastErrorMessage());
  }
  if (status == DFGNN_STATUS_SUCCESS) {
    fuzz::check_graph(graph);
    const bool text_is_file = mode != 4 && mode != 5;  // raw modes: the bytes are gzip, not text
    const bool mtx = mode == 1 || mode == 3 || mode == 5;
    if (text_is_file && !mtx) check_edge_list(text, graph);
    if (text_is_file && mtx && symmetric_banner(text)) check_symmetric(graph);
    dfgnnGraphDestroy(graph);
  } else {
    FUZZ_CHECK(graph == nullptr, "a failed create set the handle");
  }
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  return 0;
}
