// Per-candidate timing statistics for the tuner: every sample is kept (medians and MADs are
// exact, and the database can pool raw samples), and the mean and variance are accumulated with
// Welford's update so they stay accurate over long runs. Standard library only.
#pragma once

#include <cstddef>
#include <vector>

namespace dfgnn::tuner {

// Scale that turns a median absolute deviation into a standard-deviation estimate for normal
// data (1 / Phi^-1(3/4)).
inline constexpr double kMadToSigma = 1.4826;
// Scale that turns the median of pairwise absolute differences |x_j - x_k| into a standard
// deviation estimate for normal data (1 / (sqrt(2) Phi^-1(3/4))). Unlike the MAD, which is
// strongly biased low for a handful of samples (one deviation of three is zero), pairwise
// differences need no fitted centre, so the estimate is unbiased at any count and, pooled over
// candidates, robust to outliers.
inline constexpr double kPairToSigma = 1.0483580825;

// A snapshot of a sample set, plain data (what results and database rows carry). All fields are
// 0 when count == 0; variance is the unbiased sample variance (0 when count == 1).
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

  // Robust relative spread, spread / median; 0 with fewer than 3 samples or a non-positive
  // median.
  double relative_spread() const;
};

// Median of the values (mean of the two middle ones for an even count); 0 for none.
double median_of(std::vector<double> values);
// Median absolute deviation of the values from `center`; 0 for none.
double mad_of(const std::vector<double>& values, double center);
// Appends |x_j - x_k| / scale for every pair j < k of the values.
void append_pair_differences(const std::vector<double>& values, double scale, std::vector<double>& out);

// Accumulates samples: Welford running mean / M2 / min / max plus the samples themselves.
class SampleStats {
 public:
  void add(double x);

  std::size_t count() const { return samples_.size(); }
  bool empty() const { return samples_.empty(); }
  double mean() const { return mean_; }
  double variance() const;  // unbiased (n - 1); 0 below two samples
  double min() const { return min_; }
  double max() const { return max_; }
  double median() const { return median_of(samples_); }
  const std::vector<double>& samples() const { return samples_; }

  Stats summary() const;

  // Pooled robust relative spread of several sample sets (each scaled by its own median):
  // kPairToSigma * the median of all within-set relative pairwise differences. Sets with fewer
  // than 2 samples contribute nothing; 0 when no set does.
  static double pooled_relative_spread(const std::vector<const SampleStats*>& sets);

 private:
  std::vector<double> samples_;
  double mean_ = 0.0;
  double m2_ = 0.0;
  double min_ = 0.0;
  double max_ = 0.0;
};

}  // namespace dfgnn::tuner
