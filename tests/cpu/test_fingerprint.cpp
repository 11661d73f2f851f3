// Degree fingerprint through the C API: hand-worked statistics, edge cases, the JSON form, the
// distance's metric properties and the bucket key.
#include "test_util.hpp"

#include "fingerprint.hpp"  // stored_fingerprint

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

using dfgnn::test::GraphPtr;

// Graph whose node i has in-degree degrees[i] (sources i+1, i+2, ... mod N; duplicates are kept).
GraphPtr graph_with_degrees(dfgnn_context_t ctx, const std::vector<int64_t>& degrees) {
  const auto n = static_cast<int64_t>(degrees.size());
  std::vector<int64_t> src, dst;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < degrees[i]; ++k) {
      src.push_back((i + 1 + k) % n);
      dst.push_back(i);
    }
  return dfgnn::test::graph_from_edges(ctx, n, src, dst);
}

dfgnn_fingerprint_t fingerprint_of(dfgnn_graph_t g) {
  dfgnn_fingerprint_t fp{};
  EXPECT_EQ(dfgnnGraphGetFingerprint(g, &fp), DFGNN_STATUS_SUCCESS) << dfgnnGetLastErrorMessage();
  return fp;
}

std::string serialize(const dfgnn_fingerprint_t& fp) {
  size_t length = 0;
  EXPECT_EQ(dfgnnFingerprintSerialize(&fp, nullptr, 0, &length), DFGNN_STATUS_SUCCESS);
  std::string text(length + 1, '\0');
  EXPECT_EQ(dfgnnFingerprintSerialize(&fp, text.data(), text.size(), &length), DFGNN_STATUS_SUCCESS);
  text.resize(length);
  return text;
}

std::string bucket_key(const dfgnn_fingerprint_t& fp) {
  char buffer[128];
  size_t length = 0;
  EXPECT_EQ(dfgnnFingerprintBucketKey(&fp, buffer, sizeof buffer, &length), DFGNN_STATUS_SUCCESS);
  return std::string(buffer, length);
}

double distance(const dfgnn_fingerprint_t& a, const dfgnn_fingerprint_t& b) {
  double d = -1.0;
  EXPECT_EQ(dfgnnFingerprintDistance(&a, &b, &d), DFGNN_STATUS_SUCCESS) << dfgnnGetLastErrorMessage();
  return d;
}

// Field-wise, doubles bit for bit (the struct has padding, so no memcmp of the whole).
void expect_identical(const dfgnn_fingerprint_t& a, const dfgnn_fingerprint_t& b) {
  const auto bits = [](double x) { return std::bit_cast<uint64_t>(x); };
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.num_nodes, b.num_nodes);
  EXPECT_EQ(a.num_edges, b.num_edges);
  EXPECT_EQ(bits(a.mean_degree), bits(b.mean_degree));
  EXPECT_EQ(a.max_degree, b.max_degree);
  EXPECT_EQ(bits(a.p50), bits(b.p50));
  EXPECT_EQ(bits(a.p90), bits(b.p90));
  EXPECT_EQ(bits(a.p99), bits(b.p99));
  EXPECT_EQ(bits(a.p999), bits(b.p999));
  EXPECT_EQ(bits(a.cv), bits(b.cv));
  EXPECT_EQ(bits(a.gini), bits(b.gini));
  for (int i = 0; i < DFGNN_FINGERPRINT_HIST_BINS; ++i) EXPECT_EQ(bits(a.hist[i]), bits(b.hist[i])) << "hist " << i;
  EXPECT_EQ(bits(a.top1pct_edge_share), bits(b.top1pct_edge_share));
  for (int k = 0; k < DFGNN_FINGERPRINT_HUB_THRESHOLDS; ++k) EXPECT_EQ(a.hub_rows[k], b.hub_rows[k]) << "hub " << k;
}

void expect_hist(const dfgnn_fingerprint_t& fp, const std::vector<double>& leading) {
  for (int b = 0; b < DFGNN_FINGERPRINT_HIST_BINS; ++b)
    EXPECT_DOUBLE_EQ(fp.hist[b], b < static_cast<int>(leading.size()) ? leading[b] : 0.0) << "bin " << b;
}

void expect_hubs(const dfgnn_fingerprint_t& fp, const std::vector<int64_t>& hubs) {
  for (int k = 0; k < DFGNN_FINGERPRINT_HUB_THRESHOLDS; ++k) EXPECT_EQ(fp.hub_rows[k], hubs[k]) << "threshold " << k;
}

class Fingerprint : public ::testing::Test {
 protected:
  dfgnn::test::ContextPtr ctx = dfgnn::test::make_context();
};

TEST_F(Fingerprint, HandWorkedSmallGraph) {
  // In-degrees {0,1,1,2,4,8} in shuffled node order: N = 6, E = 16.
  auto g = graph_with_degrees(ctx.get(), {4, 0, 8, 1, 2, 1});
  const auto fp = fingerprint_of(g.get());
  EXPECT_EQ(fp.version, DFGNN_FINGERPRINT_VERSION);
  EXPECT_EQ(fp.num_nodes, 6);
  EXPECT_EQ(fp.num_edges, 16);
  EXPECT_DOUBLE_EQ(fp.mean_degree, 16.0 / 6.0);
  EXPECT_EQ(fp.max_degree, 8);
  // Sorted 0,1,1,2,4,8; rank ceil(q*6): p50 -> 3rd = 1, p90 -> ceil(5.4) = 6th = 8, p99, p999 -> 6th.
  EXPECT_EQ(fp.p50, 1.0);
  EXPECT_EQ(fp.p90, 8.0);
  EXPECT_EQ(fp.p99, 8.0);
  EXPECT_EQ(fp.p999, 8.0);
  // Deviations from 8/3: -8/3,-5/3,-5/3,-2/3,4/3,16/3; squares sum 390/9; var 65/9; cv = (sqrt65/3)/(8/3).
  EXPECT_DOUBLE_EQ(fp.cv, std::sqrt(65.0) / 8.0);
  // Gini = sum_i (2i-N-1) x_i / (N E) = (-5*0 -3*1 -1*1 +1*2 +3*4 +5*8) / 96 = 50/96.
  EXPECT_DOUBLE_EQ(fp.gini, 50.0 / 96.0);
  // Bins: 0 -> 0, 1 -> [1,2), 2 -> [2,4), 4 -> [4,8), 8 -> [8,16).
  expect_hist(fp, {1.0 / 6, 2.0 / 6, 1.0 / 6, 1.0 / 6, 1.0 / 6});
  EXPECT_EQ(fp.top1pct_edge_share, 0.5);  // ceil(0.06) = 1 row: 8 of 16 edges
  expect_hubs(fp, std::vector<int64_t>(10, 0));
}

TEST_F(Fingerprint, NearestRankQuantiles) {
  std::vector<int64_t> degrees(1000);
  for (int64_t i = 0; i < 1000; ++i) degrees[i] = 999 - i;  // degrees 0..999, reversed
  const auto fp = fingerprint_of(graph_with_degrees(ctx.get(), degrees).get());
  // The k-th smallest degree is k-1; ranks 500, 900, 990, 999.
  EXPECT_EQ(fp.p50, 499.0);
  EXPECT_EQ(fp.p90, 899.0);
  EXPECT_EQ(fp.p99, 989.0);
  EXPECT_EQ(fp.p999, 998.0);
  EXPECT_EQ(fp.max_degree, 999);
  // Top ceil(10) rows: 990..999 = 9945 of 499500 edges. Hubs: degree >= 64 * 2^k.
  EXPECT_DOUBLE_EQ(fp.top1pct_edge_share, 9945.0 / 499500.0);
  expect_hubs(fp, {936, 872, 744, 488, 0, 0, 0, 0, 0, 0});
}

TEST_F(Fingerprint, StarWithHub) {
  // Node 0 receives from 1..100000; every other row is empty.
  const int64_t n = 100001;
  std::vector<int64_t> src(n - 1), dst(n - 1, 0);
  for (int64_t j = 1; j < n; ++j) src[j - 1] = j;
  const auto fp = fingerprint_of(dfgnn::test::graph_from_edges(ctx.get(), n, src, dst).get());
  EXPECT_EQ(fp.num_nodes, n);
  EXPECT_EQ(fp.num_edges, n - 1);
  EXPECT_EQ(fp.max_degree, 100000);
  EXPECT_EQ(fp.p50, 0.0);
  EXPECT_EQ(fp.p999, 0.0);  // rank ceil(99900.999) = 99901 of 100001 is still a zero row
  // One non-zero x among N: mean x/N, var x^2 (N-1)/N^2, so cv = sqrt(N-1); Gini = (N-1)/N.
  EXPECT_NEAR(fp.cv, std::sqrt(100000.0), 1e-9 * std::sqrt(100000.0));
  EXPECT_DOUBLE_EQ(fp.gini, 100000.0 / 100001.0);
  EXPECT_EQ(fp.top1pct_edge_share, 1.0);  // the hub is among the top 1001 rows
  expect_hubs(fp, std::vector<int64_t>(10, 1));  // 100000 >= 32768
  std::vector<double> hist(18, 0.0);
  hist[0] = 100000.0 / 100001.0;
  hist[17] = 1.0 / 100001.0;  // 2^16 <= 100000 < 2^17
  expect_hist(fp, hist);
}

TEST_F(Fingerprint, FewRowsWithLargeDegrees) {
  // max degree > N (the comparison-sort path): degrees {70, 0, 7}, E = 77.
  const auto fp = fingerprint_of(graph_with_degrees(ctx.get(), {70, 0, 7}).get());
  EXPECT_EQ(fp.p50, 7.0);
  EXPECT_EQ(fp.p90, 70.0);
  EXPECT_DOUBLE_EQ(fp.gini, (-2 * 0 + 0 * 7 + 2 * 70) / (3.0 * 77.0));
  expect_hist(fp, {1.0 / 3, 0, 0, 1.0 / 3, 0, 0, 0, 1.0 / 3});
  expect_hubs(fp, {1, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_DOUBLE_EQ(fp.top1pct_edge_share, 70.0 / 77.0);
}

TEST_F(Fingerprint, LastBinAbsorbsHugeDegrees) {
  // Row 0 holds 2^22 + 5 edges (bin 23 = [2^22, inf)), row 1 none. Built as CSR to stay fast.
  const int32_t nnz = (1 << 22) + 5;
  const std::vector<int32_t> ptr{0, nnz, nnz};
  const std::vector<int32_t> col(nnz, 1);
  dfgnn_graph_t raw = nullptr;
  DFGNN_ASSERT_OK(dfgnnGraphCreateCsr(ctx.get(), 2, nnz, ptr.data(), col.data(), DFGNN_INDEX_INT32,
                                      DFGNN_MEMORY_HOST, nullptr, &raw));
  const auto fp = fingerprint_of(GraphPtr(raw).get());
  EXPECT_EQ(fp.hist[0], 0.5);
  EXPECT_EQ(fp.hist[DFGNN_FINGERPRINT_HIST_BINS - 1], 0.5);
  expect_hubs(fp, std::vector<int64_t>(10, 1));
}

TEST_F(Fingerprint, RegularGraph) {
  const auto fp = fingerprint_of(graph_with_degrees(ctx.get(), std::vector<int64_t>(200, 5)).get());
  EXPECT_EQ(fp.mean_degree, 5.0);
  EXPECT_EQ(fp.cv, 0.0);
  EXPECT_EQ(fp.gini, 0.0);
  for (double q : {fp.p50, fp.p90, fp.p99, fp.p999}) EXPECT_EQ(q, 5.0);
  expect_hist(fp, {0, 0, 0, 1.0});               // 5 in [4, 8)
  EXPECT_DOUBLE_EQ(fp.top1pct_edge_share, 0.01);  // 2 rows of 200
}

TEST_F(Fingerprint, EmptyEdgelessAndSingleNodeGraphs) {
  const auto empty = fingerprint_of(dfgnn::test::graph_from_edges(ctx.get(), 0, {}, {}).get());
  const auto edgeless = fingerprint_of(dfgnn::test::graph_from_edges(ctx.get(), 10, {}, {}).get());
  const auto single = fingerprint_of(graph_with_degrees(ctx.get(), {3}).get());  // three self-loops
  for (const auto* fp : {&empty, &edgeless}) {
    EXPECT_EQ(fp->num_edges, 0);
    EXPECT_EQ(fp->max_degree, 0);
    for (double x : {fp->mean_degree, fp->p50, fp->p90, fp->p99, fp->p999, fp->cv, fp->gini, fp->top1pct_edge_share})
      EXPECT_EQ(x, 0.0);
    expect_hubs(*fp, std::vector<int64_t>(10, 0));
  }
  EXPECT_EQ(empty.num_nodes, 0);
  expect_hist(empty, {});
  EXPECT_EQ(edgeless.num_nodes, 10);
  expect_hist(edgeless, {1.0});
  EXPECT_EQ(single.mean_degree, 3.0);
  EXPECT_EQ(single.p50, 3.0);
  EXPECT_EQ(single.cv, 0.0);
  EXPECT_EQ(single.gini, 0.0);
  EXPECT_EQ(single.top1pct_edge_share, 1.0);
  expect_hist(single, {0, 0, 1.0});
}

TEST_F(Fingerprint, CachedOnHandle) {
  auto g = dfgnn::test::random_graph(ctx.get(), 500, 12, 7);
  expect_identical(fingerprint_of(g.get()), fingerprint_of(g.get()));
  EXPECT_EQ(dfgnnGraphGetFingerprint(g.get(), nullptr), DFGNN_STATUS_INVALID_ARGUMENT);
}

// Degrees {0,1,1,2}: mean 1, cv = sqrt(1/2), Gini 6/16, top row 2 of 4 edges.
constexpr const char* kGolden =
    R"({"version":1,"num_nodes":4,"num_edges":4,"mean_degree":1.0,"max_degree":2,)"
    R"("p50":1.0,"p90":2.0,"p99":2.0,"p999":2.0,"cv":0.7071067811865476,"gini":0.375,)"
    R"("hist":[0.25,0.5,0.25,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0],)"
    R"("top1pct_edge_share":0.5,"hub_rows":[0,0,0,0,0,0,0,0,0,0]})";

TEST_F(Fingerprint, SerializeGolden) {
  const auto fp = fingerprint_of(graph_with_degrees(ctx.get(), {1, 0, 2, 1}).get());
  EXPECT_EQ(serialize(fp), kGolden);
  dfgnn_fingerprint_t parsed{};
  DFGNN_ASSERT_OK(dfgnnFingerprintParse(kGolden, &parsed));
  expect_identical(parsed, fp);
}

TEST_F(Fingerprint, RoundTripIsExact) {
  std::vector<dfgnn_fingerprint_t> fps;
  for (uint64_t seed = 1; seed <= 4; ++seed)
    fps.push_back(fingerprint_of(dfgnn::test::random_graph(ctx.get(), 997 * seed, 37, seed).get()));
  // Doubles that need all 17 digits, extremes and subnormals.
  dfgnn_fingerprint_t odd{};
  odd.version = DFGNN_FINGERPRINT_VERSION;
  odd.num_nodes = INT64_MAX;
  odd.mean_degree = 0.1;
  odd.p50 = 1.0 / 3.0;
  odd.p90 = DBL_MAX;
  odd.p99 = DBL_MIN;
  odd.p999 = 4.9406564584124654e-324;
  odd.cv = std::nextafter(1.0, 2.0);
  odd.gini = 2.0 / 3.0;
  for (int b = 0; b < DFGNN_FINGERPRINT_HIST_BINS; ++b) odd.hist[b] = 1.0 / (b + 7);
  odd.top1pct_edge_share = 0.30000000000000004;
  fps.push_back(odd);
  for (const auto& fp : fps) {
    const std::string text = serialize(fp);
    dfgnn_fingerprint_t parsed{};
    DFGNN_ASSERT_OK(dfgnnFingerprintParse(text.c_str(), &parsed));
    expect_identical(parsed, fp);
    EXPECT_EQ(serialize(parsed), text);
  }
}

TEST_F(Fingerprint, StoredTextIsParsedOnceAndJudgedCanonical) {
  const auto fp = fingerprint_of(graph_with_degrees(ctx.get(), {1, 0, 2, 1}).get());
  for (int round = 0; round < 2; ++round) {  // the second answer comes from the memo
    const dfgnn::StoredFingerprint s = dfgnn::stored_fingerprint(kGolden);
    expect_identical(s.fp, fp);
    EXPECT_TRUE(s.canonical);
    EXPECT_EQ(s.bucket_key, dfgnn::fingerprint_bucket_key(fp));
  }
  // The same fingerprint in another spelling parses, but is not the canonical text.
  std::string spaced = kGolden;
  spaced.insert(1, " ");
  const dfgnn::StoredFingerprint s = dfgnn::stored_fingerprint(spaced);
  expect_identical(s.fp, fp);
  EXPECT_FALSE(s.canonical);
  // A text that fails throws every time (failures are not remembered as answers).
  for (int round = 0; round < 2; ++round) EXPECT_THROW(dfgnn::stored_fingerprint("{\"version\":1}"), std::exception);
}

TEST_F(Fingerprint, SerializeBufferProtocol) {
  const auto fp = fingerprint_of(graph_with_degrees(ctx.get(), {1, 0, 2, 1}).get());
  const std::string golden = kGolden;
  size_t length = 0;
  DFGNN_ASSERT_OK(dfgnnFingerprintSerialize(&fp, nullptr, 0, &length));
  EXPECT_EQ(length, golden.size());
  char small[11];
  std::memset(small, 'x', sizeof small);
  length = 0;
  DFGNN_ASSERT_OK(dfgnnFingerprintSerialize(&fp, small, sizeof small, &length));
  EXPECT_EQ(length, golden.size());
  EXPECT_EQ(std::string(small), golden.substr(0, 10));  // truncated, terminated
  std::string key(5, 'x');
  DFGNN_ASSERT_OK(dfgnnFingerprintBucketKey(&fp, nullptr, 0, &length));
  EXPECT_EQ(length, std::string("n2^2.e2^2.max2^1.cv0").size());
  DFGNN_ASSERT_OK(dfgnnFingerprintBucketKey(&fp, key.data(), key.size(), &length));
  EXPECT_STREQ(key.c_str(), "n2^2");
  EXPECT_EQ(dfgnnFingerprintSerialize(nullptr, nullptr, 0, &length), DFGNN_STATUS_INVALID_ARGUMENT);
}

TEST_F(Fingerprint, ParseErrors) {
  const std::string golden = kGolden;
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = golden;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  const struct {
    std::string text, names;  // names: what the message must mention
  } cases[] = {
      {"not json", "JSON"},
      {"", "JSON"},
      {golden + "x", "JSON"},
      {"[1, 2]", "object"},
      {replaced(R"("gini":0.375,)", ""), "gini"},
      {replaced(R"("version":1)", R"("version":2)"), "version"},
      {replaced(R"("version":1)", R"("version":"1")"), "version"},
      {replaced(R"("version":1,)", ""), "version"},
      {replaced(R"("hist":[)", R"("hist":[0.0,)"), "hist"},
      {replaced(R"("hist":[0.25,)", R"("hist":[)"), "hist"},
      {replaced(R"("hist":[0.25,)", R"("hist":[null,)"), "hist[0]"},
      {replaced(R"("hub_rows":[0,)", R"("hub_rows":[)"), "hub_rows"},
      {replaced(R"("hub_rows":[0,)", R"("hub_rows":[0.5,)"), "hub_rows[0]"},
      {replaced(R"("num_nodes":4)", R"("num_nodes":"4")"), "num_nodes"},
      {replaced(R"("num_nodes":4)", R"("num_nodes":4.5)"), "num_nodes"},
      {replaced(R"("num_edges":4)", R"("num_edges":-4)"), "num_edges"},
      {replaced(R"("cv":0.7071067811865476)", R"("cv":true)"), "cv"},
      {replaced(R"({"version")", R"({"extra":1,"version")"), "extra"},
  };
  for (const auto& c : cases) {
    dfgnn_fingerprint_t fp{};
    EXPECT_EQ(dfgnnFingerprintParse(c.text.c_str(), &fp), DFGNN_STATUS_PARSE_ERROR) << c.text;
    EXPECT_NE(std::string(dfgnnGetLastErrorMessage()).find(c.names), std::string::npos)
        << c.text << " -> " << dfgnnGetLastErrorMessage();
  }
  dfgnn_fingerprint_t fp{};
  EXPECT_EQ(dfgnnFingerprintParse(nullptr, &fp), DFGNN_STATUS_INVALID_ARGUMENT);
}

// A family of differently shaped graphs of N = 3000 (E about 12000 where edges exist).
struct Family {
  dfgnn_fingerprint_t uniform_a, uniform_b, hubs, star, regular, empty, edgeless;
};

Family make_family(dfgnn_context_t ctx) {
  std::vector<int64_t> hub_degrees(3000, 0), star_degrees(3000, 0);
  for (int i = 0; i < 10; ++i) hub_degrees[i * 300] = 1200;  // 10 hubs hold all 12000 edges
  star_degrees[0] = 2999;
  return {fingerprint_of(dfgnn::test::random_graph(ctx, 3000, 8, 1).get()),
          fingerprint_of(dfgnn::test::random_graph(ctx, 3000, 8, 2).get()),
          fingerprint_of(graph_with_degrees(ctx, hub_degrees).get()),
          fingerprint_of(graph_with_degrees(ctx, star_degrees).get()),
          fingerprint_of(graph_with_degrees(ctx, std::vector<int64_t>(3000, 4)).get()),
          fingerprint_of(dfgnn::test::graph_from_edges(ctx, 0, {}, {}).get()),
          fingerprint_of(dfgnn::test::graph_from_edges(ctx, 3000, {}, {}).get())};
}

TEST_F(Fingerprint, DistanceIsAMetric) {
  const Family f = make_family(ctx.get());
  const std::vector<dfgnn_fingerprint_t> all{f.uniform_a, f.uniform_b, f.hubs, f.star, f.regular, f.empty, f.edgeless};
  for (const auto& a : all) {
    EXPECT_EQ(distance(a, a), 0.0);
    for (const auto& b : all) {
      const double ab = distance(a, b);
      EXPECT_TRUE(std::isfinite(ab));
      EXPECT_GE(ab, 0.0);
      EXPECT_EQ(ab, distance(b, a));
      for (const auto& c : all) EXPECT_LE(distance(a, c), ab + distance(b, c) + 1e-12);
    }
  }
  double d = 0;
  EXPECT_EQ(dfgnnFingerprintDistance(&f.empty, nullptr, &d), DFGNN_STATUS_INVALID_ARGUMENT);
}

TEST_F(Fingerprint, DistanceSeparatesShapes) {
  const Family f = make_family(ctx.get());
  const double same = distance(f.uniform_a, f.uniform_b);
  EXPECT_GT(same, 0.0);
  EXPECT_LT(same, 0.1);  // only sampling noise in the histogram and sizes
  EXPECT_LT(same, distance(f.uniform_a, f.hubs) / 10);
  EXPECT_LT(same, distance(f.uniform_a, f.star) / 10);
  EXPECT_LT(distance(f.uniform_a, f.regular), distance(f.uniform_a, f.hubs));
}

TEST_F(Fingerprint, BucketKey) {
  const Family f = make_family(ctx.get());
  // N 3000 in [2^11, 2^12), E about 12000 in [2^13, 2^14), max 8, cv about 0.65.
  EXPECT_EQ(bucket_key(f.uniform_a), "n2^11.e2^13.max2^3.cv0");
  EXPECT_EQ(bucket_key(f.uniform_b), bucket_key(f.uniform_a));
  EXPECT_EQ(bucket_key(f.hubs), "n2^11.e2^13.max2^10.cv9");  // cv = sqrt(299), capped at 9
  EXPECT_EQ(bucket_key(f.empty), "n0.e0.max0.cv0");
  EXPECT_EQ(bucket_key(f.edgeless), "n2^11.e0.max0.cv0");
  EXPECT_EQ(bucket_key(fingerprint_of(graph_with_degrees(ctx.get(), {4, 0, 8, 1, 2, 1}).get())), "n2^2.e2^4.max2^3.cv1");
}

TEST_F(Fingerprint, Cora) {
  dfgnn_graph_t raw = nullptr;
  const std::string path = (dfgnn::test::source_dir() / "data/cora").string();
  const dfgnn_status_t s = dfgnnGraphCreateFromFile(ctx.get(), path.c_str(), nullptr, &raw);
  if (s == DFGNN_STATUS_NOT_SUPPORTED) GTEST_SKIP() << "graph file reader not available: " << dfgnnGetLastErrorMessage();
  DFGNN_ASSERT_OK(s);
  const auto fp = fingerprint_of(GraphPtr(raw).get());
  EXPECT_EQ(fp.num_nodes, 2708);
  EXPECT_EQ(fp.num_edges, 10556);
  EXPECT_EQ(fp.max_degree, 168);
  EXPECT_DOUBLE_EQ(fp.mean_degree, 10556.0 / 2708.0);
  EXPECT_EQ(fp.hist[0], 0.0);  // no isolated nodes
  expect_hubs(fp, {4, 1, 0, 0, 0, 0, 0, 0, 0, 0});  // 4 rows >= 64, one >= 128
  EXPECT_NEAR(fp.cv, 1.3411265776, 1e-9);         // citation graph: heavy tail
  EXPECT_EQ(bucket_key(fp), "n2^11.e2^13.max2^7.cv1");
}

}  // namespace

// ---------------------------------------------------------------- fingerprint text
namespace dfgnn {
namespace {

using test::expect_refusal;
using test::api_call;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
using test::make_context;

TEST(FingerprintText, Refusals) {
  dfgnn_fingerprint_t fp{};
  expect_refusal(api_call(dfgnnFingerprintParse(nullptr, &fp)), DFGNN_STATUS_INVALID_ARGUMENT, "text is null");
  expect_refusal(api_call(dfgnnFingerprintParse("{\"version\": 2}", &fp)), DFGNN_STATUS_PARSE_ERROR,
                 "unsupported \"version\" 2");
  expect_refusal(api_call(dfgnnFingerprintParse("[1]", &fp)), DFGNN_STATUS_PARSE_ERROR, "expected a JSON object");
  expect_refusal(api_call(dfgnnFingerprintParse("{\"version\": 1", &fp)), DFGNN_STATUS_PARSE_ERROR, "not valid JSON");
  // Deep nesting is a parse result, not a crash.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_refusal(api_call(dfgnnFingerprintParse(deep.c_str(), &fp)), DFGNN_STATUS_PARSE_ERROR, "expected a JSON object");
  // A fingerprint with a field out of its range is refused before it is written.
  auto ctx = test::make_context();
  auto g = test::graph_from_edges(ctx.get(), 3, {0, 1, 2}, {1, 2, 0});
  DFGNN_ASSERT_OK(dfgnnGraphGetFingerprint(g.get(), &fp));
  fp.num_edges = -5;
  size_t length = 0;
  expect_refusal(api_call(dfgnnFingerprintSerialize(&fp, nullptr, 0, &length)), DFGNN_STATUS_INVALID_ARGUMENT,
                 "\"num_edges\" must be >= 0 (got -5)");
  // An unknown key, as a typo would make it.
  DFGNN_ASSERT_OK(dfgnnGraphGetFingerprint(g.get(), &fp));
  std::string text(512, '\0');
  DFGNN_ASSERT_OK(dfgnnFingerprintSerialize(&fp, text.data(), text.size(), &length));
  text.resize(length);
  text.insert(1, "\"num_nodez\":1,");
  expect_refusal(api_call(dfgnnFingerprintParse(text.c_str(), &fp)), DFGNN_STATUS_PARSE_ERROR,
                 "unknown key \"num_nodez\"");
}

TEST(FingerprintText, OneThatWouldNotReadBackIsNotSerialised) {
  auto ctx = make_context();
  auto g = test::graph_from_edges(ctx.get(), 4, {0, 1, 2, 3}, {1, 2, 3, 0});
  dfgnn_fingerprint_t good{};
  DFGNN_ASSERT_OK(dfgnnGraphGetFingerprint(g.get(), &good));
  size_t length = 0;
  DFGNN_ASSERT_OK(dfgnnFingerprintSerialize(&good, nullptr, 0, &length));

  struct Case {
    const char* needle;
    void (*spoil)(dfgnn_fingerprint_t&);
  };
  const Case cases[] = {
      {"\"num_nodes\" must be >= 0", [](dfgnn_fingerprint_t& f) { f.num_nodes = -5; }},
      {"\"cv\" must be finite", [](dfgnn_fingerprint_t& f) { f.cv = std::numeric_limits<double>::quiet_NaN(); }},
      {"\"hist[3]\" must be finite", [](dfgnn_fingerprint_t& f) { f.hist[3] = std::numeric_limits<double>::infinity(); }},
      {"\"hub_rows[0]\" must be >= 0", [](dfgnn_fingerprint_t& f) { f.hub_rows[0] = -1; }},
      {"\"version\" 99", [](dfgnn_fingerprint_t& f) { f.version = 99; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.needle);
    dfgnn_fingerprint_t fp = good;
    c.spoil(fp);
    EXPECT_EQ(dfgnnFingerprintSerialize(&fp, nullptr, 0, &length), DFGNN_STATUS_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(dfgnnGetLastErrorMessage(), c.needle)) << dfgnnGetLastErrorMessage();
  }
}

}  // namespace
}  // namespace dfgnn
