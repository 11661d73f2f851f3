// The tuner's search protocol (tuner/src/search.hpp) driven by a fake measurer: per-candidate
// true costs, seeded multiplicative noise, a fake clock advanced by every measurer call. Fully
// deterministic except the prepare-thread tests, which check ordering and bounds, not exact timing.
#include "search.hpp"
#include "tune.hpp"
#include "stats.hpp"
#include "dispatch.hpp"
#include "tuning_db.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <filesystem>
#include <vector>

#include <unistd.h>

namespace dfgnn::tuner {
namespace {

using stats::kPairToSigma;
using stats::median_of;

enum class Noise { None, LogNormal, Uniform };

// Seeds per statistical test; raise with DFGNN_TUNER_TEST_SEEDS=500 for a stress run.
int seed_count() {
  const char* env = std::getenv("DFGNN_TUNER_TEST_SEEDS");
  return env ? std::max(1, std::atoi(env)) : 20;
}

std::string name_of(std::size_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "cand_%03zu", i);
  return buf;
}

std::vector<Candidate> make_candidates(std::size_t n, std::size_t def) {
  std::vector<Candidate> c(n);
  for (std::size_t i = 0; i < n; ++i) c[i] = {name_of(i), i == def};
  return c;
}

class FakeMeasurer : public Measurer {
  // Declared first: the public records below are sized from them.
  std::vector<double> costs_;
  std::mt19937_64 rng_;
  Noise noise_;
  double level_;
  double overhead_ms_;
  std::normal_distribution<double> normal_{0.0, 1.0};
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  std::unique_ptr<std::atomic<int>[]> prepared_;

 public:
  FakeMeasurer(std::vector<double> costs, uint64_t seed, Noise noise = Noise::None, double level = 0.0,
               double overhead_ms = 0.1)
      : costs_(std::move(costs)),
        rng_(seed),
        noise_(noise),
        level_(level),
        overhead_ms_(overhead_ms),
        prepared_(new std::atomic<int>[costs_.size()]),
        time_calls(costs_.size(), 0) {
    for (std::size_t i = 0; i < costs_.size(); ++i) prepared_[i] = 0;
  }

  // Fake clock: seconds, advanced by verify/warmup (cost + overhead) and time (sample + overhead).
  std::function<double()> clock() {
    return [this] { return now_ms / 1000.0; };
  }

  // Behaviours.
  std::map<std::size_t, std::string> wrong, prepare_throws, verify_throws, warmup_throws;
  std::map<std::size_t, std::pair<int, std::string>> time_throws;  // throw on the k-th time call (1-based)
  double prepare_sleep_ms = 0.0;
  double prepare_cost_ms = 0.0;  // advances the fake clock: inline prepares only (the calling thread's clock)
  double verify_sleep_ms = 0.0;  // real sleep (for the thread test)
  std::set<std::size_t> meet;    // their prepares wait (up to 2 s) until two of them run at once

  // Records (calling thread only, except the prepare ones).
  double now_ms = 0.0;
  double max_call_ms = 0.0;
  std::vector<std::pair<char, std::size_t>> calls;  // 'v' verify, 'w' warmup, 't' time
  std::vector<int> time_calls;
  int violations = 0;  // verify/warmup/time before prepare returned
  std::mutex mutex;
  std::map<std::size_t, std::thread::id> prepare_thread;
  std::map<std::size_t, double> prepare_start, prepare_end, verify_end;  // real seconds
  std::atomic<int> inside{0}, max_inside{0}, met{0};

  void prepare(std::size_t i, const std::string&) override {
    const int now_inside = ++inside;
    int seen = max_inside.load();
    while (now_inside > seen && !max_inside.compare_exchange_weak(seen, now_inside)) {
    }
    {
      std::lock_guard lock(mutex);
      prepare_thread[i] = std::this_thread::get_id();
      prepare_start[i] = real_now();
    }
    if (meet.count(i)) {
      ++met;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (met.load() < 2 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (prepare_sleep_ms > 0)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(prepare_sleep_ms));
    if (prepare_cost_ms > 0) advance(prepare_cost_ms);
    {
      std::lock_guard lock(mutex);
      prepare_end[i] = real_now();
    }
    --inside;
    if (auto it = prepare_throws.find(i); it != prepare_throws.end()) throw std::runtime_error(it->second);
    prepared_[i] = 1;
  }

  VerifyResult verify(std::size_t i, const std::string&) override {
    check_prepared(i);
    calls.emplace_back('v', i);
    advance(costs_[i] + overhead_ms_);
    if (verify_sleep_ms > 0)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(verify_sleep_ms));
    {
      std::lock_guard lock(mutex);
      verify_end[i] = real_now();
    }
    if (auto it = verify_throws.find(i); it != verify_throws.end()) throw std::runtime_error(it->second);
    if (auto it = wrong.find(i); it != wrong.end()) return VerifyResult::fail(it->second);
    return VerifyResult::pass();
  }

  void warmup(std::size_t i, const std::string&) override {
    check_prepared(i);
    calls.emplace_back('w', i);
    advance(costs_[i] + overhead_ms_);
    if (auto it = warmup_throws.find(i); it != warmup_throws.end()) throw std::runtime_error(it->second);
  }

  double time(std::size_t i, const std::string&) override {
    check_prepared(i);
    calls.emplace_back('t', i);
    const int k = ++time_calls[i];
    if (auto it = time_throws.find(i); it != time_throws.end() && it->second.first == k) {
      advance(overhead_ms_);
      throw std::runtime_error(it->second.second);
    }
    double ms = costs_[i];
    if (noise_ == Noise::LogNormal) ms *= std::exp(level_ * normal_(rng_));
    if (noise_ == Noise::Uniform) ms *= 1.0 + level_ * (2.0 * uniform_(rng_) - 1.0);
    advance(ms + overhead_ms_);
    return ms;
  }

  std::vector<std::size_t> time_order() const {
    std::vector<std::size_t> v;
    for (const auto& [kind, i] : calls)
      if (kind == 't') v.push_back(i);
    return v;
  }

 private:
  static double real_now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  void check_prepared(std::size_t i) {
    if (!prepared_[i].load()) ++violations;
  }
  void advance(double ms) {
    now_ms += ms;
    max_call_ms = std::max(max_call_ms, ms);
  }
};

SearchOptions options_for(FakeMeasurer& m, int threads = 0) {
  SearchOptions o;
  o.clock = m.clock();
  o.prepare_threads = threads;
  o.log = [](LogLevel, const std::string&) {};
  return o;
}

std::size_t count_status(const SearchResult& r, CandidateStatus s) {
  return static_cast<std::size_t>(std::count_if(r.candidates.begin(), r.candidates.end(),
                                                [&](const CandidateRecord& c) { return c.status == s; }));
}

// 50 candidates: the true best at 1.0, every other at least 5% slower (up to 3x), the default
// at 1.5; positions shuffled by the seed.
struct Landscape {
  std::vector<double> costs;
  std::size_t best = 0, def = 0;
};
Landscape spread_landscape(uint64_t seed, std::size_t n = 50) {
  std::mt19937_64 rng(seed * 7919 + 13);
  std::uniform_real_distribution<double> u(1.05, 3.0);
  Landscape l;
  l.costs.resize(n);
  for (double& c : l.costs) c = u(rng);
  std::vector<std::size_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::shuffle(idx.begin(), idx.end(), rng);
  l.best = idx[0];
  l.def = idx[1];
  l.costs[l.best] = 1.0;
  l.costs[l.def] = 1.5;
  return l;
}

// ------------------------------------------------------------------------------------ stats

TEST(TunerSearch, StatsWelfordMedianMad) {
  SampleStats s;
  EXPECT_EQ(s.summary().count, 0u);
  EXPECT_EQ(s.summary().median, 0.0);
  for (double x : {3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0}) s.add(x);
  const Stats st = s.summary();
  EXPECT_EQ(st.count, 8u);
  EXPECT_DOUBLE_EQ(st.mean, 31.0 / 8.0);
  double ss = 0;
  for (double x : s.samples()) ss += (x - st.mean) * (x - st.mean);
  EXPECT_NEAR(st.variance, ss / 7.0, 1e-12);
  EXPECT_NEAR(st.stddev, std::sqrt(ss / 7.0), 1e-12);
  EXPECT_DOUBLE_EQ(st.median, 3.5);
  EXPECT_DOUBLE_EQ(st.mad, 2.0);
  EXPECT_DOUBLE_EQ(st.min, 1.0);
  EXPECT_DOUBLE_EQ(st.max, 9.0);
  EXPECT_NEAR(st.spread, kPairToSigma * 3.0, 1e-12);  // median of the 28 pairwise |x_j - x_k|
  EXPECT_NEAR(st.relative_pair_spread(), kPairToSigma * 3.0 / 3.5, 1e-12);
  // Pooled over sets, each scaled by its own median: {1, 2, 3} -> 0.5, 0.5, 1; {10, 10} -> 0.
  SampleStats p1, p2, p3;
  for (double x : {1.0, 2.0, 3.0}) p1.add(x);
  for (double x : {10.0, 10.0}) p2.add(x);
  p3.add(5.0);
  EXPECT_NEAR(SampleStats::pooled_pair_spread({&p1, &p2, &p3}), kPairToSigma * 0.5, 1e-12);
  EXPECT_EQ(SampleStats::pooled_pair_spread({&p3}), 0.0);
  EXPECT_DOUBLE_EQ(median_of({5.0, 1.0, 3.0}), 3.0);
  EXPECT_DOUBLE_EQ(median_of({}), 0.0);

  // Welford stays exact where the naive sum of squares would cancel.
  SampleStats big;
  for (double x : {4.0, 7.0, 13.0, 16.0}) big.add(1e9 + x);
  EXPECT_NEAR(big.variance(), 30.0, 1e-6);
  SampleStats one;
  one.add(2.0);
  EXPECT_EQ(one.variance(), 0.0);
  EXPECT_EQ(one.summary().relative_pair_spread(), 0.0);  // fewer than 3 samples
}

TEST(TunerSearch, EliminationMarginShrinksWithSamplesTowardsTolerance) {
  SearchOptions o;
  Stats a, b;
  a.median = b.median = 1.0;
  a.spread = b.spread = 0.02;  // 2% relative spread
  double previous = 1e9;
  for (std::size_t n : {3u, 5u, 10u, 20u, 100u, 10000u}) {
    a.count = b.count = n;
    const double m = elimination_margin(a, b, 0.0, o);
    EXPECT_LT(m, previous);
    EXPECT_GT(m, o.tie.tolerance);
    previous = m;
  }
  EXPECT_NEAR(previous, o.tie.tolerance, 0.002);
  // At n = 3: 2% + 3 * 1.2533 * sqrt(2 * 0.02^2 / 3) = 2% + 6.14%.
  a.count = b.count = 3;
  EXPECT_NEAR(elimination_margin(a, b, 0.0, o), 0.02 + 3 * 1.2533141 * std::sqrt(2 * 0.0004 / 3), 1e-6);
  // The pooled spread and the noise floor raise a suspiciously tight candidate's spread.
  a.spread = b.spread = 0.0;
  EXPECT_NEAR(elimination_margin(a, b, 0.0, o), 0.02 + 3 * 1.2533141 * std::sqrt(2 * 0.005 * 0.005 / 3),
              1e-6);
  EXPECT_NEAR(elimination_margin(a, b, 0.03, o), 0.02 + 3 * 1.2533141 * std::sqrt(2 * 0.03 * 0.03 / 3), 1e-6);
  // The decision's tie band (the shared winner policy, stats.hpp) is the tolerance plus tie_z
  // standard errors of the same noise model, inside the elimination margin.
  const stats::TiePolicy policy = o.tie;
  stats::Summary sa, sb;
  sa.count = sb.count = 3;
  sa.median = sb.median = 1.0;
  EXPECT_NEAR(stats::tie_margin(sa, sb, 0.03, policy), 0.02 + 1.2533141 * std::sqrt(2 * 0.03 * 0.03 / 3), 1e-6);
  EXPECT_LT(stats::tie_margin(sa, sb, 0.03, policy), elimination_margin(a, b, 0.03, o));
  a.median = sa.median = 1.04;
  EXPECT_TRUE(stats::tied(sa, sb, 0.03, policy));
  a.median = sa.median = 1.06;
  EXPECT_FALSE(stats::tied(sa, sb, 0.03, policy));
  EXPECT_FALSE(clearly_slower(a, b, 0.03, o));  // undecided: neither tied nor clearly slower
  a.median = 1.2;
  EXPECT_TRUE(clearly_slower(a, b, 0.0, o));
  a.median = 1.03;
  EXPECT_FALSE(clearly_slower(a, b, 0.0, o));
}

TEST(TunerSearch, RejectsBadInput) {
  FakeMeasurer m({1.0, 1.0}, 1);
  EXPECT_THROW(search({}, m), std::invalid_argument);
  EXPECT_THROW(search({{"a", false}, {"b", false}}, m), std::invalid_argument);
  EXPECT_THROW(search({{"a", true}, {"b", true}}, m), std::invalid_argument);
  EXPECT_THROW(search({{"a", true}, {"a", false}}, m), std::invalid_argument);
  SearchOptions o;
  o.min_samples = 5;
  o.max_samples = 3;
  EXPECT_THROW(search({{"a", true}, {"b", false}}, m, o), std::invalid_argument);
  o = {};
  o.budget_s = 0;
  EXPECT_THROW(search({{"a", true}, {"b", false}}, m, o), std::invalid_argument);
}

// ------------------------------------------------------------------------------- correctness

TEST(TunerSearch, PicksTrueFastestAmong50UnderNoise) {
  for (Noise noise : {Noise::LogNormal, Noise::Uniform}) {
    for (int seed = 1; seed <= seed_count(); ++seed) {
      const Landscape l = spread_landscape(static_cast<uint64_t>(seed));
      FakeMeasurer m(l.costs, static_cast<uint64_t>(seed), noise, 0.03);
      const SearchResult r = search(make_candidates(l.costs.size(), l.def), m, options_for(m));
      ASSERT_TRUE(r.found);
      EXPECT_EQ(r.winner_index, l.best) << "seed " << seed << ": " << r.reason;
      EXPECT_LE(l.costs[r.winner_index], 1.03 * l.costs[l.best]) << "seed " << seed;
      EXPECT_FALSE(r.budget_exhausted);
      EXPECT_EQ(r.default_index, l.def);
      EXPECT_NE(r.reason.find("over default"), std::string::npos) << r.reason;
      EXPECT_EQ(m.violations, 0);
    }
  }
}

TEST(TunerSearch, WinnerWithin3PercentOfBestOnDenseCosts) {
  // 50 candidates 1% apart (1.00 .. 1.49), shuffled: many near-ties under 3% noise.
  for (int seed = 1; seed <= seed_count(); ++seed) {
    std::mt19937_64 rng(static_cast<uint64_t>(seed));
    std::vector<double> costs(50);
    for (std::size_t k = 0; k < costs.size(); ++k) costs[k] = 1.0 + 0.01 * static_cast<double>(k);
    std::shuffle(costs.begin(), costs.end(), rng);
    const std::size_t def = static_cast<std::size_t>(
        std::find_if(costs.begin(), costs.end(), [](double c) { return c > 1.2; }) - costs.begin());
    FakeMeasurer m(costs, static_cast<uint64_t>(seed) + 1000, Noise::LogNormal, 0.03);
    const SearchResult r = search(make_candidates(costs.size(), def), m, options_for(m));
    ASSERT_TRUE(r.found);
    EXPECT_LE(costs[r.winner_index], 1.03) << "seed " << seed << ": " << r.winner << ", " << r.reason;
  }
}

TEST(TunerSearch, NearTieWithDefaultKeepsDefault) {
  // Default 1.00, another 1% faster (within the 2% tolerance), the rest clearly slower.
  std::vector<double> costs = {1.3, 1.0, 1.6, 0.99, 1.4, 2.0};
  const std::size_t def = 1;
  {
    FakeMeasurer m(costs, 1);
    const SearchResult r = search(make_candidates(costs.size(), def), m, options_for(m));
    EXPECT_EQ(r.winner_index, def);
    EXPECT_TRUE(r.kept_default_on_tie);
    EXPECT_TRUE(r.has_runner_up);
    EXPECT_EQ(r.runner_up_index, 3u);
    EXPECT_DOUBLE_EQ(r.speedup_over_default, 1.0);
    // Tie band: 2% tolerance + one standard error (noise floor 0.5%, 20 samples each) = 2.2%.
    EXPECT_EQ(r.reason, "tied with default within 2.2% ('cand_003' was 1.0% faster), kept default");
    // The near-ties were re-measured beyond max_samples.
    EXPECT_EQ(r.candidates[def].stats.count, 20u);
    EXPECT_EQ(r.candidates[3].stats.count, 20u);
  }
  for (int seed = 1; seed <= seed_count(); ++seed) {
    FakeMeasurer m(costs, static_cast<uint64_t>(seed), Noise::LogNormal, 0.01);
    const SearchResult r = search(make_candidates(costs.size(), def), m, options_for(m));
    EXPECT_EQ(r.winner_index, def) << "seed " << seed << ": " << r.reason;
  }
}

TEST(TunerSearch, ClearlyFasterCandidateBeatsDefault) {
  std::vector<double> costs = {1.0, 1.3, 0.9, 1.6};
  {
    FakeMeasurer m(costs, 1);
    const SearchResult r = search(make_candidates(costs.size(), 0), m, options_for(m));
    EXPECT_EQ(r.winner_index, 2u);
    EXPECT_FALSE(r.kept_default_on_tie);
    EXPECT_NEAR(r.speedup_over_default, 1.0 / 0.9, 1e-12);
    EXPECT_EQ(r.reason, "fastest by 11.1% over default");
    EXPECT_DOUBLE_EQ(r.default_stats.median, 1.0);
    EXPECT_DOUBLE_EQ(r.winner_stats.median, 0.9);
  }
  for (int seed = 1; seed <= seed_count(); ++seed) {
    FakeMeasurer m(costs, static_cast<uint64_t>(seed), Noise::LogNormal, 0.03);
    const SearchResult r = search(make_candidates(costs.size(), 0), m, options_for(m));
    EXPECT_EQ(r.winner_index, 2u) << "seed " << seed << ": " << r.reason;
  }
}

TEST(TunerSearch, WrongFastCandidateNeverWins) {
  std::vector<double> costs = {1.0, 0.5, 0.8, 1.2};
  FakeMeasurer m(costs, 3, Noise::LogNormal, 0.03);
  m.wrong[1] = "max abs error 0.25 at node 17 head 0";
  std::vector<std::string> warnings;
  SearchOptions o = options_for(m);
  o.log = [&](LogLevel level, const std::string& msg) {
    if (level == LogLevel::Warn) warnings.push_back(msg);
  };
  const SearchResult r = search(make_candidates(costs.size(), 0), m, o);
  EXPECT_EQ(r.winner_index, 2u);
  const CandidateRecord& bad = r.candidates[1];
  EXPECT_EQ(bad.status, CandidateStatus::Failed);
  EXPECT_EQ(bad.failed_stage, Stage::Verify);
  EXPECT_EQ(bad.failure, "max abs error 0.25 at node 17 head 0");
  EXPECT_EQ(bad.describe(), "failed (verify: max abs error 0.25 at node 17 head 0)");
  EXPECT_FALSE(bad.verified);
  EXPECT_EQ(bad.stats.count, 0u);
  EXPECT_EQ(m.time_calls[1], 0);  // never timed
  EXPECT_NE(r.runner_up_index, 1u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("cand_001"), std::string::npos);
  EXPECT_NE(warnings[0].find("max abs error"), std::string::npos);
}

TEST(TunerSearch, ThrowingCandidatesAreFailedAndSearchContinues) {
  // All the failing ones would be fastest; the best valid one is cand_005 (0.9).
  std::vector<double> costs = {1.0, 0.5, 0.5, 0.5, 0.89, 0.9, 1.2};
  FakeMeasurer m(costs, 5);
  m.prepare_throws[1] = "nvrtc: error: identifier \"foo\" is undefined";
  m.verify_throws[2] = "CUDA error: an illegal memory access was encountered";
  m.warmup_throws[3] = "CUDA error: too many resources requested for launch";
  m.time_throws[4] = {4, "CUDA error: unspecified launch failure"};  // after 3 good samples
  int warnings = 0;
  SearchOptions o = options_for(m, 2);
  o.log = [&](LogLevel level, const std::string&) { warnings += level == LogLevel::Warn ? 1 : 0; };
  const SearchResult r = search(make_candidates(costs.size(), 0), m, o);
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.winner_index, 5u);
  EXPECT_EQ(warnings, 4);
  const auto& c = r.candidates;
  EXPECT_EQ(c[1].status, CandidateStatus::Failed);
  EXPECT_EQ(c[1].failed_stage, Stage::Prepare);
  EXPECT_EQ(c[1].failure, "nvrtc: error: identifier \"foo\" is undefined");
  EXPECT_FALSE(c[1].prepared);
  EXPECT_EQ(c[2].failed_stage, Stage::Verify);
  EXPECT_EQ(c[2].failure, "CUDA error: an illegal memory access was encountered");
  EXPECT_TRUE(c[2].prepared);
  EXPECT_EQ(c[3].failed_stage, Stage::Warmup);
  EXPECT_TRUE(c[3].verified);
  EXPECT_EQ(c[3].failure, "CUDA error: too many resources requested for launch");
  EXPECT_EQ(c[4].status, CandidateStatus::Failed);
  EXPECT_EQ(c[4].failed_stage, Stage::Time);
  EXPECT_EQ(c[4].failure, "CUDA error: unspecified launch failure");
  EXPECT_EQ(c[4].stats.count, 3u);  // samples before the failure are kept
  EXPECT_EQ(m.time_calls[4], 4);    // never timed again after it threw
  for (std::size_t i : {1u, 2u, 3u}) EXPECT_EQ(m.time_calls[i], 0);
  EXPECT_EQ(r.candidates[5].status, CandidateStatus::Measured);
  EXPECT_FALSE(r.default_failed);
  EXPECT_EQ(m.violations, 0);
}

TEST(TunerSearch, DefaultFailingVerificationIsReported) {
  std::vector<double> costs = {1.2, 1.0, 0.8, 1.5};
  FakeMeasurer m(costs, 9);
  m.wrong[1] = "output differs from the reference";
  const SearchResult r = search(make_candidates(costs.size(), 1), m, options_for(m));
  ASSERT_TRUE(r.found);
  EXPECT_TRUE(r.default_failed);
  EXPECT_EQ(r.default_index, 1u);
  EXPECT_EQ(r.candidates[1].status, CandidateStatus::Failed);
  EXPECT_EQ(r.winner_index, 2u);
  EXPECT_EQ(r.speedup_over_default, 0.0);
  EXPECT_EQ(
      r.reason.rfind("default failed verify (output differs from the reference); fastest valid candidate", 0),
      0u)
      << r.reason;
  // The default was still the first candidate verified.
  ASSERT_FALSE(m.calls.empty());
  EXPECT_EQ(m.calls.front(), std::make_pair('v', std::size_t{1}));
}

TEST(TunerSearch, NoValidCandidate) {
  std::vector<double> costs = {1.0, 1.0, 1.0};
  FakeMeasurer m(costs, 1);
  m.wrong[0] = "bad";
  m.verify_throws[1] = "boom";
  m.prepare_throws[2] = "no compile";
  const SearchResult r = search(make_candidates(costs.size(), 0), m, options_for(m, 1));
  EXPECT_FALSE(r.found);
  EXPECT_EQ(r.winner_index, SearchResult::npos);
  EXPECT_TRUE(r.default_failed);
  EXPECT_EQ(count_status(r, CandidateStatus::Failed), 3u);
  EXPECT_NE(r.reason.find("no valid candidate: default failed verify (bad)"), std::string::npos) << r.reason;
}

// ------------------------------------------------------------------------------- the budget

TEST(TunerSearch, BudgetExhaustionReturnsMeasuredWinner) {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(1.0, 3.0);
  std::vector<double> costs(120);
  for (double& c : costs) c = u(rng);
  costs[100] = 0.5;  // far down the enumeration: small budgets never reach it
  for (double budget : {0.01, 0.03, 0.1, 0.3, 1.0, 10.0}) {
    FakeMeasurer m(costs, 7, Noise::LogNormal, 0.03);
    SearchOptions o = options_for(m);
    o.budget_s = budget;
    const SearchResult r = search(make_candidates(costs.size(), 3), m, o);
    SCOPED_TRACE("budget " + std::to_string(budget) + ": " + r.reason);
    ASSERT_TRUE(r.found);
    const CandidateRecord& w = r.candidates[r.winner_index];
    EXPECT_EQ(w.status, CandidateStatus::Measured);
    EXPECT_GE(w.stats.count, 1u);
    EXPECT_TRUE(w.verified);
    // Never more than one measurer call past the budget (the first sample is always taken).
    EXPECT_LE(r.elapsed_s, budget + m.max_call_ms / 1000.0 + 1e-12);
    EXPECT_DOUBLE_EQ(r.elapsed_s, m.now_ms / 1000.0);
    for (const CandidateRecord& c : r.candidates) {
      if (c.status == CandidateStatus::NotMeasured) {
        EXPECT_EQ(c.stats.count, 0u);
        EXPECT_EQ(c.describe(), "not measured (budget)");
      }
      // The winner is the best among what was measured (and still standing).
      if (c.status == CandidateStatus::Measured) {
        EXPECT_LE(w.stats.median, c.stats.median * (1.0 + o.tie.tolerance));
      }
    }
    if (budget <= 0.1) {
      EXPECT_TRUE(r.budget_exhausted);
      EXPECT_GT(count_status(r, CandidateStatus::NotMeasured), 0u);
      EXPECT_EQ(r.candidates[100].status, CandidateStatus::NotMeasured);
      EXPECT_NE(r.reason.find("budget exhausted with"), std::string::npos);
    }
    if (budget >= 10.0) {
      EXPECT_FALSE(r.budget_exhausted);
      EXPECT_EQ(count_status(r, CandidateStatus::NotMeasured), 0u);
      EXPECT_EQ(r.winner_index, 100u);
    }
  }
}

TEST(TunerSearch, BudgetSmallerThanOneCandidateStillMeasuresOne) {
  // The budget is only enforced once some candidate has a sample: the default is measured.
  std::vector<double> costs = {2.0, 1.0, 0.5};
  FakeMeasurer m(costs, 1);
  SearchOptions o = options_for(m);
  o.budget_s = 0.001;
  const SearchResult r = search(make_candidates(costs.size(), 0), m, o);
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.winner_index, 0u);
  EXPECT_TRUE(r.budget_exhausted);
  EXPECT_EQ(r.timings, 1u);
  EXPECT_EQ(count_status(r, CandidateStatus::NotMeasured), 2u);
  EXPECT_EQ(r.reason,
            "default is the only valid measured candidate; budget exhausted with 1 of 3 candidates measured");
}

// What dispatch answered before tuning (the incumbent) is visited right after the default, so a
// budget that ends early in the enumeration still measures it and the winner is never slower than
// it. Listed at its enumeration position instead (the order before), the same budget misses it.
TEST(TunerSearch, IncumbentIsVisitedSecondSoATightBudgetStillMeasuresIt) {
  std::vector<std::string> enumerated;
  for (std::size_t i = 0; i < 100; ++i) enumerated.push_back(name_of(i));
  const std::vector<Candidate> list = candidate_list(name_of(7), name_of(60), enumerated);
  ASSERT_EQ(list.size(), 100u);  // the default and the incumbent, also enumerated, are listed once
  EXPECT_EQ(list[0].text, name_of(7));
  EXPECT_EQ(list[1].text, name_of(60));
  EXPECT_EQ(list[2].text, name_of(0));
  EXPECT_EQ(std::count_if(list.begin(), list.end(), [](const Candidate& c) { return c.is_default; }), 1);
  EXPECT_TRUE(list[0].is_default);
  std::set<std::string> texts;
  for (const Candidate& c : list) texts.insert(c.text);
  EXPECT_EQ(texts.size(), list.size());
  // No incumbent, or the default itself: the default, then the enumeration.
  for (const std::string& none : {std::string(), name_of(7)}) {
    const std::vector<Candidate> plain = candidate_list(name_of(7), none, enumerated);
    ASSERT_EQ(plain.size(), 100u);
    EXPECT_EQ(plain[1].text, name_of(0));
  }

  // Costs by text: the default 2.0, the incumbent 1.0, the rest 1.5.
  const auto costs_of = [](const std::vector<Candidate>& l) {
    std::vector<double> costs;
    for (const Candidate& c : l) costs.push_back(c.text == name_of(7) ? 2.0 : c.text == name_of(60) ? 1.0 : 1.5);
    return costs;
  };
  std::vector<Candidate> before = candidate_list(name_of(7), "", enumerated);  // the incumbent at position 61
  for (const auto& [l, incumbent_measured] : {std::pair{list, true}, std::pair{before, false}}) {
    FakeMeasurer m(costs_of(l), 3, Noise::LogNormal, 0.01);
    SearchOptions o = options_for(m);
    o.budget_s = 0.03;  // a few candidates screened, far from all 100
    const SearchResult r = search(l, m, o);
    ASSERT_TRUE(r.found);
    EXPECT_TRUE(r.budget_exhausted);
    const double winner_cost = costs_of(l)[r.winner_index];
    if (incumbent_measured) {
      EXPECT_EQ(r.candidates[1].status, CandidateStatus::Measured) << r.reason;
      EXPECT_EQ(l[r.winner_index].text, name_of(60)) << r.reason;
    } else {
      EXPECT_GT(winner_cost, 1.0) << r.reason;  // why the incumbent goes first
    }
  }
}

TEST(TunerSearch, BudgetRunningOutMidRaceKeepsTheLeader) {
  // Enough to screen everything, not to finish racing the near-ties.
  std::vector<double> costs = {1.5, 1.0, 1.01, 1.02, 2.0, 2.5};
  FakeMeasurer m(costs, 11, Noise::LogNormal, 0.02);
  SearchOptions o = options_for(m);
  o.budget_s = 0.040;
  const SearchResult r = search(make_candidates(costs.size(), 0), m, o);
  EXPECT_TRUE(r.budget_exhausted);
  EXPECT_EQ(count_status(r, CandidateStatus::NotMeasured), 0u);
  ASSERT_TRUE(r.found);
  EXPECT_LE(costs[r.winner_index], 1.02);
  EXPECT_LE(r.elapsed_s, o.budget_s + m.max_call_ms / 1000.0 + 1e-12);
}

// ----------------------------------------------------------------------------- racing, order

TEST(TunerSearch, EarlyEliminationSavesMeasurements) {
  // Two close contenders, a slow default, 30 clear losers (>= 1.5x).
  std::vector<double> costs = {1.3, 1.0, 1.01};
  for (int k = 0; k < 30; ++k) costs.push_back(1.5 + 0.05 * k);
  int full_races = 0;
  for (int seed = 1; seed <= seed_count(); ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    FakeMeasurer m(costs, static_cast<uint64_t>(seed), Noise::LogNormal, 0.03);
    const SearchOptions o = options_for(m);
    const SearchResult r = search(make_candidates(costs.size(), 0), m, o);
    ASSERT_TRUE(r.found);
    EXPECT_LE(costs[r.winner_index], 1.01);
    for (std::size_t i = 3; i < costs.size(); ++i) {
      EXPECT_EQ(r.candidates[i].status, CandidateStatus::Eliminated) << i;
      EXPECT_LE(r.candidates[i].stats.count, static_cast<std::size_t>(o.min_samples)) << i;
    }
    // The contenders race on after the losers are gone (usually as near-ties up to tie_samples;
    // rarely noise separates them earlier, harmlessly); the default stays as reference.
    EXPECT_GT(r.candidates[1].stats.count, static_cast<std::size_t>(o.min_samples));
    EXPECT_GT(r.candidates[2].stats.count, static_cast<std::size_t>(o.min_samples));
    if (r.candidates[1].stats.count >= static_cast<std::size_t>(o.max_samples) &&
        r.candidates[2].stats.count >= static_cast<std::size_t>(o.max_samples))
      ++full_races;
    EXPECT_GE(r.candidates[0].stats.count, static_cast<std::size_t>(o.min_samples));
    // Far fewer timings than measuring everyone to max_samples.
    EXPECT_LT(r.timings, costs.size() * static_cast<std::size_t>(o.max_samples) / 2);
    EXPECT_EQ(r.timings,
              static_cast<std::size_t>(std::accumulate(m.time_calls.begin(), m.time_calls.end(), 0)));
    EXPECT_EQ(r.verifications, costs.size());
    EXPECT_EQ(r.candidates[5].describe(),
              "eliminated (round " + std::to_string(r.candidates[5].eliminated_round) + ")");
  }
  EXPECT_GE(full_races, seed_count() * 9 / 10);
}

TEST(TunerSearch, DefaultIsMeasuredFirstAndEliminatedLast) {
  std::vector<double> costs = {2.0, 1.0, 1.6, 2.5, 3.0, 1.8};
  const std::size_t def = 5;
  FakeMeasurer m(costs, 4, Noise::LogNormal, 0.02);
  const SearchResult r = search(make_candidates(costs.size(), def), m, options_for(m));
  EXPECT_EQ(r.winner_index, 1u);
  ASSERT_GE(m.calls.size(), 3u);
  EXPECT_EQ(m.calls[0], std::make_pair('v', def));
  EXPECT_EQ(m.calls[1], std::make_pair('w', def));
  EXPECT_EQ(m.calls[2], std::make_pair('t', def));
  int last_other = -1;
  for (std::size_t i = 0; i < costs.size(); ++i)
    if (i != def && r.candidates[i].status == CandidateStatus::Eliminated)
      last_other = std::max(last_other, r.candidates[i].eliminated_round);
  EXPECT_EQ(r.candidates[def].status, CandidateStatus::Eliminated);
  EXPECT_GE(r.candidates[def].eliminated_round, last_other);
  EXPECT_GE(r.candidates[def].stats.count, r.candidates[2].stats.count);
  EXPECT_NEAR(r.speedup_over_default, r.default_stats.median / r.winner_stats.median, 1e-12);
}

TEST(TunerSearch, RoundsInterleaveWithRotatingStart) {
  // Equal costs, no noise: all four are near-ties and race to tie_samples.
  std::vector<double> costs = {1.0, 1.0, 1.0, 1.0};
  FakeMeasurer m(costs, 1);
  const SearchOptions o = options_for(m);
  const SearchResult r = search(make_candidates(costs.size(), 2), m, o);
  const std::vector<std::size_t> t = m.time_order();
  ASSERT_EQ(t.size(), 4u * static_cast<std::size_t>(o.tie_samples));
  EXPECT_EQ(r.rounds, o.tie_samples);
  // Round 0 visits the default first, then the enumeration order.
  EXPECT_EQ(std::vector<std::size_t>(t.begin(), t.begin() + 4), (std::vector<std::size_t>{2, 0, 1, 3}));
  const std::vector<std::size_t> visit = {2, 0, 1, 3};
  for (std::size_t round = 1; round < static_cast<std::size_t>(o.tie_samples); ++round) {
    for (std::size_t k = 0; k < 4; ++k)
      EXPECT_EQ(t[round * 4 + k], visit[(round + k) % 4]) << "round " << round;
  }
  // Exact tie: by text cand_000 is the best, but the default ties with it and is kept.
  EXPECT_EQ(r.winner_index, 2u);
  EXPECT_TRUE(r.kept_default_on_tie);
  EXPECT_EQ(r.runner_up, "cand_000");
}

TEST(TunerSearch, ExactTiesBrokenByText) {
  const std::vector<std::string> texts = {"default", "zeta", "alpha", "mid"};
  const std::vector<double> cost_of = {1.0, 0.8, 0.8, 0.9};
  for (const std::vector<std::size_t>& perm :
       {std::vector<std::size_t>{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 0, 3, 2}}) {
    std::vector<Candidate> c;
    std::vector<double> costs;
    for (std::size_t k : perm) {
      c.push_back({texts[k], k == 0});
      costs.push_back(cost_of[k]);
    }
    FakeMeasurer m(costs, 1);
    const SearchResult r = search(c, m, options_for(m));
    EXPECT_EQ(r.winner, "alpha");
    EXPECT_EQ(r.runner_up, "zeta");
    EXPECT_EQ(r.reason, "fastest by 25.0% over default");
  }
}

TEST(TunerSearch, DeterministicForSameSeed) {
  const Landscape l = spread_landscape(77);
  auto run = [&](int threads) {
    FakeMeasurer m(l.costs, 77, Noise::LogNormal, 0.03);
    m.wrong[4] = "wrong";
    m.time_throws[7] = {2, "boom"};
    SearchOptions o = options_for(m, threads);
    o.budget_s = 0.2;
    SearchResult r = search(make_candidates(l.costs.size(), l.def), m, o);
    return std::make_pair(r, m.calls);
  };
  const auto [a, calls_a] = run(0);
  for (int threads : {0, 1, 3}) {
    const auto [b, calls_b] = run(threads);
    EXPECT_EQ(calls_a, calls_b);
    EXPECT_EQ(a.winner, b.winner);
    EXPECT_EQ(a.runner_up, b.runner_up);
    EXPECT_EQ(a.reason, b.reason);
    EXPECT_EQ(a.timings, b.timings);
    EXPECT_EQ(a.rounds, b.rounds);
    EXPECT_EQ(a.elapsed_s, b.elapsed_s);
    EXPECT_EQ(a.budget_exhausted, b.budget_exhausted);
    ASSERT_EQ(a.candidates.size(), b.candidates.size());
    for (std::size_t i = 0; i < a.candidates.size(); ++i) {
      EXPECT_EQ(a.candidates[i].status, b.candidates[i].status);
      EXPECT_EQ(a.candidates[i].samples, b.candidates[i].samples);
      EXPECT_EQ(a.candidates[i].eliminated_round, b.candidates[i].eliminated_round);
      EXPECT_EQ(a.candidates[i].failure, b.candidates[i].failure);
    }
  }
}

// ---------------------------------------------------------------------------- prepare threads

TEST(TunerSearch, PrepareRunsAheadOnThreads) {
  const std::size_t n = 24;
  std::vector<double> costs(n);
  for (std::size_t i = 0; i < n; ++i) costs[i] = 1.0 + 0.1 * static_cast<double>((i * 7) % n);
  FakeMeasurer m(costs, 3);
  m.prepare_sleep_ms = 1.0;
  m.verify_sleep_ms = 1.0;
  m.meet = {1, 2};  // visiting positions 1 and 2 (the default is 0)
  SearchOptions o = options_for(m, 3);
  o.prepare_ahead = 6;
  const SearchResult r = search(make_candidates(n, 0), m, o);
  ASSERT_TRUE(r.found);
  EXPECT_EQ(m.violations, 0);  // verify/warmup/time never before their prepare returned
  EXPECT_EQ(r.prepares, n);
  EXPECT_GE(m.max_inside.load(), 2);  // prepares really ran concurrently
  std::set<std::thread::id> ids;
  for (const auto& [i, id] : m.prepare_thread) {
    EXPECT_NE(id, std::this_thread::get_id());
    ids.insert(id);
  }
  EXPECT_GE(ids.size(), 2u);
  // Every verify started after its prepare finished; most prepares started before the previous
  // candidate's verify finished (they run ahead of the measurement).
  std::size_t ahead = 0;
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(m.prepare_end.count(i) && m.verify_end.count(i));
    EXPECT_LE(m.prepare_end[i], m.verify_end[i]);
    if (i >= 1 && m.prepare_start[i] < m.verify_end[i - 1]) ++ahead;
  }
  EXPECT_GE(ahead, n / 2);
}

TEST(TunerSearch, PrepareInlineWithoutThreads) {
  std::vector<double> costs = {1.0, 0.9, 1.1};
  FakeMeasurer m(costs, 3);
  const SearchResult r = search(make_candidates(costs.size(), 0), m, options_for(m, 0));
  EXPECT_EQ(m.violations, 0);
  EXPECT_EQ(r.prepares, 3u);
  for (const auto& [i, id] : m.prepare_thread) EXPECT_EQ(id, std::this_thread::get_id());
  EXPECT_EQ(r.winner_index, 1u);
}

// The compile share: inline, every prepare's time is time the race waits, to the fake clock's tick.
TEST(TunerSearch, InlinePreparesAreAllWaitedFor) {
  std::vector<double> costs = {1.0, 0.9, 1.1, 1.3};
  FakeMeasurer m(costs, 3);
  m.prepare_cost_ms = 40.0;
  const SearchResult r = search(make_candidates(costs.size(), 0), m, options_for(m, 0));
  ASSERT_TRUE(r.found);
  EXPECT_NEAR(r.prepare_wait_s, 4 * 0.040, 1e-12);
  EXPECT_NEAR(r.elapsed_s, m.now_ms / 1000.0, 1e-12);
  EXPECT_GT(r.elapsed_s, r.prepare_wait_s);  // the measurements are the rest
}

// On threads the compiles run ahead while earlier candidates are measured, so the race waits for
// far less than their sum (real sleeps, real clock: bounds with a wide margin).
TEST(TunerSearch, PreparesAheadAreMostlyNotWaitedFor) {
  const std::size_t n = 8;
  const auto waited = [&](int threads) {
    FakeMeasurer m(std::vector<double>(n, 1.0), 3);
    m.prepare_sleep_ms = 30.0;
    m.verify_sleep_ms = 30.0;
    SearchOptions o = options_for(m, threads);
    o.clock = nullptr;  // the steady clock: the sleeps are the time
    const SearchResult r = search(make_candidates(n, 0), m, o);
    EXPECT_TRUE(r.found);
    EXPECT_LE(r.prepare_wait_s, r.elapsed_s);
    return r.prepare_wait_s;
  };
  const double inline_s = waited(0), ahead_s = waited(3);
  EXPECT_GE(inline_s, n * 0.030 * 0.9);  // every sleep, waited for in turn
  EXPECT_GE(ahead_s, 0.030 * 0.5);       // the default's compile, nothing ran ahead of it
  EXPECT_LT(ahead_s, 0.5 * inline_s);
}

TEST(TunerSearch, CompileThreadsFromTheEnvironment) {
  const char* saved = std::getenv("DFGNN_TUNE_COMPILE_THREADS");
  const std::string keep = saved != nullptr ? saved : "";
  unsetenv("DFGNN_TUNE_COMPILE_THREADS");
  const int cores = compile_threads();
  EXPECT_GE(cores, 1);
  EXPECT_LE(cores, 8);
  for (const auto& [text, want] : std::vector<std::pair<const char*, int>>{{"0", 0}, {"3", 3}, {"64", 64}}) {
    setenv("DFGNN_TUNE_COMPILE_THREADS", text, 1);
    EXPECT_EQ(compile_threads(), want) << text;
  }
  for (const char* bad : {"-1", "65", "2.5", "two", "", "4 threads"}) {  // logged, then the default
    setenv("DFGNN_TUNE_COMPILE_THREADS", bad, 1);
    EXPECT_EQ(compile_threads(), cores) << "'" << bad << "'";
  }
  if (saved != nullptr) setenv("DFGNN_TUNE_COMPILE_THREADS", keep.c_str(), 1);
  else unsetenv("DFGNN_TUNE_COMPILE_THREADS");
}

// One winner policy: the database, recomputing a problem's winner from the statistics the tuner
// stores (tuner/src/tune.cpp: every timed, non-failed candidate), picks the tuner's winner. Over
// noisy landscapes with near-ties of the default, clear winners and budget-cut searches.
TEST(TunerSearch, DatabaseRecomputesTheTunersWinner) {
  EXPECT_EQ(SearchOptions{}.tie.tolerance, db::WinnerPolicy{}.tie.tolerance);
  EXPECT_EQ(SearchOptions{}.tie.z, db::WinnerPolicy{}.tie.z);
  EXPECT_EQ(SearchOptions{}.tie.noise_floor, db::WinnerPolicy{}.tie.noise_floor);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("dfgnn-winner-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto database = db::TuningDb::open_user(dir / "t.db");
  int kept = 0, beaten = 0, budget_cut = 0;
  for (int seed = 1; seed <= 3 * seed_count(); ++seed) {
    std::mt19937_64 rng(static_cast<uint64_t>(seed));
    // The default at 1.0; others 0.95..1.3 (many within the tie band), a few clearly faster.
    std::vector<double> costs(12);
    for (double& c : costs) c = 0.95 + 0.35 * std::uniform_real_distribution<double>(0, 1)(rng);
    costs[0] = 1.0;
    if (seed % 3 == 0) costs[5] = 0.8;
    FakeMeasurer m(costs, static_cast<uint64_t>(seed) + 7, Noise::LogNormal, seed % 2 ? 0.01 : 0.04);
    SearchOptions o = options_for(m);
    if (seed % 4 == 0) o.budget_s = 0.02;  // a few milliseconds of fake time: stops mid-race
    const SearchResult r = search(make_candidates(costs.size(), 0), m, o);
    ASSERT_TRUE(r.found);
    db::TuningRun run;
    run.environment = db::EnvironmentInfo{"Test GPU", 90, 132, 0, 0, "0.0.0", "hash"};
    run.op = db::OpKey{0, 0, 1, 64, 0, seed};  // one problem per seed
    dfgnn_fingerprint_t fp{};
    fp.version = DFGNN_FINGERPRINT_VERSION;
    fp.num_nodes = 100;
    fp.num_edges = 400;
    fp.mean_degree = 4;
    run.fingerprint = dfgnn::db_fingerprint(fp);
    run.default_schedule = r.default_text;
    for (const CandidateRecord& c : r.candidates)
      if (!c.samples.empty() && c.status != CandidateStatus::Failed)
        run.candidates.push_back(db::summarize_samples(c.text, 1, c.samples));
    const std::optional<db::TuningResult> stored = database->put_result(run);
    ASSERT_TRUE(stored.has_value());
    EXPECT_EQ(stored->schedule, r.winner) << "seed " << seed << ": tuner: " << r.reason;
    kept += r.kept_default_on_tie;
    beaten += r.winner_index != 0;
    budget_cut += r.budget_exhausted;
  }
  // The landscapes exercised both outcomes and cut searches.
  EXPECT_GT(kept, 0);
  EXPECT_GT(beaten, 0);
  EXPECT_GT(budget_cut, 0);
  database.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dfgnn::tuner
