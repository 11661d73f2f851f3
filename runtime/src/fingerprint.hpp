// Degree fingerprint of a graph: computation, versioned text form, distance and bucket key.
#pragma once

#include <dfgnn/dfgnn.h>

#include "degree_run.hpp"

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dfgnn {

struct Compressed;

std::vector<DegreeRun> degree_runs(const Compressed& structure);

// Every statistic is computed from the runs alone, in exact integers where it can be, so a graph
// built on the host and one built on the device get bit-identical fingerprints.
dfgnn_fingerprint_t compute_fingerprint(int64_t num_rows, int64_t nnz, std::span<const DegreeRun> runs);
dfgnn_fingerprint_t compute_fingerprint(const Compressed& csr);
std::string serialize_fingerprint(const dfgnn_fingerprint_t& fp);
// Throws Error(PARSE_ERROR) naming the problem (bad JSON, missing key, unknown version).
dfgnn_fingerprint_t parse_fingerprint(const std::string& text);

// The distance for nearest-fingerprint reuse: d(a, b) = sum_t w_t term_t(a, b), a weighted sum of
// per-feature terms (each |f(a) - f(b)| or an L1 norm, so d is a pseudometric for any weights >= 0),
// with L(x) = log2(1 + x):
//   nodes, edges, mean, max, p50, p90, p99, p999, cv: |L(a) - L(b)| of that field;
//   gini, top1: |a - b| (top1 = the edge share of the top 1% of rows);
//   hist: sum_b |hist_a[b] - hist_b[b]| (L1 of the degree-bin shares, in [0, 2]);
//   hubs: mean over thresholds k of |L(hub_rows_a[k]) - L(hub_rows_b[k])|.
// The weights, the radius and the vote radius are fitted by tools/calibrate_nearest.py on recorded
// tuning databases and embedded as data (nearest_calibration.inc); the script uses the same terms.
inline constexpr int kDistanceTerms = 13;
inline constexpr std::array<const char*, kDistanceTerms> kDistanceTermNames = {
    "nodes", "edges", "mean", "max", "p50", "p90", "p99", "p999", "cv", "gini", "top1", "hist", "hubs"};
std::array<double, kDistanceTerms> fingerprint_terms(const dfgnn_fingerprint_t& a, const dfgnn_fingerprint_t& b);

struct NearestCalibration {
  std::array<double, kDistanceTerms> weights{};
  double radius = 0;       // a tuned graph within it answers for an untuned one
  double vote_factor = 1;  // tuned graphs within vote_factor x radius vote on the nearest one's near-ties
};
// Reads a calibration document (the JSON tools/calibrate_nearest.py writes); throws
// Error(PARSE_ERROR) naming the problem (a term list other than kDistanceTermNames, a negative or
// non-finite weight or radius, a vote factor below 1).
NearestCalibration parse_nearest_calibration(const std::string& json);
// The calibration built into the library.
const NearestCalibration& nearest_calibration();

double fingerprint_distance(const dfgnn_fingerprint_t& a, const dfgnn_fingerprint_t& b,
                            const NearestCalibration& calibration);
// With the built-in calibration (dfgnnFingerprintDistance).
double fingerprint_distance(const dfgnn_fingerprint_t& a, const dfgnn_fingerprint_t& b);
std::string fingerprint_bucket_key(const dfgnn_fingerprint_t& fp);

// A fingerprint text as stored in a tuning row: its parsed form, whether the text is the canonical
// serialization of it, and its bucket key. Memoised per process (a bounded table): dispatch reads
// the same rows for every pass and op of a graph, and parsing one costs tens of microseconds.
// Throws as parse_fingerprint; a text that fails is not remembered.
struct StoredFingerprint {
  dfgnn_fingerprint_t fp{};
  bool canonical = false;
  std::string bucket_key;
};
StoredFingerprint stored_fingerprint(const std::string& text);

}  // namespace dfgnn
