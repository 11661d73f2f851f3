#include "stats.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace dfgnn::tuner {

double Stats::relative_spread() const {
  if (count < 3 || !(median > 0.0)) return 0.0;
  return spread / median;
}

double median_of(std::vector<double> values) {
  const std::size_t n = values.size();
  if (n == 0) return 0.0;
  const auto mid = values.begin() + static_cast<std::ptrdiff_t>(n / 2);
  std::nth_element(values.begin(), mid, values.end());
  const double upper = *mid;
  if (n % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), mid);
  return lower + (upper - lower) / 2.0;
}

double mad_of(const std::vector<double>& values, double center) {
  std::vector<double> dev;
  dev.reserve(values.size());
  for (double v : values) dev.push_back(std::fabs(v - center));
  return median_of(std::move(dev));
}

void append_pair_differences(const std::vector<double>& values, double scale, std::vector<double>& out) {
  for (std::size_t j = 0; j < values.size(); ++j)
    for (std::size_t k = j + 1; k < values.size(); ++k)
      out.push_back(std::fabs(values[j] - values[k]) / scale);
}

double SampleStats::pooled_relative_spread(const std::vector<const SampleStats*>& sets) {
  std::vector<double> diffs;
  for (const SampleStats* s : sets) {
    if (s->count() < 2) continue;
    const double m = s->median();
    if (m > 0.0) append_pair_differences(s->samples(), m, diffs);
  }
  return kPairToSigma * median_of(std::move(diffs));
}

void SampleStats::add(double x) {
  samples_.push_back(x);
  const double n = static_cast<double>(samples_.size());
  if (samples_.size() == 1) {
    min_ = max_ = mean_ = x;
    m2_ = 0.0;
    return;
  }
  const double delta = x - mean_;
  mean_ += delta / n;
  m2_ += delta * (x - mean_);
  min_ = std::min(min_, x);
  max_ = std::max(max_, x);
}

double SampleStats::variance() const {
  return samples_.size() < 2 ? 0.0 : m2_ / static_cast<double>(samples_.size() - 1);
}

Stats SampleStats::summary() const {
  Stats s;
  s.count = samples_.size();
  if (s.count == 0) return s;
  s.median = median_of(samples_);
  s.mean = mean_;
  s.variance = variance();
  s.stddev = std::sqrt(s.variance);
  s.min = min_;
  s.max = max_;
  s.mad = mad_of(samples_, s.median);
  std::vector<double> diffs;
  append_pair_differences(samples_, 1.0, diffs);
  s.spread = kPairToSigma * median_of(std::move(diffs));
  return s;
}

}  // namespace dfgnn::tuner
