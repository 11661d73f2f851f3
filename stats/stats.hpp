// dfgnn's one statistics module: sample statistics and the winner policy, shared by the tuner (its
// racing and its decision), the tuning database (pooling runs, recomputing a problem's winner),
// nearest-fingerprint dispatch (which schedules tie with a tuned graph's best) and the benchmarks.
//
// Header-only and standard library only, so the database (below the runtime) and the tools (which
// see only the public library) can include it without linking anything or reaching into runtime/.
//
// THE WINNER POLICY ("best, keeping the default within the noise band")
// Each candidate is summarised by moments (count, mean, M2 as in Welford's update, min) and its
// median: what the database stores per run, so a winner recomputed from stored statistics is the
// one the tuner chose from its samples.
//   relative s.d. r(c) = s.d. / median (with >= 3 samples; else 0), and the pooled spread is the
//       median of the candidates' r (a hiccup in one candidate does not move it);
//   se(a, b) = 1.2533 sqrt(ra^2 / na + rb^2 / nb), r = max(noise_floor, pooled, own): the standard
//       error of the relative difference of two medians (1.2533 / sqrt(n) sigma for a median of n);
//   a is tied with b when median_a <= median_b (1 + tolerance + z se(a, b));
//   best = the lowest median (exact ties: the smaller name); the winner is the default when it is
//       tied with the best, else the best.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace dfgnn::stats {

// ------------------------------------------------------------------ order statistics

// Median of the values (mean of the two middle ones for an even count); 0 for none.
inline double median_of(std::vector<double> values) {
  const std::size_t n = values.size();
  if (n == 0) return 0.0;
  const auto mid = values.begin() + static_cast<std::ptrdiff_t>(n / 2);
  std::nth_element(values.begin(), mid, values.end());
  const double upper = *mid;
  if (n % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), mid);
  return lower + (upper - lower) / 2.0;
}

// Nearest-rank quantile: the ceil(q n)-th smallest value (the smallest for q <= 0); 0 for none.
inline double quantile_of(std::vector<double> values, double q) {
  const std::size_t n = values.size();
  if (n == 0) return 0.0;
  const double rank = std::ceil(q * static_cast<double>(n));
  const std::size_t k = rank <= 1.0 ? 0 : std::min(n, static_cast<std::size_t>(rank)) - 1;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k), values.end());
  return values[k];
}

// Median absolute deviation of the values from `center`; 0 for none.
inline double mad_of(const std::vector<double>& values, double center) {
  std::vector<double> dev;
  dev.reserve(values.size());
  for (double v : values) dev.push_back(std::fabs(v - center));
  return median_of(std::move(dev));
}

// Appends |x_j - x_k| / scale for every pair j < k of the values.
inline void append_pair_differences(const std::vector<double>& values, double scale, std::vector<double>& out) {
  for (std::size_t j = 0; j < values.size(); ++j)
    for (std::size_t k = j + 1; k < values.size(); ++k) out.push_back(std::fabs(values[j] - values[k]) / scale);
}

// ------------------------------------------------------------------ moments

// Summary of a sample set: Welford moments and the median. All 0 for no samples.
struct Summary {
  int64_t count = 0;
  double mean = 0.0;
  double m2 = 0.0;  // sum of squared deviations from the mean
  double min = 0.0;
  double median = 0.0;

  // Unbiased sample variance; 0 below two samples.
  double variance() const { return count > 1 ? m2 / static_cast<double>(count - 1) : 0.0; }
  // s.d. / median with at least 3 samples and a positive median, else 0 (too few to judge).
  double relative_stddev() const { return count >= 3 && median > 0.0 ? std::sqrt(variance()) / median : 0.0; }

  // Welford's update; the median is not maintained (see summarize).
  void add(double x) {
    ++count;
    if (count == 1) {
      mean = min = x;
      m2 = 0.0;
      return;
    }
    const double delta = x - mean;
    mean += delta / static_cast<double>(count);
    m2 += delta * (x - mean);
    min = std::min(min, x);
  }
  // Pools another sample set's moments into this one exactly (Chan et al.); the median is the
  // caller's to choose (it cannot be pooled from summaries).
  void pool(const Summary& other) {
    if (other.count == 0) return;
    if (count == 0) {
      *this = other;
      return;
    }
    const double na = static_cast<double>(count), nb = static_cast<double>(other.count), n = na + nb;
    const double delta = other.mean - mean;
    mean += delta * nb / n;
    m2 += other.m2 + delta * delta * na * nb / n;
    count += other.count;
    min = std::min(min, other.min);
  }
};

inline Summary summarize(const std::vector<double>& samples) {
  Summary s;
  for (double x : samples) s.add(x);
  s.median = median_of(samples);
  return s;
}

// ------------------------------------------------------------------ robust spreads (the tuner's racing)
// Every sample is kept (medians and MADs are exact); the mean and variance are Welford's.

// Scale that turns a median absolute deviation into a standard-deviation estimate for normal
// data (1 / Phi^-1(3/4)).
inline constexpr double kMadToSigma = 1.4826;
// Scale that turns the median of pairwise absolute differences |x_j - x_k| into a standard
// deviation estimate for normal data (1 / (sqrt(2) Phi^-1(3/4))). Unlike the MAD, which is
// strongly biased low for a handful of samples (one deviation of three is zero), pairwise
// differences need no fitted centre, so the estimate is unbiased at any count and, pooled over
// candidates, robust to outliers.
inline constexpr double kPairToSigma = 1.0483580825;

// A snapshot of a sample set, plain data. All fields are 0 when count == 0; variance is the
// unbiased sample variance (0 when count == 1).
struct Stats {
  std::size_t count = 0;
  double median = 0.0;
  double mean = 0.0;
  double variance = 0.0;
  double stddev = 0.0;
  double min = 0.0;
  double max = 0.0;
  double mad = 0.0;     // median absolute deviation from the median (unscaled)
  double spread = 0.0;  // robust standard deviation: kPairToSigma * median |x_j - x_k|

  // Robust relative spread, spread / median; 0 with fewer than 3 samples or a non-positive median.
  double relative_pair_spread() const { return count < 3 || !(median > 0.0) ? 0.0 : spread / median; }
};

// Accumulates samples: Welford moments plus the samples themselves.
class SampleStats {
 public:
  void add(double x) {
    samples_.push_back(x);
    moments_.add(x);
    max_ = samples_.size() == 1 ? x : std::max(max_, x);
  }

  std::size_t count() const { return samples_.size(); }
  bool empty() const { return samples_.empty(); }
  double mean() const { return moments_.mean; }
  double variance() const { return moments_.variance(); }
  double min() const { return moments_.min; }
  double max() const { return max_; }
  double median() const { return median_of(samples_); }
  const std::vector<double>& samples() const { return samples_; }

  // Moments and median: what the database stores and the winner policy reads.
  Summary moments() const {
    Summary s = moments_;
    s.median = median();
    return s;
  }

  Stats summary() const {
    Stats s;
    s.count = samples_.size();
    if (s.count == 0) return s;
    s.median = median_of(samples_);
    s.mean = moments_.mean;
    s.variance = variance();
    s.stddev = std::sqrt(s.variance);
    s.min = moments_.min;
    s.max = max_;
    s.mad = mad_of(samples_, s.median);
    std::vector<double> diffs;
    append_pair_differences(samples_, 1.0, diffs);
    s.spread = kPairToSigma * median_of(std::move(diffs));
    return s;
  }

  // Pooled robust relative spread of several sample sets (each scaled by its own median):
  // kPairToSigma * the median of all within-set relative pairwise differences. Sets with fewer
  // than 2 samples contribute nothing; 0 when no set does.
  static double pooled_pair_spread(const std::vector<const SampleStats*>& sets) {
    std::vector<double> diffs;
    for (const SampleStats* s : sets) {
      if (s->count() < 2) continue;
      const double m = s->median();
      if (m > 0.0) append_pair_differences(s->samples(), m, diffs);
    }
    return kPairToSigma * median_of(std::move(diffs));
  }

 private:
  std::vector<double> samples_;
  Summary moments_;
  double max_ = 0.0;
};

// ------------------------------------------------------------------ the winner policy

struct TiePolicy {
  double tolerance = 0.02;    // relative: medians within it (+ z standard errors) tie
  double z = 1.0;             // standard errors added to the tolerance
  double noise_floor = 0.005;  // lower bound on the relative spread assumed
};

// Median of the candidates' relative standard deviations (those with >= 3 samples); 0 when none has.
inline double median_relative_stddev(std::span<const Summary> candidates) {
  std::vector<double> r;
  for (const Summary& c : candidates)
    if (c.count >= 3 && c.median > 0.0) r.push_back(c.relative_stddev());
  return median_of(std::move(r));
}

// Standard error of the relative difference of two medians of na and nb samples whose relative
// spreads are ra and rb, each raised to `floor` first (a few samples can look accidentally tight).
// The spreads' estimator is the caller's: the two overloads below.
inline double median_difference_se(double ra, double na, double rb, double nb, double floor) {
  constexpr double kMedianEfficiency = 1.2533141373155003;  // sqrt(pi / 2)
  ra = std::max(floor, ra);
  rb = std::max(floor, rb);
  na = std::max(1.0, na);
  nb = std::max(1.0, nb);
  return kMedianEfficiency * std::sqrt(ra * ra / na + rb * rb / nb);
}

// From stored moments (relative standard deviations): the winner policy's, which the database can
// recompute. `pooled` is median_relative_stddev of all candidates.
inline double median_difference_se(const Summary& a, const Summary& b, double pooled, const TiePolicy& p) {
  return median_difference_se(a.relative_stddev(), static_cast<double>(a.count), b.relative_stddev(),
                              static_cast<double>(b.count), std::max(p.noise_floor, pooled));
}

// From kept samples (robust pairwise spreads): the tuner's racing, which has every sample. `pooled`
// is SampleStats::pooled_pair_spread of all measured candidates.
inline double median_difference_se(const Stats& a, const Stats& b, double pooled, const TiePolicy& p) {
  return median_difference_se(a.relative_pair_spread(), static_cast<double>(a.count), b.relative_pair_spread(),
                              static_cast<double>(b.count), std::max(p.noise_floor, pooled));
}

// tolerance + z se: within it (relative), `candidate` is tied with `best`.
inline double tie_margin(const Summary& candidate, const Summary& best, double pooled, const TiePolicy& p) {
  return p.tolerance + p.z * median_difference_se(candidate, best, pooled, p);
}

inline bool tied(const Summary& candidate, const Summary& best, double pooled, const TiePolicy& p) {
  return candidate.median <= best.median * (1.0 + tie_margin(candidate, best, pooled, p));
}

struct Named {
  std::string_view name;
  Summary summary;
};

struct Choice {
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::size_t best = npos;    // lowest median, exact ties by the smaller name
  std::size_t winner = npos;  // the default if tied with best, else best
  bool kept_default = false;  // the default won because it tied with a faster best
  double pooled_spread = 0.0;
};

// The policy above over `candidates` (each with count >= 1); default_index may be npos (no
// default among them). Empty input: both npos.
inline Choice choose_winner(std::span<const Named> candidates, std::size_t default_index, const TiePolicy& p = {}) {
  Choice c;
  std::vector<Summary> all;
  all.reserve(candidates.size());
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    all.push_back(candidates[i].summary);
    const Named& x = candidates[i];
    if (c.best == Choice::npos) {
      c.best = i;
      continue;
    }
    const Named& b = candidates[c.best];
    if (x.summary.median < b.summary.median || (x.summary.median == b.summary.median && x.name < b.name)) c.best = i;
  }
  if (c.best == Choice::npos) return c;
  c.pooled_spread = median_relative_stddev(all);
  c.winner = c.best;
  if (default_index < candidates.size() && default_index != c.best &&
      tied(candidates[default_index].summary, candidates[c.best].summary, c.pooled_spread, p)) {
    c.winner = default_index;
    c.kept_default = true;
  }
  return c;
}

}  // namespace dfgnn::stats
