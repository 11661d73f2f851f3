// Degree fingerprint: summary statistics of the in-degree distribution, its JSON form, a distance
// for nearest-neighbour reuse of tuning results and a coarse bucket key.
#include "fingerprint.hpp"

#include "error.hpp"
#include "graph.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <span>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace dfgnn {
namespace {

using Json = nlohmann::ordered_json;
constexpr int kBins = DFGNN_FINGERPRINT_HIST_BINS;
constexpr int kHubs = DFGNN_FINGERPRINT_HUB_THRESHOLDS;

// log2(1 + x) with negatives clamped, so invalid input still gives a finite distance.
double log_size(double x) { return std::log2(1.0 + std::max(x, 0.0)); }

}  // namespace

std::vector<DegreeRun> degree_runs(const Compressed& c) {
  // Counting by degree when the count array is no larger than the rows; otherwise (few rows, huge
  // rows) a sort of the degrees is cheaper in memory.
  const int32_t n = c.num_rows;
  int32_t max_degree = 0;
  for (int32_t i = 0; i < n; ++i) max_degree = std::max(max_degree, c.degree(i));
  std::vector<DegreeRun> runs;
  if (max_degree <= n) {
    std::vector<int64_t> count(static_cast<size_t>(max_degree) + 1, 0);
    for (int32_t i = 0; i < n; ++i) ++count[c.degree(i)];
    for (int32_t d = 0; d <= max_degree; ++d)
      if (count[d] > 0) runs.push_back({d, count[d]});
    return runs;
  }
  std::vector<int32_t> deg(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) deg[i] = c.degree(i);
  std::sort(deg.begin(), deg.end());
  for (int32_t d : deg) {
    if (runs.empty() || runs.back().degree != d) runs.push_back({d, 0});
    ++runs.back().count;
  }
  return runs;
}

dfgnn_fingerprint_t compute_fingerprint(const Compressed& csr) {
  const std::vector<DegreeRun> runs = degree_runs(csr);
  return compute_fingerprint(csr.num_rows, csr.nnz(), runs);
}

dfgnn_fingerprint_t compute_fingerprint(int64_t n, int64_t e, std::span<const DegreeRun> runs) {
  dfgnn_fingerprint_t fp{};
  fp.version = DFGNN_FINGERPRINT_VERSION;
  fp.num_nodes = n;
  fp.num_edges = e;
  if (n == 0 || runs.empty()) return fp;  // every statistic of an empty graph is 0

  // Nearest rank: the k-th smallest degree with k = ceil(q * N), q = num / den, in exact integers
  // so that the rank never depends on how q * N rounds.
  const auto quantile = [&](int64_t num, int64_t den) {
    const int64_t rank = std::max<int64_t>(1, (num * n + den - 1) / den);
    int64_t seen = 0;
    for (const DegreeRun& r : runs)
      if ((seen += r.count) >= rank) return static_cast<double>(r.degree);
    return static_cast<double>(runs.back().degree);
  };
  fp.mean_degree = static_cast<double>(e) / static_cast<double>(n);
  fp.max_degree = runs.back().degree;
  fp.p50 = quantile(1, 2);
  fp.p90 = quantile(9, 10);
  fp.p99 = quantile(99, 100);
  fp.p999 = quantile(999, 1000);

  // Exact integers: N^2 var = N sum d^2 - E^2 (N sum d^2 < 2^93), and the Gini numerator
  // sum_i (2i - N - 1) x_i over ascending x (|.| <= N E < 2^62); a run of c rows of degree d at
  // ranks r+1..r+c contributes d c (2r + c - N). Equal degrees give exactly 0 for both.
  __int128 sum_squares = 0, gini_num = 0;
  int64_t rank = 0;
  std::array<int64_t, kBins> bins{};
  for (const DegreeRun& r : runs) {
    const __int128 d = r.degree, c = r.count;
    sum_squares += c * d * d;
    gini_num += d * c * (2 * static_cast<__int128>(rank) + c - n);
    rank += r.count;
    // Bin b >= 1 holds [2^(b-1), 2^b): b = bit_width(d); the last bin takes everything above.
    bins[std::min<size_t>(std::bit_width(static_cast<uint32_t>(r.degree)), kBins - 1)] += r.count;
  }
  if (e > 0) {
    const __int128 var_n2 = static_cast<__int128>(n) * sum_squares - static_cast<__int128>(e) * e;
    fp.cv = std::sqrt(static_cast<double>(var_n2)) / static_cast<double>(e);
    fp.gini = static_cast<double>(gini_num) / (static_cast<double>(n) * static_cast<double>(e));
  }
  for (int b = 0; b < kBins; ++b) fp.hist[b] = static_cast<double>(bins[b]) / static_cast<double>(n);

  int64_t top = (n + 99) / 100, top_edges = 0;  // the edges of the ceil(1% of N) largest rows
  for (auto r = runs.rbegin(); r != runs.rend() && top > 0; ++r) {
    const int64_t take = std::min(top, r->count);
    top_edges += take * r->degree;
    top -= take;
  }
  if (e > 0) fp.top1pct_edge_share = static_cast<double>(top_edges) / static_cast<double>(e);

  for (int k = 0; k < kHubs; ++k) {
    int64_t rows = 0;
    for (const DegreeRun& r : runs)
      if (r.degree >= (int64_t{1} << (k + 6))) rows += r.count;
    fp.hub_rows[k] = rows;
  }
  return fp;
}

namespace {

// The one list of serialised fields, in JSON key order (struct order); serialize and parse both
// walk it, so they cannot drift apart. Fp is dfgnn_fingerprint_t, const or not.
template <typename Fp, typename F>
void visit_fields(Fp& fp, F&& f) {
  f("version", fp.version);
  f("num_nodes", fp.num_nodes);
  f("num_edges", fp.num_edges);
  f("mean_degree", fp.mean_degree);
  f("max_degree", fp.max_degree);
  f("p50", fp.p50);
  f("p90", fp.p90);
  f("p99", fp.p99);
  f("p999", fp.p999);
  f("cv", fp.cv);
  f("gini", fp.gini);
  f("hist", fp.hist);
  f("top1pct_edge_share", fp.top1pct_edge_share);
  f("hub_rows", fp.hub_rows);
}

// Strict readers: the message names the key and what is wrong with it.
const Json& field(const Json& j, const std::string& key) {
  const auto it = j.find(key);
  if (it == j.end()) fail(DFGNN_STATUS_PARSE_ERROR, "fingerprint: missing key \"{}\"", key);
  return *it;
}

void read_value(const Json& v, const std::string& key, int64_t& out) {
  if (!v.is_number_integer() ||
      (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()}))
    fail(DFGNN_STATUS_PARSE_ERROR, "fingerprint: \"{}\" must be an integer (got {})", key, v.dump());
  out = v.get<int64_t>();
  if (out < 0) fail(DFGNN_STATUS_PARSE_ERROR, "fingerprint: \"{}\" must be >= 0 (got {})", key, out);
}

void read_value(const Json& v, const std::string& key, double& out) {
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    fail(DFGNN_STATUS_PARSE_ERROR, "fingerprint: \"{}\" must be a finite number (got {})", key, v.dump());
  out = v.get<double>();
}

void read_value(const Json&, const std::string&, int32_t& version) { version = DFGNN_FINGERPRINT_VERSION; }  // checked first

template <typename T, size_t N>
void read_value(const Json& v, const std::string& key, T (&out)[N]) {
  if (!v.is_array() || v.size() != N)
    fail(DFGNN_STATUS_PARSE_ERROR, "fingerprint: \"{}\" must be an array of {} numbers (got {})", key, N,
         v.is_array() ? fmt::format("{} entries", v.size()) : std::string(v.type_name()));
  for (size_t i = 0; i < N; ++i) read_value(v[i], fmt::format("{}[{}]", key, i), out[i]);
}

// What parse_fingerprint accepts, checked before writing (INVALID_ARGUMENT naming the field), so
// that whatever is serialised reads back.
void check_value(const std::string& key, int64_t v) {
  if (v < 0) fail(DFGNN_STATUS_INVALID_ARGUMENT, "fingerprint: \"{}\" must be >= 0 (got {})", key, v);
}
void check_value(const std::string& key, double v) {
  if (!std::isfinite(v)) fail(DFGNN_STATUS_INVALID_ARGUMENT, "fingerprint: \"{}\" must be finite (got {})", key, v);
}
void check_value(const std::string&, int32_t) {}  // the version, checked first
template <typename T, size_t N>
void check_value(const std::string& key, const T (&values)[N]) {
  for (size_t i = 0; i < N; ++i) check_value(fmt::format("{}[{}]", key, i), values[i]);
}

void validate_fingerprint(const dfgnn_fingerprint_t& fp) {
  if (fp.version != DFGNN_FINGERPRINT_VERSION)
    fail(DFGNN_STATUS_INVALID_ARGUMENT, "fingerprint: \"version\" {} is not {} (this build's)", fp.version,
         DFGNN_FINGERPRINT_VERSION);
  visit_fields(fp, [](const char* key, const auto& value) { check_value(key, value); });
}

}  // namespace

// Compact one-line JSON. nlohmann prints doubles in the shortest form that reads back to the same
// bits, so serialize -> parse is exact.
std::string serialize_fingerprint(const dfgnn_fingerprint_t& fp) {
  validate_fingerprint(fp);
  Json j = Json::object();
  visit_fields(fp, [&](const char* key, const auto& value) {
    if constexpr (std::is_array_v<std::remove_cvref_t<decltype(value)>>)
      j[key] = std::vector(std::begin(value), std::end(value));
    else
      j[key] = value;
  });
  return j.dump();
}

dfgnn_fingerprint_t parse_fingerprint(const std::string& text) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& ex) {
    fail(DFGNN_STATUS_PARSE_ERROR, "fingerprint: not valid JSON: {}", ex.what());
  }
  if (!j.is_object()) fail(DFGNN_STATUS_PARSE_ERROR, "fingerprint: expected a JSON object, got {}", j.type_name());

  // Version first: another version may have other keys, and then that is the message to give.
  const Json& version = field(j, "version");
  if (!version.is_number_integer() || version.get<int64_t>() != DFGNN_FINGERPRINT_VERSION)
    fail(DFGNN_STATUS_PARSE_ERROR, "fingerprint: unsupported \"version\" {} (this build reads {})", version.dump(),
         DFGNN_FINGERPRINT_VERSION);

  dfgnn_fingerprint_t fp{};
  std::vector<std::string_view> known;
  visit_fields(fp, [&](const char* key, auto& value) {
    known.emplace_back(key);
    read_value(field(j, key), key, value);
  });
  for (const auto& item : j.items())  // a typo'd key would otherwise be silently ignored
    if (std::find(known.begin(), known.end(), item.key()) == known.end())
      fail(DFGNN_STATUS_PARSE_ERROR, "fingerprint: unknown key \"{}\"", item.key());
  return fp;
}

StoredFingerprint stored_fingerprint(const std::string& text) {
  static std::mutex mutex;
  static std::unordered_map<std::string, StoredFingerprint> memo;
  constexpr size_t kMaxRemembered = 4096;  // a shipped database holds tens; a large site file is re-read, not hoarded
  {
    std::lock_guard lock(mutex);
    if (auto it = memo.find(text); it != memo.end()) return it->second;
  }
  StoredFingerprint s;
  s.fp = parse_fingerprint(text);
  s.canonical = serialize_fingerprint(s.fp) == text;
  s.bucket_key = fingerprint_bucket_key(s.fp);
  std::lock_guard lock(mutex);
  if (memo.size() >= kMaxRemembered) memo.clear();
  memo.emplace(text, s);
  return s;
}

std::array<double, kDistanceTerms> fingerprint_terms(const dfgnn_fingerprint_t& a, const dfgnn_fingerprint_t& b) {
  const auto dlog = [](double x, double y) { return std::abs(log_size(x) - log_size(y)); };
  const auto dl = [&](auto x, auto y) { return dlog(static_cast<double>(x), static_cast<double>(y)); };
  double hist = 0.0, hubs = 0.0;
  for (int i = 0; i < kBins; ++i) hist += std::abs(a.hist[i] - b.hist[i]);
  for (int k = 0; k < kHubs; ++k) hubs += dl(a.hub_rows[k], b.hub_rows[k]);
  return {dl(a.num_nodes, b.num_nodes), dl(a.num_edges, b.num_edges), dlog(a.mean_degree, b.mean_degree),
          dl(a.max_degree, b.max_degree), dlog(a.p50, b.p50), dlog(a.p90, b.p90), dlog(a.p99, b.p99),
          dlog(a.p999, b.p999), dlog(a.cv, b.cv), std::abs(a.gini - b.gini),
          std::abs(a.top1pct_edge_share - b.top1pct_edge_share), hist, hubs / kHubs};
}

namespace {

NearestCalibration calibration_of(const Json& j) {
  const auto number = [&](const Json& v, const std::string& what) {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
      fail(DFGNN_STATUS_PARSE_ERROR, "nearest calibration: {} must be a finite number >= 0 (got {})", what, v.dump());
    return v.get<double>();
  };
  if (!j.is_object() || j.value("format", 0) != 1)
    fail(DFGNN_STATUS_PARSE_ERROR, "nearest calibration: expected an object with \"format\": 1");
  const Json terms = j.value("terms", Json::array());
  std::vector<std::string> expected(kDistanceTermNames.begin(), kDistanceTermNames.end());
  if (!terms.is_array() || terms != Json(expected))
    fail(DFGNN_STATUS_PARSE_ERROR, "nearest calibration: \"terms\" {} is not this build's {}", terms.dump(),
         Json(expected).dump());
  const Json weights = j.value("weights", Json::object());
  if (!weights.is_object() || weights.size() != kDistanceTerms)
    fail(DFGNN_STATUS_PARSE_ERROR, "nearest calibration: \"weights\" must give one weight per term");
  NearestCalibration c;
  for (int t = 0; t < kDistanceTerms; ++t) {
    const auto it = weights.find(kDistanceTermNames[t]);
    if (it == weights.end())
      fail(DFGNN_STATUS_PARSE_ERROR, "nearest calibration: no weight for term \"{}\"", kDistanceTermNames[t]);
    c.weights[t] = number(*it, fmt::format("weight \"{}\"", kDistanceTermNames[t]));
  }
  c.radius = number(j.value("radius", Json()), "\"radius\"");
  c.vote_factor = number(j.value("vote_factor", Json()), "\"vote_factor\"");
  if (c.vote_factor < 1) fail(DFGNN_STATUS_PARSE_ERROR, "nearest calibration: \"vote_factor\" {} is below 1", c.vote_factor);
  return c;
}

}  // namespace

NearestCalibration parse_nearest_calibration(const std::string& text) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& ex) {
    fail(DFGNN_STATUS_PARSE_ERROR, "nearest calibration: not valid JSON: {}", ex.what());
  }
  try {
    return calibration_of(j);
  } catch (const Json::exception& ex) {
    fail(DFGNN_STATUS_PARSE_ERROR, "nearest calibration: {}", ex.what());
  }
}

const NearestCalibration& nearest_calibration() {
  static const NearestCalibration calibration = [] {
    constexpr const char* kJson =
#include "nearest_calibration.inc"
        ;
    try {
      return parse_nearest_calibration(kJson);
    } catch (const std::exception& e) {  // a build defect: tests/cpu/test_fingerprint.cpp reads it
      fail(DFGNN_STATUS_INTERNAL_ERROR, "the built-in {}", e.what());
    }
  }();
  return calibration;
}

double fingerprint_distance(const dfgnn_fingerprint_t& a, const dfgnn_fingerprint_t& b,
                            const NearestCalibration& calibration) {
  const std::array<double, kDistanceTerms> terms = fingerprint_terms(a, b);
  double d = 0.0;
  for (int t = 0; t < kDistanceTerms; ++t) d += calibration.weights[t] * terms[t];
  return std::isfinite(d) ? d : std::numeric_limits<double>::max();  // NaN/inf only from hand-made input
}

double fingerprint_distance(const dfgnn_fingerprint_t& a, const dfgnn_fingerprint_t& b) {
  return fingerprint_distance(a, b, nearest_calibration());
}

// "n2^{floor log2 N}.e2^{floor log2 E}.max2^{floor log2 maxdeg}.cv{min(floor cv, 9)}", e.g.
// "n2^12.e2^14.max2^8.cv1"; a count of 0 is written as "0" ("n0.e0.max0.cv0" for an empty graph).
std::string fingerprint_bucket_key(const dfgnn_fingerprint_t& fp) {
  const auto pow2 = [](int64_t x) {
    return x <= 0 ? std::string("0") : fmt::format("2^{}", std::bit_width(static_cast<uint64_t>(x)) - 1);
  };
  const int cv_class = fp.cv >= 0.0 ? static_cast<int>(std::min(std::floor(fp.cv), 9.0)) : 0;  // NaN -> 0
  return fmt::format("n{}.e{}.max{}.cv{}", pow2(fp.num_nodes), pow2(fp.num_edges), pow2(fp.max_degree), cv_class);
}

}  // namespace dfgnn
