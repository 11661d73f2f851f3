// Nearest-fingerprint reuse: which schedules a graph with no tuning result of its own takes from
// the tuned graphs around it. Pure (no database, no GPU), so that tools/calibrate_nearest.py's
// replay of it can be checked against it (tests/cpu/test_nearest.cpp).
#pragma once

#include "stats.hpp"
#include "tuning_db.hpp"

#include <set>
#include <string>
#include <vector>

namespace dfgnn {

// A tuned graph of the same op and GPU class near the graph to serve.
struct TunedNeighbour {
  double distance = 0;                        // fingerprint_distance to the graph served
  std::string winner;                         // its stored winner
  std::vector<db::CandidateStat> candidates;  // every schedule it measured (pooled statistics)
  double pooled_spread = 0;                   // stats::median_relative_stddev of all of them
};

struct NearestRanking {
  std::vector<std::string> schedules;  // to try in order (the first usable one answers); empty: none
  int voters = 0;                      // neighbours that rated an eligible schedule
};

// The schedules the nearest graph offers to the vote: its winner, and those it measured tied with its
// best (by stats::tied in the band `tie`: the database's winner policy).
std::set<std::string> eligible_schedules(const TunedNeighbour& nearest, const stats::TiePolicy& tie);

// The rule. `neighbours` holds the tuned graphs within vote_radius, nearest first. No answer unless
// the nearest lies within `radius`. Its winner and the schedules it measured tied with its best
// (by stats::tied in the band `tie`: the database's winner policy) are eligible. Every neighbour rates the eligible schedules
// it measured by their slowdown over its own best, weighted by exp(-distance / radius); the lowest
// weighted mean comes first (ties: the text). With a single voter the nearest graph's winner
// stands alone. A clear winner of the nearest graph (nothing tied with it) is never overridden.
NearestRanking rank_nearest(const std::vector<TunedNeighbour>& neighbours, double radius, const stats::TiePolicy& tie);

}  // namespace dfgnn
