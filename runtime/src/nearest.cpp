#include "nearest.hpp"

#include "stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <utility>

namespace dfgnn {

namespace {

const db::CandidateStat* best_of(const TunedNeighbour& n) {
  const db::CandidateStat* best = nullptr;
  for (const db::CandidateStat& c : n.candidates)
    if (c.median_ms > 0 && (best == nullptr || c.median_ms < best->median_ms)) best = &c;
  return best;
}

}  // namespace

std::set<std::string> eligible_schedules(const TunedNeighbour& nearest, const stats::TiePolicy& tie) {
  std::set<std::string> eligible{nearest.winner};
  if (const db::CandidateStat* best = best_of(nearest))
    for (const db::CandidateStat& c : nearest.candidates)
      if (c.median_ms > 0 && stats::tied(c.summary(), best->summary(), nearest.pooled_spread, tie))
        eligible.insert(c.schedule);
  return eligible;
}

NearestRanking rank_nearest(const std::vector<TunedNeighbour>& neighbours, double radius, const stats::TiePolicy& tie) {
  NearestRanking out;
  if (neighbours.empty() || !(neighbours.front().distance <= radius)) return out;
  const TunedNeighbour& nearest = neighbours.front();
  const std::set<std::string> eligible = eligible_schedules(nearest, tie);

  std::map<std::string, std::pair<double, double>> votes;  // schedule -> (sum of w * slowdown, sum of w)
  for (const TunedNeighbour& n : neighbours) {
    const db::CandidateStat* best = best_of(n);
    if (best == nullptr) continue;
    const double w = radius > 0 ? std::exp(-n.distance / radius) : 1.0;
    bool voted = false;
    for (const db::CandidateStat& c : n.candidates) {
      if (c.median_ms <= 0 || !eligible.contains(c.schedule)) continue;
      auto& v = votes[c.schedule];
      v.first += w * c.median_ms / best->median_ms;
      v.second += w;
      voted = true;
    }
    out.voters += voted;
  }
  if (out.voters <= 1) {
    out.schedules = {nearest.winner};  // no one to break its tie: the tuner's choice
    return out;
  }
  std::vector<std::pair<double, std::string>> ranked;
  for (const std::string& s : eligible) {
    const auto it = votes.find(s);
    ranked.emplace_back(it == votes.end() || it->second.second <= 0 ? std::numeric_limits<double>::infinity()
                                                                    : it->second.first / it->second.second,
                        s);
  }
  std::sort(ranked.begin(), ranked.end());
  for (auto& [score, s] : ranked) out.schedules.push_back(std::move(s));
  return out;
}

}  // namespace dfgnn
