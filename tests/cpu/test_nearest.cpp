// Nearest-fingerprint reuse (runtime/src/nearest.cpp) and its calibration (the distance's weights and
// radius, runtime/src/nearest_calibration.inc, fitted by tools/calibrate_nearest.py): the rule on
// hand-made neighbours, the calibration's reader, and the script's leave-one-graph-out replay of the
// recorded extract (tests/data/) checked against the runtime's own distance and rule.
#include "fingerprint.hpp"
#include "nearest.hpp"
#include "stats.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace dfgnn {
namespace {

db::CandidateStat cand(const std::string& schedule, double median_ms, int64_t count = 5, double rel_sd = 0.002) {
  std::vector<double> samples;
  for (int64_t i = 0; i < count; ++i) samples.push_back(median_ms * (1 + rel_sd * static_cast<double>(i - count / 2)));
  return db::summarize_samples(schedule, 1, samples);
}

TunedNeighbour neighbour(double distance, std::vector<db::CandidateStat> candidates) {
  TunedNeighbour n;
  n.distance = distance;
  n.candidates = std::move(candidates);
  const auto best = std::min_element(n.candidates.begin(), n.candidates.end(),
                                     [](const auto& a, const auto& b) { return a.median_ms < b.median_ms; });
  n.winner = best->schedule;
  std::vector<stats::Summary> s;
  for (const auto& c : n.candidates) s.push_back(c.summary());
  n.pooled_spread = stats::median_relative_stddev(s);
  return n;
}

TEST(Nearest, NoAnswerBeyondTheRadius) {
  EXPECT_TRUE(rank_nearest({}, 1.0, stats::TiePolicy{}).schedules.empty());
  EXPECT_TRUE(rank_nearest({neighbour(1.5, {cand("x", 1.0)})}, 1.0, stats::TiePolicy{}).schedules.empty());
  const NearestRanking r = rank_nearest({neighbour(0.5, {cand("x", 1.0), cand("y", 2.0)})}, 1.0, stats::TiePolicy{});
  EXPECT_EQ(r.schedules, std::vector<std::string>{"x"});
  EXPECT_EQ(r.voters, 1);
}

TEST(Nearest, FartherGraphsBreakTheNearestGraphsTieOnly) {
  // Nearest: x ahead of y by 1% (inside the winner policy's band). A farther graph: y far ahead.
  const std::vector<TunedNeighbour> tie = {neighbour(0.2, {cand("x", 1.0), cand("y", 1.01), cand("z", 1.5)}),
                                           neighbour(0.8, {cand("x", 1.8), cand("y", 1.0), cand("z", 0.5)})};
  NearestRanking r = rank_nearest(tie, 1.0, stats::TiePolicy{});
  EXPECT_EQ(r.voters, 2);
  // z is not eligible (clearly slower on the nearest graph), however much the far graph likes it.
  EXPECT_EQ(r.schedules, (std::vector<std::string>{"y", "x"}));
  // A clear winner of the nearest graph stands.
  const std::vector<TunedNeighbour> clear = {neighbour(0.2, {cand("x", 1.0), cand("y", 1.3)}),
                                             neighbour(0.8, {cand("x", 1.8), cand("y", 1.0)})};
  EXPECT_EQ(rank_nearest(clear, 1.0, stats::TiePolicy{}).schedules.front(), "x");
  // The vote weights exp(-d / radius): the same far graph at a larger distance counts less, and
  // the nearest graph's 1% then decides.
  const std::vector<TunedNeighbour> faint = {neighbour(0.0, {cand("x", 1.0), cand("y", 1.01)}),
                                             neighbour(20.0, {cand("x", 1.8), cand("y", 1.0)})};
  EXPECT_EQ(rank_nearest(faint, 1.0, stats::TiePolicy{}).schedules.front(), "x");
}

// Eligibility is judged in the band of the database's winner policy, not a built-in one: a band
// wide enough makes the nearest graph's 30% a tie, which the farther graph then breaks.
TEST(Nearest, EligibilityFollowsTheDatabasesWinnerPolicy) {
  const std::vector<TunedNeighbour> g = {neighbour(0.2, {cand("x", 1.0), cand("y", 1.3)}),
                                         neighbour(0.8, {cand("x", 1.8), cand("y", 1.0)})};
  EXPECT_EQ(rank_nearest(g, 1.0, stats::TiePolicy{}).schedules, std::vector<std::string>{"x"});
  db::LayeredDb::Options options;  // no layers: only the policy matters here
  options.user_path = std::filesystem::path();
  options.site_paths = std::vector<std::filesystem::path>{};
  options.shipped_paths = std::vector<std::filesystem::path>{};
  options.db.policy.tie.tolerance = 0.5;
  const db::LayeredDb layers(options);
  EXPECT_EQ(layers.policy().tie.tolerance, 0.5);
  EXPECT_EQ(rank_nearest(g, 1.0, layers.policy().tie).schedules, (std::vector<std::string>{"y", "x"}));
}

TEST(Nearest, BuiltInCalibrationReadsAndBadDocumentsAreNamed) {
  const NearestCalibration& c = nearest_calibration();
  EXPECT_GT(c.radius, 0.0);
  EXPECT_GE(c.vote_factor, 1.0);
  EXPECT_GT(*std::max_element(c.weights.begin(), c.weights.end()), 0.0);
  const std::string terms = nlohmann::json(std::vector<std::string>(kDistanceTermNames.begin(), kDistanceTermNames.end())).dump();
  const auto doc = [&](const std::string& weights, const std::string& rest) {
    return "{\"format\": 1, \"terms\": " + terms + ", \"weights\": " + weights + rest + "}";
  };
  std::string weights = "{";
  for (int t = 0; t < kDistanceTerms; ++t) weights += (t ? ", \"" : "\"") + std::string(kDistanceTermNames[t]) + "\": " + std::to_string(t);
  weights += "}";
  const NearestCalibration ok = parse_nearest_calibration(doc(weights, ", \"radius\": 1.5, \"vote_factor\": 2"));
  EXPECT_EQ(ok.weights[3], 3.0);
  EXPECT_EQ(ok.radius, 1.5);
  EXPECT_EQ(ok.vote_factor, 2.0);
  const auto message = [](const std::string& text) {
    try {
      parse_nearest_calibration(text);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(message("{\"format\": 2}").find("\"format\": 1"), std::string::npos);
  EXPECT_NE(message("{\"format\": 1, \"terms\": [\"nodes\"]}").find("is not this build's"), std::string::npos);
  EXPECT_NE(message(doc(weights, ", \"radius\": -1, \"vote_factor\": 2")).find("\"radius\" must be"), std::string::npos);
  EXPECT_NE(message(doc(weights, ", \"radius\": 1, \"vote_factor\": 0.5")).find("below 1"), std::string::npos);
  std::string negative = weights;
  negative.replace(negative.find(": 3"), 3, ": -3");
  EXPECT_NE(message(doc(negative, ", \"radius\": 1, \"vote_factor\": 2")).find("weight \"max\""), std::string::npos);
  EXPECT_NE(message(doc("{\"nodes\": 1}", ", \"radius\": 1, \"vote_factor\": 2")).find("one weight per term"),
            std::string::npos);
}

TEST(Nearest, DistanceIsTheWeightedSumOfTheTerms) {
  dfgnn_fingerprint_t a{}, b{};
  a.version = b.version = DFGNN_FINGERPRINT_VERSION;
  a.num_nodes = 3, b.num_nodes = 15;  // L: 2 and 4
  a.mean_degree = 1, b.mean_degree = 7;  // L: 1 and 3
  a.gini = 0.25, b.gini = 0.5;
  a.hist[1] = 1.0, b.hist[2] = 1.0;  // L1 = 2
  a.hub_rows[0] = 1, b.hub_rows[0] = 3;  // L: 1 and 2, mean over 10 thresholds 0.1
  const std::array<double, kDistanceTerms> t = fingerprint_terms(a, b);
  const std::array<double, kDistanceTerms> expect = {2, 0, 2, 0, 0, 0, 0, 0, 0, 0.25, 0, 2, 0.1};
  for (int i = 0; i < kDistanceTerms; ++i) EXPECT_NEAR(t[i], expect[i], 1e-12) << kDistanceTermNames[i];
  NearestCalibration c;
  c.weights.fill(1.0);
  c.weights[0] = 0.5;
  EXPECT_NEAR(fingerprint_distance(a, b, c), 0.5 * 2 + 2 + 0.25 + 2 + 0.1, 1e-12);
  double api = 0;
  ASSERT_EQ(dfgnnFingerprintDistance(&a, &b, &api), DFGNN_STATUS_SUCCESS);
  EXPECT_EQ(api, fingerprint_distance(a, b, nearest_calibration()));
}

// The script's leave-one-graph-out replay (tools/calibrate_nearest.py evaluate, under the built-in
// calibration, committed as tests/data/nearest_predictions.json) is what the runtime's distance and
// rule give on the same extract: the calibration is fitted on the rule that runs.
TEST(Nearest, ScriptReplayMatchesTheRuntime) {
  std::ifstream ef(DFGNN_SOURCE_DIR "/tests/data/nearest_extract.json");
  std::ifstream pf(DFGNN_SOURCE_DIR "/tests/data/nearest_predictions.json");
  ASSERT_TRUE(ef && pf) << "tests/data/nearest_extract.json or nearest_predictions.json missing";
  const nlohmann::json extract = nlohmann::json::parse(ef), expected = nlohmann::json::parse(pf);
  std::map<std::string, dfgnn_fingerprint_t> fps;
  for (const auto& [id, g] : extract.at("graphs").items()) fps[id] = parse_fingerprint(g.at("fingerprint").dump());
  const NearestCalibration& cal = nearest_calibration();
  for (const auto& row : expected.at("distances")) {
    const double d = fingerprint_distance(fps.at(row[0].get<std::string>()), fps.at(row[1].get<std::string>()), cal);
    EXPECT_NEAR(d, row[2].get<double>(), 1e-9 * std::max(1.0, d)) << row.dump();
  }
  struct Case {
    std::string graph, winner;
    std::vector<db::CandidateStat> candidates;
    double pooled_spread;
  };
  // The extract (format 2): per op a list of schedule texts; a case's candidates are
  // [text index, count, m2, median] (the mean is not read by the rule).
  ASSERT_EQ(extract.at("format"), 2);
  const auto op_key = [](const nlohmann::json& op) {  // the script's key: json.dumps of the op list
    std::string k = "[";
    for (size_t i = 0; i < op.size(); ++i) k += (i ? ", " : "") + op[i].dump();
    return k + "]";
  };
  std::map<std::string, std::vector<Case>> by_op;
  for (const auto& c : extract.at("cases")) {
    const nlohmann::json& texts = extract.at("schedules").at(op_key(c.at("op")));
    Case k{c.at("graph"), texts.at(c.at("winner").get<size_t>()), {}, c.at("pooled_spread")};
    for (const auto& x : c.at("candidates"))
      k.candidates.push_back({texts.at(x[0].get<size_t>()), 1, x[1].get<int64_t>(), 0.0, x[2].get<double>(), 0.0,
                              x[3].get<double>()});
    by_op[c.at("op").dump()].push_back(std::move(k));
  }
  int checked = 0, answered = 0;
  for (const auto& p : expected.at("predictions")) {
    const std::vector<Case>& cases = by_op.at(p.at("op").dump());
    const std::string graph = p.at("graph");
    const Case& target = *std::find_if(cases.begin(), cases.end(), [&](const Case& c) { return c.graph == graph; });
    std::vector<std::pair<std::pair<double, std::string>, const Case*>> near;
    for (const Case& c : cases) {
      if (c.graph == graph) continue;
      const double d = fingerprint_distance(fps.at(graph), fps.at(c.graph), cal);
      if (d <= cal.vote_factor * cal.radius) near.push_back({{d, c.graph}, &c});
    }
    std::sort(near.begin(), near.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<TunedNeighbour> neighbours;
    for (const auto& [key, c] : near) neighbours.push_back({key.first, c->winner, c->candidates, c->pooled_spread});
    std::string chosen;  // the first ranked schedule measured on the left-out graph, as the replay scores it
    for (const std::string& s : rank_nearest(neighbours, cal.radius, stats::TiePolicy{}).schedules)
      if (std::any_of(target.candidates.begin(), target.candidates.end(), [&](const auto& c) { return c.schedule == s; })) {
        chosen = s;
        break;
      }
    const std::string want = p.at("chosen").is_null() ? "" : p.at("chosen").get<std::string>();
    EXPECT_EQ(chosen, want) << "graph " << graph << " op " << p.at("op").dump();
    ++checked;
    answered += !want.empty();
  }
  EXPECT_GE(checked, 15);
  EXPECT_GT(answered, 0);
}

}  // namespace
}  // namespace dfgnn
