// Graph files (edge lists, Matrix Market, gzip) and the R-MAT / planted-hub generators.
#include "graph_io.hpp"
#include "error.hpp"
#include "test_util.hpp"

#include <zlib.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utility>
#include <vector>

namespace dfgnn {
namespace {

namespace fs = std::filesystem;
using test::GraphPtr;

// A fresh directory under the system temp dir, removed with everything in it.
struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() /
           ("dfgnn_io_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return (path / name).string();
  }
  std::string write_gz(const std::string& name, const std::string& text) const {
    const std::string file = (path / name).string();
    gzFile gz = gzopen(file.c_str(), "wb");
    EXPECT_NE(gz, nullptr);
    EXPECT_EQ(gzwrite(gz, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
    gzclose(gz);
    return file;
  }
};

struct LoadResult {
  test::ContextPtr ctx;  // outlives the graph (members are destroyed in reverse order)
  dfgnn_status_t status;
  std::string message;
  GraphPtr graph;
};

LoadResult load(const std::string& path) {
  auto ctx = test::make_context();
  dfgnn_graph_t g = nullptr;
  const dfgnn_status_t s = dfgnnGraphCreateFromFile(ctx.get(), path.c_str(), nullptr, &g);
  return {std::move(ctx), s, s == DFGNN_STATUS_SUCCESS ? "" : dfgnnGetLastErrorMessage(), GraphPtr(g)};
}

struct Csr {
  int64_t n = 0, e = 0;
  std::vector<int32_t> row_ptr, col_idx, edge_id;
  bool operator==(const Csr&) const = default;
  int32_t max_degree() const {
    int32_t m = 0;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, row_ptr[i + 1] - row_ptr[i]);
    return m;
  }
};

Csr csr_of(dfgnn_graph_t g) {
  Csr c;
  EXPECT_EQ(dfgnnGraphGetSize(g, &c.n, &c.e), DFGNN_STATUS_SUCCESS);
  const int32_t *rp = nullptr, *ci = nullptr, *ei = nullptr;
  EXPECT_EQ(dfgnnGraphGetCsr(g, DFGNN_MEMORY_HOST, &rp, &ci, &ei), DFGNN_STATUS_SUCCESS);
  c.row_ptr.assign(rp, rp + c.n + 1);
  c.col_idx.assign(ci, ci + c.e);
  c.edge_id.assign(ei, ei + c.e);
  return c;
}

// (src, dst) pairs of an edge list, in order.
std::vector<std::pair<int64_t, int64_t>> pairs(const EdgeList& el) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t e = 0; e < el.num_edges(); ++e) out.emplace_back(el.edge_index[e], el.edge_index[el.num_edges() + e]);
  return out;
}

// Runs f, which must throw dfgnn::Error with this status and a message containing `needle`.
template <typename F>
void expect_error(F&& f, dfgnn_status_t status, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected status " << status << " with '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "'" << needle << "' not in: " << e.what();
  }
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// ---------------------------------------------------------------- files

TEST(GraphIo, LoadsShippedCora) {
  auto r = load((test::source_dir() / "data/cora").string());
  ASSERT_EQ(r.status, DFGNN_STATUS_SUCCESS) << r.message;
  const Csr c = csr_of(r.graph.get());
  EXPECT_EQ(c.n, 2708);
  EXPECT_EQ(c.e, 10556);
  EXPECT_EQ(c.max_degree(), 168);
}

TEST(GraphIo, PlainAndGzipGiveTheSameGraph) {
  const std::string text = slurp(test::source_dir() / "data/cora/edges.txt");
  ASSERT_FALSE(text.empty());
  TempDir tmp;
  fs::create_directories(tmp.path / "gzdir");
  const std::string plain = tmp.write("edges.txt", text);
  const std::string gz = tmp.write_gz("cora.txt.gz", text);
  tmp.write_gz("gzdir/edges.txt.gz", text);
  const Csr expected = csr_of(load(plain).graph.get());
  EXPECT_EQ(expected.e, 10556);
  for (const std::string& path : {gz, (tmp.path / "gzdir").string()}) {
    auto r = load(path);
    ASSERT_EQ(r.status, DFGNN_STATUS_SUCCESS) << path << ": " << r.message;
    EXPECT_TRUE(csr_of(r.graph.get()) == expected) << path;
  }
}

TEST(GraphIo, TruncatedGzipIsIoError) {
  const std::string text = slurp(test::source_dir() / "data/cora/edges.txt");
  TempDir tmp;
  const std::string gz = slurp(tmp.write_gz("full.txt.gz", text));
  const std::string cut = tmp.write("cut.txt.gz", gz.substr(0, gz.size() / 2));
  expect_error([&] { read_graph_file(cut); }, DFGNN_STATUS_IO_ERROR, "cut.txt.gz");
}

TEST(GraphIo, EdgeListToleratesCrlfAndMissingFinalNewline) {
  TempDir tmp;
  const EdgeList el = read_graph_file(tmp.write("g.txt", "# nodes 3 edges 2 directed\r\n0 1\r\n2  0"));
  EXPECT_EQ(el.num_nodes, 3);
  EXPECT_EQ(pairs(el), (std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {2, 0}}));
  const EdgeList empty = read_graph_file(tmp.write("e.txt", "# nodes 4 edges 0\n"));
  EXPECT_EQ(empty.num_nodes, 4);
  EXPECT_EQ(empty.num_edges(), 0);
  // A header longer than the reader's 1 MiB chunk makes it grow its buffer.
  const std::string long_header = "# nodes 2 edges 1 " + std::string(3 << 20, 'x') + "\n1 0\n";
  EXPECT_EQ(pairs(read_graph_file(tmp.write("long.txt", long_header))), (std::vector<std::pair<int64_t, int64_t>>{{1, 0}}));
}

TEST(GraphIo, MissingFileIsIoError) {
  auto r = load("/nonexistent/dfgnn/graph.txt");
  EXPECT_EQ(r.status, DFGNN_STATUS_IO_ERROR);
  EXPECT_NE(r.message.find("/nonexistent/dfgnn/graph.txt"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("No such file"), std::string::npos) << r.message;
  TempDir tmp;  // a directory without an edge file
  expect_error([&] { read_graph_file(tmp.path.string()); }, DFGNN_STATUS_IO_ERROR, "edges.txt");
}

TEST(GraphIo, EdgeListErrorsNameTheLine) {
  struct Case {
    const char* text;
    const char* needle;
  };
  const Case cases[] = {
      {"", ":1:"},                                               // empty file
      {"0 1\n1 2\n", ":1:"},                                     // header missing
      {"# nodes x edges 2\n0 1\n1 0\n", ":1:"},                  // header unparseable
      {"# nodes 3 edges 3\n0 1\n1 2\n", ":3: file ends after 2"}, // fewer lines than E
      {"# nodes 3 edges 1\n0 1\n1 2\n", ":3: more edge lines"},   // more lines than E
      {"# nodes 3 edges 2\n0 1\n1 3\n", ":3: node id 3 is out of range"},
      {"# nodes 3 edges 2\n0 x1\n1 2\n", ":2: 'x1' is not"},
      {"# nodes 3 edges 2\n0 1\n-1 2\n", ":3: '-1' is not"},
      {"# nodes 3 edges 2\n-0 1\n1 2\n", ":2: '-0' is not"},       // a sign is no digit (fuzz_graph_file)
      {"# nodes -0 edges 2\n0 1\n1 2\n", ":1: expected a '# nodes N edges E'"},
      {"# nodes 3 edges 2\n0 1 2\n1 2\n", ":2: unexpected extra token"},
      {"# nodes 3 edges 2\n0 1\n\n", ":3: expected two node ids"},
      {"# nodes 3 edges 2\n0 1\n2\n", ":3: expected two node ids"},
  };
  TempDir tmp;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const std::string path = tmp.write("bad.txt", c.text);
    auto r = load(path);
    EXPECT_EQ(r.status, DFGNN_STATUS_PARSE_ERROR);
    EXPECT_NE(r.message.find(path + c.needle), std::string::npos) << r.message;
  }
}

TEST(GraphIo, MatrixMarketPatternGeneral) {
  TempDir tmp;
  const std::string text =
      "%%MatrixMarket matrix coordinate pattern general\n% a comment\n%\n3 3 4\n1 2\n2 3\n3 1\n3 3\n";
  const EdgeList el = read_graph_file(tmp.write("g.mtx", text));
  EXPECT_EQ(el.num_nodes, 3);
  EXPECT_EQ(pairs(el), (std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 2}, {2, 0}, {2, 2}}));
  EXPECT_EQ(pairs(read_graph_file(tmp.write_gz("g.mtx.gz", text))), pairs(el));
}

TEST(GraphIo, MatrixMarketSymmetricReal) {
  TempDir tmp;
  const std::string path = tmp.write(
      "g.mtx", "%%MatrixMarket matrix coordinate real symmetric\n4 4 3\n2 1 0.5\n4 4 -1e3\n3 1 2\n");
  const EdgeList el = read_graph_file(path);
  EXPECT_EQ(el.num_nodes, 4);
  // Off-diagonal entries are mirrored, the diagonal one is not.
  EXPECT_EQ(pairs(el), (std::vector<std::pair<int64_t, int64_t>>{{1, 0}, {0, 1}, {3, 3}, {2, 0}, {0, 2}}));
  auto r = load(path);  // through the C API too
  ASSERT_EQ(r.status, DFGNN_STATUS_SUCCESS) << r.message;
  EXPECT_EQ(csr_of(r.graph.get()).e, 5);
  const EdgeList ints = read_graph_file(
      tmp.write("i.mtx", "%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 2 7\n"));
  EXPECT_EQ(pairs(ints), (std::vector<std::pair<int64_t, int64_t>>{{0, 1}}));
}

TEST(GraphIo, MatrixMarketErrors) {
  struct Case {
    const char* text;
    const char* needle;
  };
  const Case cases[] = {
      {"%%MatrixMarked matrix coordinate pattern general\n2 2 1\n1 2\n", ":1: expected the banner"},
      {"3 3 1\n1 2\n", ":1: expected the banner"},
      {"%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n", ":1: dense 'array'"},
      {"%%MatrixMarket matrix coordinate complex general\n2 2 1\n1 2 1 0\n", ":1: 'complex'"},
      {"%%MatrixMarket matrix coordinate real hermitian\n2 2 1\n1 2 1\n", ":1: 'hermitian'"},
      {"%%MatrixMarket matrix coordinate pattern general\n% only comments\n", ":2: missing the size line"},
      {"%%MatrixMarket matrix coordinate pattern general\n2 3 1\n1 2\n", ":2: matrix is 2 x 3"},
      {"%%MatrixMarket matrix coordinate pattern general\n3 3 2\n0 1\n1 2\n", ":3: index 0 is out of range [1, 3]"},
      {"%%MatrixMarket matrix coordinate pattern general\n3 3 2\n-0 1\n1 2\n", ":3: '-0' is not"},
      {"%%MatrixMarket matrix coordinate pattern general\n3 3 -0\n", ":2: expected the size line"},
      {"%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n4 1\n", ":4: index 4 is out of range"},
      {"%%MatrixMarket matrix coordinate pattern general\n3 3 3\n1 2\n2 3\n", ":4: file ends after 2 entries"},
      {"%%MatrixMarket matrix coordinate pattern general\n3 3 1\n1 2\n2 3\n", ":4: more entries"},
      {"%%MatrixMarket matrix coordinate real general\n3 3 1\n1 2\n", ":3: expected a value (real field)"},
      {"%%MatrixMarket matrix coordinate integer general\n3 3 1\n1 2 1.5\n", ":3: expected a value (integer field)"},
      {"%%MatrixMarket matrix coordinate pattern general\n3 3 1\n1 2 1\n", ":3: unexpected extra token"},
  };
  TempDir tmp;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const std::string path = tmp.write("bad.mtx", c.text);
    auto r = load(path);
    EXPECT_EQ(r.status, DFGNN_STATUS_PARSE_ERROR);
    EXPECT_NE(r.message.find(path + c.needle), std::string::npos) << r.message;
  }
}

TEST(GraphIo, SharedDatasets) {
  DFGNN_REQUIRE_SHARED_DATASETS();
  const std::tuple<const char*, int64_t, int64_t> sets[] = {{"blogcatalog", 10312, 667966}, {"pubmed", 19717, 88648}};
  for (const auto& [name, nodes, edges] : sets) {
    auto r = load((test::shared_datasets() / name).string());
    ASSERT_EQ(r.status, DFGNN_STATUS_SUCCESS) << name << ": " << r.message;
    int64_t n = 0, e = 0;
    ASSERT_EQ(dfgnnGraphGetSize(r.graph.get(), &n, &e), DFGNN_STATUS_SUCCESS);
    EXPECT_EQ(n, nodes) << name;
    EXPECT_EQ(e, edges) << name;
  }
}

// ---------------------------------------------------------------- header sizes (issue 15, item 4)

// Runs f in a forked child whose address space may grow by at most `headroom` bytes beyond what it
// has mapped now; true if f returned there. A reader that allocated from a header's count before
// reading anything fails there with std::bad_alloc.
template <typename F>
bool runs_within(size_t headroom, F&& f) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    size_t pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    const rlim_t limit = pages * static_cast<size_t>(::sysconf(_SC_PAGESIZE)) + headroom;
    const rlimit r{limit, limit};
    ::setrlimit(RLIMIT_AS, &r);
    try {
      f();
    } catch (const std::bad_alloc&) {
      std::_Exit(2);
    } catch (...) {
      std::_Exit(3);
    }
    std::_Exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

TEST(GraphIo, HeaderEdgeCountIsCheckedAgainstTheLinesNotAllocated) {
  TempDir tmp;
  for (const int64_t declared : {int64_t{500000000}, int64_t{2147483647}}) {
    SCOPED_TRACE(declared);
    const std::string path = tmp.write("big.txt", fmt::format("# nodes 10 edges {}\n0 1\n", declared));
    // The real problem, with both numbers, instead of "out of host memory".
    expect_error([&] { read_graph_file(path); }, DFGNN_STATUS_PARSE_ERROR,
                 fmt::format("file ends after 1 edge lines, the header declares {}", declared));
    // ... and found with little memory (the header's count used to be allocated up front: 8 GB).
    EXPECT_TRUE(runs_within(size_t{256} << 20, [&] { expect_error([&] { read_graph_file(path); }, DFGNN_STATUS_PARSE_ERROR, "file ends"); }));
  }
  const std::string mtx = tmp.write(
      "big.mtx", "%%MatrixMarket matrix coordinate pattern symmetric\n10 10 1000000000\n1 2\n");
  expect_error([&] { read_graph_file(mtx); }, DFGNN_STATUS_PARSE_ERROR,
               "file ends after 1 entries, the size line declares 1000000000");
  EXPECT_TRUE(runs_within(size_t{256} << 20, [&] { expect_error([&] { read_graph_file(mtx); }, DFGNN_STATUS_PARSE_ERROR, "file ends"); }));
}

TEST(GraphIo, HeaderNodeCountFarAboveTheIdsReadIsAnError) {
  TempDir tmp;
  // Isolated nodes beyond the largest id are kept up to 16 x (largest id + 1) + 65536 nodes.
  const std::string ok = tmp.write("ok.txt", "# nodes 65568 edges 1\n0 1\n");  // 16 * 2 + 65536
  EXPECT_EQ(read_graph_file(ok).num_nodes, 65568);
  const std::string no_edges = tmp.write("none.txt", "# nodes 65536 edges 0\n");
  EXPECT_EQ(read_graph_file(no_edges).num_nodes, 65536);
  const auto rejected = [&](const std::string& text, const std::string& needle) {
    SCOPED_TRACE(text);
    expect_error([&] { read_graph_file(tmp.write("bad.txt", text)); }, DFGNN_STATUS_PARSE_ERROR, needle);
  };
  rejected("# nodes 65569 edges 1\n0 1\n", "the header declares 65569 nodes but the largest node id read is 1");
  rejected("# nodes 1073741824 edges 1\n0 1\n", "= 65568 nodes are accepted");
  rejected("# nodes 2147483646 edges 1\n0 1\n", "declares 2147483646 nodes");
  rejected("# nodes 65537 edges 0\n", "declares 65537 nodes but no node id was read");
  expect_error([&] { read_graph_file(tmp.write("bad.mtx", "%%MatrixMarket matrix coordinate pattern general\n"
                                                          "1000000 1000000 1\n1 2\n")); },
               DFGNN_STATUS_PARSE_ERROR, "the size line declares 1000000 nodes but the largest node id read is 1");
  // Through the C API too, and quickly: no O(N) arrays are built for the header's N.
  auto r = load(tmp.write("huge.txt", "# nodes 1073741824 edges 1\n0 1\n"));
  EXPECT_EQ(r.status, DFGNN_STATUS_PARSE_ERROR) << r.message;
  EXPECT_NE(r.message.find("dfgnnGraphCreateCoo"), std::string::npos) << r.message;
}

// Issue 26: a Matrix Market banner word is quoted in the message only as the line excerpt is
// (control bytes and every non-ASCII byte, bidirectional controls included, shown as '?'), in the
// C API's last error message too.
TEST(GraphIo, MatrixMarketBannerWordsAreQuotedClean) {
  TempDir tmp;
  const std::string evil = "\x1b]0;title\x07\x1b[31m\xe2\x80\xae";  // OSC title, red, U+202E
  struct Case {
    std::string banner, needle;
  };
  const Case cases[] = {
      {"%%MatrixMarket matrix" + evil + " coordinate pattern general", "object 'matrix\?]0;title\?\?[31m\?\?\?' is not supported"},
      {"%%MatrixMarket matrix coordinate" + evil + " pattern general", "format 'coordinate\?]0;title\?\?[31m\?\?\?' is not"},
      {"%%MatrixMarket matrix coordinate pattern" + evil + " general", "field 'pattern\?]0;title\?\?[31m\?\?\?' is not"},
      {"%%MatrixMarket matrix coordinate pattern general" + evil, "symmetry 'general\?]0;title\?\?[31m\?\?\?' is not general"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.needle);
    const std::string path = tmp.write("evil.mtx", c.banner + "\n2 2 1\n1 2\n");
    expect_error([&] { read_graph_file(path); }, DFGNN_STATUS_PARSE_ERROR, c.needle);
    const auto r = load(path);
    EXPECT_EQ(r.status, DFGNN_STATUS_PARSE_ERROR);
    EXPECT_NE(r.message.find(c.needle), std::string::npos) << r.message;
    for (unsigned char ch : r.message) EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << int(ch) << " in " << r.message;
  }
}

// Issue 26: one large node id (and a header N to match) used to make O(N) arrays once the one edge
// was read: 8.6 GB for this file (40 bytes; the "43-byte file"). Nodes are bounded by the
// edges read too (E edges touch at most 2E nodes): refused, naming the ratio, within 1 GB.
TEST(GraphIo, OneLargeNodeIdIsRefusedWithinLittleMemory) {
  TempDir tmp;
  const std::string text = "# nodes 2147483646 edges 1\n2147483645 0\n";
  const std::string path = tmp.write("g.txt", text);
  const std::string needle =
      "the header declares 2147483646 nodes for 1 edge(s) read, 2147483646 nodes per edge (largest node id "
      "2147483645); at most 16 x (2 x edges) + 65536 = 65568 nodes are accepted from a file";
  // In a child limited to 1 GB more than it has mapped: the C API refuses it with that message.
  const bool refused_in_child = runs_within(size_t{1} << 30, [&] {
    const auto r = load(path);
    if (r.status != DFGNN_STATUS_PARSE_ERROR || r.message.find(needle) == std::string::npos ||
        r.message.find("dfgnnGraphCreateCoo") == std::string::npos)
      throw std::runtime_error(r.message);
  });
  ASSERT_TRUE(refused_in_child);
  const auto r = load(path);  // here too, for the message
  EXPECT_EQ(r.status, DFGNN_STATUS_PARSE_ERROR);
  EXPECT_NE(r.message.find(needle), std::string::npos) << r.message;
  // The 34-byte case of the issue, and a Matrix Market file: refused the same way.
  expect_error([&] { read_graph_file(tmp.write("h.txt", "# nodes 100000000 edges 1\n99999999 0\n")); },
               DFGNN_STATUS_PARSE_ERROR, "declares 100000000 nodes for 1 edge(s) read, 100000000 nodes per edge");
  expect_error([&] { read_graph_file(tmp.write("g.mtx", "%%MatrixMarket matrix coordinate pattern symmetric\n"
                                                        "100000000 100000000 1\n100000000 1\n")); },
               DFGNN_STATUS_PARSE_ERROR, "the size line declares 100000000 nodes for 2 edge(s) read");
  // At the bound it is read: 16 x 2 + 65536 nodes for one edge between two far-apart ids.
  const auto ok = load(tmp.write("ok.txt", "# nodes 65568 edges 1\n65567 0\n"));
  ASSERT_EQ(ok.status, DFGNN_STATUS_SUCCESS) << ok.message;
  int64_t n = 0, e = 0;
  ASSERT_EQ(dfgnnGraphGetSize(ok.graph.get(), &n, &e), DFGNN_STATUS_SUCCESS);
  EXPECT_EQ(n, 65568);
  EXPECT_EQ(e, 1);
  expect_error([&] { read_graph_file(tmp.write("over.txt", "# nodes 65569 edges 1\n65568 0\n")); },
               DFGNN_STATUS_PARSE_ERROR, "declares 65569 nodes for 1 edge(s) read");
}

TEST(GraphIo, GzipWithTrailingGarbageIsParseError) {
  TempDir tmp;
  const std::string text = "# nodes 3 edges 2\n0 1\n1 2\n";
  const std::string gz = slurp(tmp.write_gz("g.txt.gz", text));
  EXPECT_EQ(pairs(read_graph_file(tmp.write("ok.txt.gz", gz))),
            (std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 2}}));
  for (const std::string& tail : {std::string("garbage"), std::string("x"), std::string(64, '\0')}) {
    SCOPED_TRACE(tail.size());
    expect_error([&] { read_graph_file(tmp.write("bad.txt.gz", gz + tail)); }, DFGNN_STATUS_PARSE_ERROR,
                 "trailing garbage after the gzip data");
  }
  // Concatenated gzip members are one stream (as gzip -d reads them), not garbage.
  const std::string first = slurp(tmp.write_gz("a.gz", "# nodes 3 edges 2\n0 1\n"));
  const std::string second = slurp(tmp.write_gz("b.gz", "1 2\n"));
  EXPECT_EQ(pairs(read_graph_file(tmp.write("two.txt.gz", first + second))),
            (std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 2}}));
  // A damaged first member stays an I/O error (the file itself is broken).
  std::string corrupt = gz;
  corrupt[corrupt.size() / 2] ^= 0x55;
  corrupt[corrupt.size() / 2 + 1] ^= 0x55;
  auto r = load(tmp.write("corrupt.txt.gz", corrupt));
  EXPECT_NE(r.status, DFGNN_STATUS_SUCCESS);
}

// ---------------------------------------------------------------- R-MAT

constexpr uint32_t kAllFlags =
    DFGNN_RMAT_DEDUPLICATE | DFGNN_RMAT_NO_SELF_LOOPS | DFGNN_RMAT_PERMUTE_IDS | DFGNN_RMAT_SYMMETRIZE;

EdgeList rmat(uint32_t flags, uint64_t seed = 7, int32_t scale = 10, int64_t edges = 16 << 10) {
  return generate_rmat(scale, edges, 0.57, 0.19, 0.19, flags, seed);
}

std::vector<int64_t> sorted_in_degrees(const EdgeList& el) {
  std::vector<int64_t> deg(el.num_nodes);
  for (const auto& [s, d] : pairs(el)) ++deg[d];
  std::sort(deg.begin(), deg.end());
  return deg;
}

TEST(Rmat, DeterministicPerSeed) {
  for (uint32_t flags : {0u, kAllFlags}) {
    EXPECT_EQ(rmat(flags, 1).edge_index, rmat(flags, 1).edge_index);
    EXPECT_NE(rmat(flags, 1).edge_index, rmat(flags, 2).edge_index);
  }
}

TEST(Rmat, SizesAndIdRange) {
  const EdgeList el = rmat(0, 3, 12, 5000);
  EXPECT_EQ(el.num_nodes, 4096);
  EXPECT_EQ(el.num_edges(), 5000);
  for (int64_t id : el.edge_index) ASSERT_TRUE(id >= 0 && id < 4096);
  EXPECT_EQ(rmat(0, 3, 5, 0).num_edges(), 0);
  // Through the C API.
  auto ctx = test::make_context();
  dfgnn_graph_t g = nullptr;
  DFGNN_ASSERT_OK(dfgnnGraphCreateRmat(ctx.get(), 12, 5000, 0.57, 0.19, 0.19, 0, 3, nullptr, &g));
  GraphPtr owner(g);
  const Csr c = csr_of(g);
  EXPECT_EQ(c.n, 4096);
  EXPECT_EQ(c.e, 5000);
}

TEST(Rmat, FlagsBehave) {
  const auto has_loop = [](const EdgeList& el) {
    for (const auto& [s, d] : pairs(el))
      if (s == d) return true;
    return false;
  };
  EXPECT_TRUE(has_loop(rmat(0)));  // the 0.57 quadrant makes 0 -> 0 likely
  EXPECT_FALSE(has_loop(rmat(DFGNN_RMAT_NO_SELF_LOOPS)));

  const auto plain = pairs(rmat(0));
  EXPECT_LT(std::set(plain.begin(), plain.end()).size(), plain.size());  // duplicates occur ...
  const auto dedup = pairs(rmat(DFGNN_RMAT_DEDUPLICATE));
  EXPECT_TRUE(std::is_sorted(dedup.begin(), dedup.end(), [](auto x, auto y) {
    return std::pair(x.second, x.first) < std::pair(y.second, y.first);
  }));
  EXPECT_EQ(std::set(dedup.begin(), dedup.end()).size(), dedup.size());  // ... and are dropped
  EXPECT_EQ(std::set(dedup.begin(), dedup.end()), std::set(plain.begin(), plain.end()));

  const auto sym = pairs(rmat(DFGNN_RMAT_SYMMETRIZE | DFGNN_RMAT_DEDUPLICATE));
  const std::set<std::pair<int64_t, int64_t>> sym_set(sym.begin(), sym.end());
  for (const auto& [s, d] : sym) ASSERT_TRUE(sym_set.count({d, s})) << s << " -> " << d;
  EXPECT_EQ(pairs(rmat(DFGNN_RMAT_SYMMETRIZE | DFGNN_RMAT_NO_SELF_LOOPS)).size(),
            2 * pairs(rmat(DFGNN_RMAT_NO_SELF_LOOPS)).size());

  // Permuting relabels the same graph: same degree multiset, different ids.
  const EdgeList unpermuted = rmat(DFGNN_RMAT_DEDUPLICATE), permuted = rmat(DFGNN_RMAT_DEDUPLICATE | DFGNN_RMAT_PERMUTE_IDS);
  EXPECT_EQ(sorted_in_degrees(unpermuted), sorted_in_degrees(permuted));
  EXPECT_NE(unpermuted.edge_index, permuted.edge_index);
}

TEST(Rmat, DegreesAreSkewed) {
  const EdgeList el = rmat(DFGNN_RMAT_DEDUPLICATE | DFGNN_RMAT_NO_SELF_LOOPS, 11, 14, 16 << 14);
  const auto deg = sorted_in_degrees(el);
  const double mean = static_cast<double>(el.num_edges()) / el.num_nodes;
  EXPECT_GT(deg.back(), 20 * mean) << "max " << deg.back() << ", mean " << mean;
  EXPECT_GT(std::count(deg.begin(), deg.end(), 0), el.num_nodes / 10);  // many nodes get nothing
}

TEST(Rmat, InvalidParametersAreRejected) {
  const auto bad = [](int32_t scale, int64_t edges, double a, double b, double c, uint32_t flags, const char* needle) {
    expect_error([&] { generate_rmat(scale, edges, a, b, c, flags, 1); }, DFGNN_STATUS_INVALID_ARGUMENT, needle);
  };
  bad(0, 10, 0.57, 0.19, 0.19, 0, "scale");
  bad(31, 10, 0.57, 0.19, 0.19, 0, "scale");
  bad(10, -1, 0.57, 0.19, 0.19, 0, "num_edges");
  bad(10, int64_t{1} << 31, 0.57, 0.19, 0.19, 0, "num_edges");
  bad(10, 10, -0.1, 0.19, 0.19, 0, "a must");
  bad(10, 10, 0.57, NAN, 0.19, 0, "b must");
  bad(10, 10, 0.57, 0.19, -1, 0, "c must");
  bad(10, 10, 0.6, 0.3, 0.2, 0, "a + b + c");
  bad(10, 10, 0.57, 0.19, 0.19, 16, "flags");
  auto ctx = test::make_context();
  dfgnn_graph_t g = nullptr;
  EXPECT_EQ(dfgnnGraphCreateRmat(ctx.get(), 0, 10, 0.57, 0.19, 0.19, 0, 1, nullptr, &g), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(g, nullptr);
}

// ---------------------------------------------------------------- planted hubs

TEST(PlantedHubs, HubsAreHeavyBothWays) {
  constexpr int64_t n = 2000, hub_degree = 1500;
  constexpr int32_t avg = 4, hubs = 3;
  auto ctx = test::make_context();
  dfgnn_graph_t g = nullptr;
  DFGNN_ASSERT_OK(dfgnnGraphCreatePlantedHubs(ctx.get(), n, avg, hubs, hub_degree, 5, nullptr, &g));
  GraphPtr owner(g);
  const Csr c = csr_of(g);
  EXPECT_EQ(c.n, n);
  EXPECT_EQ(c.e, n * avg + 2 * hubs * hub_degree);
  const int32_t *col_ptr = nullptr, *row_idx = nullptr;
  DFGNN_ASSERT_OK(dfgnnGraphGetCsc(g, DFGNN_MEMORY_HOST, &col_ptr, &row_idx, nullptr));
  for (int64_t i = 0; i < n; ++i) {
    const std::set<int32_t> sources(c.col_idx.begin() + c.row_ptr[i], c.col_idx.begin() + c.row_ptr[i + 1]);
    ASSERT_FALSE(sources.count(static_cast<int32_t>(i))) << "self-loop at " << i;
    if (i < hubs) {
      EXPECT_GE(c.row_ptr[i + 1] - c.row_ptr[i], hub_degree + avg);
      EXPECT_GE(static_cast<int64_t>(sources.size()), hub_degree);  // distinct hub sources
      EXPECT_GE(col_ptr[i + 1] - col_ptr[i], hub_degree);           // and as many out-edges
    } else {
      EXPECT_GE(c.row_ptr[i + 1] - c.row_ptr[i], avg);
    }
  }
}

TEST(PlantedHubs, HubSourcesAreDistinctEvenWhenAllNodesAreTaken) {
  // hub_degree = n - 1: every other node, exactly once.
  const EdgeList el = generate_planted_hubs(50, 0, 2, 49, 9);
  ASSERT_EQ(el.num_edges(), 2 * 2 * 49);
  for (int64_t h = 0; h < 2; ++h) {
    std::set<int64_t> in, out;
    for (const auto& [s, d] : pairs(el)) {
      ASSERT_NE(s, d);
      if (d == h) in.insert(s);
      if (s == h) out.insert(d);
    }
    EXPECT_EQ(in.size(), 49u);
    EXPECT_EQ(in, out);
  }
  EXPECT_EQ(generate_planted_hubs(300, 3, 2, 100, 1).edge_index, generate_planted_hubs(300, 3, 2, 100, 1).edge_index);
  EXPECT_NE(generate_planted_hubs(300, 3, 2, 100, 1).edge_index, generate_planted_hubs(300, 3, 2, 100, 2).edge_index);
}

TEST(PlantedHubs, InvalidArgumentsAreRejected) {
  const auto bad = [](int64_t n, int32_t avg, int32_t hubs, int64_t hub_degree, const char* needle) {
    expect_error([&] { generate_planted_hubs(n, avg, hubs, hub_degree, 1); }, DFGNN_STATUS_INVALID_ARGUMENT, needle);
  };
  bad(0, 1, 0, 0, "num_nodes");
  bad(10, -1, 0, 0, "avg_degree");
  bad(10, 1, -1, 0, "num_hubs");
  bad(10, 1, 11, 0, "num_hubs");
  bad(10, 1, 1, -1, "hub_degree");
  bad(10, 1, 1, 10, "hub_degree");
  bad(1, 1, 0, 0, "avg_degree");  // no source other than the node itself
  bad(int64_t{1} << 30, 4, 0, 0, "exceeds");
  bad(int64_t{1} << 40, 1 << 30, 0, 0, "exceeds");
  auto ctx = test::make_context();
  dfgnn_graph_t g = nullptr;
  EXPECT_EQ(dfgnnGraphCreatePlantedHubs(ctx.get(), 10, 1, 1, 10, 1, nullptr, &g), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dfgnnGetLastErrorMessage()).find("hub_degree"), std::string::npos);
}

// ---------------------------------------------------------------- refusals from files and generators

using test::expect_refusal;
using test::api_call;

// What a load left, as the C API reported it.
test::ApiCall outcome_of(const LoadResult& r) { return {r.status, r.message}; }

// A symmetric count whose mirrored total passes int64 is refused from the size line, not read.
TEST(GraphIo, MatrixMarketHugeSymmetricEntryCountIsRefusedFromTheSizeLine) {
  TempDir dir;
  const std::string file = dir.write("g.mtx", "%%MatrixMarket matrix coordinate pattern symmetric\n3 3 4611686018427387904\n1 2\n");
  expect_refusal(outcome_of(load(file)), DFGNN_STATUS_INDEX_OVERFLOW, ":2: 3 nodes / 4611686018427387904 edges exceed");
}

// Size lines and headers beyond the limits, in Matrix Market (general: the count itself; symmetric:
// twice the count, each entry being mirrored) and edge lists.
TEST(GraphIo, GraphFileSizesBeyondTheLimitsAreRefusedFromTheSizeLine) {
  struct Case {
    const char *name, *contents;
    dfgnn_status_t status;
    const char* phrase;
  };
  const Case cases[] = {
      {"g.mtx", "%%MatrixMarket matrix coordinate pattern general\n3 3 2147483648\n1 2\n", DFGNN_STATUS_INDEX_OVERFLOW,
       "3 nodes / 2147483648 edges exceed"},
      {"s.mtx", "%%MatrixMarket matrix coordinate pattern symmetric\n3 3 1073741824\n1 2\n", DFGNN_STATUS_INDEX_OVERFLOW,
       "3 nodes / 2147483648 edges exceed"},
      {"n.mtx", "%%MatrixMarket matrix coordinate pattern general\n2147483647 2147483647 1\n1 2\n",
       DFGNN_STATUS_INDEX_OVERFLOW, "2147483647 nodes / 1 edges exceed"},
      {"e.txt", "# nodes 3 edges 2147483648\n0 1\n", DFGNN_STATUS_INDEX_OVERFLOW, ":1: 3 nodes / 2147483648 edges exceed"},
      {"n.txt", "# nodes -3 edges 1\n0 1\n", DFGNN_STATUS_PARSE_ERROR, "non-negative N and E"},
      {"o.txt", "# nodes 99999999999999999999 edges 1\n0 1\n", DFGNN_STATUS_PARSE_ERROR,  // beyond int64
       "expected a '# nodes N edges E' header"},
  };
  TempDir dir;  // the cases' files have distinct names
  for (const Case& c : cases) {
    SCOPED_TRACE(c.contents);
    expect_refusal(outcome_of(load(dir.write(c.name, c.contents))), c.status, c.phrase);
  }
}

TEST(GraphIo, GraphFileNullPathAndDirectoryWithoutEdges) {
  auto ctx = test::make_context();
  dfgnn_graph_t g = nullptr;
  expect_refusal(api_call(dfgnnGraphCreateFromFile(ctx.get(), nullptr, nullptr, &g)), DFGNN_STATUS_INVALID_ARGUMENT,
                 "path is null");
  TempDir dir;
  dir.write("other.txt", "");
  expect_refusal(outcome_of(load(dir.path.string())), DFGNN_STATUS_IO_ERROR, "has neither edges.txt nor edges.txt.gz");
  expect_refusal(outcome_of(load("")), DFGNN_STATUS_IO_ERROR, "cannot open ''");
}

// num_nodes beyond the limit is refused before the hubs' num_nodes-bit bitmap is allocated.
TEST(PlantedHubs, TooManyNodesAreRefusedBeforeAllocating) {
  auto ctx = test::make_context();
  dfgnn_graph_t g = nullptr;
  expect_refusal(api_call(dfgnnGraphCreatePlantedHubs(ctx.get(), int64_t{1} << 62, 0, 1, 0, 1, nullptr, &g)),
                 DFGNN_STATUS_INDEX_OVERFLOW, "num_nodes = 4611686018427387904 exceeds dfgnn's limit of 2147483646 nodes");
  EXPECT_EQ(g, nullptr);
  expect_refusal(api_call(dfgnnGraphCreatePlantedHubs(ctx.get(), int64_t{1} << 31, 0, 0, 0, 1, nullptr, &g)),
                 DFGNN_STATUS_INDEX_OVERFLOW, "num_nodes = 2147483648 exceeds dfgnn's limit");
}

TEST(Rmat, RefusalsNameTheParameter) {
  auto ctx = test::make_context();
  dfgnn_graph_t g = nullptr;
  const auto rmat = [&](int32_t scale, int64_t edges, double a, double b, double c, uint32_t flags) {
    return api_call(dfgnnGraphCreateRmat(ctx.get(), scale, edges, a, b, c, flags, 1, nullptr, &g));
  };
  expect_refusal(rmat(31, 1, 0.5, 0.2, 0.2, 0), DFGNN_STATUS_INVALID_ARGUMENT, "scale must be in [1, 30], got 31");
  expect_refusal(rmat(4, int64_t{1} << 31, 0.5, 0.2, 0.2, 0), DFGNN_STATUS_INVALID_ARGUMENT, "num_edges must be in");
  expect_refusal(rmat(4, 8, std::numeric_limits<double>::quiet_NaN(), 0.2, 0.2, 0), DFGNN_STATUS_INVALID_ARGUMENT,
                 "a must be a finite probability");
  expect_refusal(rmat(4, 8, 0.5, 0.4, 0.4, 0), DFGNN_STATUS_INVALID_ARGUMENT, "a + b + c must be <= 1");
  expect_refusal(rmat(4, 8, 0.5, 0.2, 0.2, 16), DFGNN_STATUS_INVALID_ARGUMENT, "flags has unknown bits 0x10");
  EXPECT_EQ(g, nullptr);
}

}  // namespace
}  // namespace dfgnn
