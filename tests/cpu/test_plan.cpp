// Plans (make_plan): hand-worked work lists for each solver, a coverage property on random graphs
// (every row is processed exactly once, split rows tile their edge range), and the plan cache of
// get_plan (CSR for the forward and row pass, CSC for the column pass).
#include "test_util.hpp"

#include <gtest/gtest-spi.h>

#include "graph.hpp"
#include "plan.hpp"
#include "schedule.hpp"

#include <algorithm>
#include <map>
#include <random>
#include <vector>

using dfgnn::HostPlan;
using dfgnn::Schedule;
using dfgnn::Segment;
using dfgnn::SolverId;

namespace {

// A graph whose row i has degrees[i] in-edges (sources i+1, i+2, ... mod n), built from explicit CSR.
std::unique_ptr<dfgnn::Graph> graph_with_degrees(const std::vector<int32_t>& degrees) {
  const auto n = static_cast<int32_t>(degrees.size());
  std::vector<int32_t> ptr{0}, col;
  for (int32_t i = 0; i < n; ++i) {
    for (int32_t k = 0; k < degrees[i]; ++k) col.push_back((i + 1 + k) % n);
    ptr.push_back(static_cast<int32_t>(col.size()));
  }
  return dfgnn::Graph::from_csr(n, static_cast<int64_t>(col.size()), ptr.data(), col.data(), DFGNN_INDEX_INT32,
                                dfgnnGraphDefaultOptions());
}

Schedule subwarp(int lanes) {
  Schedule s;
  s.solver = SolverId::Subwarp;
  s.lanes = lanes;
  s.groups = 256 / lanes;
  return s;
}

Schedule hub_split(int lanes, int threshold, int chunk) {
  Schedule s = subwarp(lanes);
  s.solver = SolverId::HubSplit;
  s.threshold = threshold;
  s.chunk = chunk;
  return s;
}

Schedule hybrid(int lanes, int mid, int threshold, int chunk) {
  Schedule s = hub_split(lanes, threshold, chunk);
  s.solver = SolverId::Hybrid;
  s.mid = mid;
  return s;
}

// Checks the invariants every plan satisfies on a structure; returns a failure description or "".
// - every row is processed once: by one whole-row segment (begin = ptr[i], end = ptr[i+1],
//   slot -1), or by chunks that tile [ptr[i], ptr[i+1]) in order with consecutive slots;
// - hubs entries name exactly the split rows (node, first slot, count), slots 0..num_slots-1 once;
// - chunks have 1..chunk edges; in every part, chunks come before whole rows;
// - hub_split: rows >= threshold are split; hybrid: small bin = degree < mid (lanes of the
//   schedule), warp bin = rest (32 lanes), split rows = degree >= threshold, in the warp part.
void check_plan(const dfgnn::Compressed& c, const Schedule& s, const HostPlan& plan) {
  const int32_t n = c.num_rows;
  if (s.solver == SolverId::Subwarp || s.solver == SolverId::BlockRow) {
    ASSERT_EQ(plan.parts.size(), 1u);
    EXPECT_TRUE(plan.parts[0].whole_rows);
    EXPECT_EQ(plan.parts[0].lanes, s.lanes);
    EXPECT_TRUE(plan.parts[0].segments.empty());
    EXPECT_TRUE(plan.hubs.empty());
    EXPECT_EQ(plan.num_slots, 0);
    return;
  }
  std::vector<int> whole(n, 0);
  std::map<int32_t, std::vector<Segment>> chunks;  // node -> its chunks in list order
  std::vector<int> slot_seen(std::max(plan.num_slots, 0), 0);
  if (s.solver == SolverId::HubSplit) EXPECT_EQ(plan.parts.size(), 1u);
  if (s.solver == SolverId::Hybrid) {
    EXPECT_LE(plan.parts.size(), 2u);
    if (plan.parts.size() == 2) {
      EXPECT_EQ(plan.parts[0].lanes, s.lanes) << "small bin first";
      EXPECT_EQ(plan.parts[1].lanes, 32) << "warp bin second";
    }
  }
  for (size_t k = 0; k < plan.parts.size(); ++k) {
    const HostPlan::Part& part = plan.parts[k];
    SCOPED_TRACE("part " + std::to_string(k));
    EXPECT_FALSE(part.whole_rows);
    EXPECT_FALSE(part.segments.empty()) << "empty parts are not launched";
    bool seen_whole = false;
    for (const Segment& seg : part.segments) {
      const auto [node, begin, end, slot] = seg;
      ASSERT_GE(node, 0);
      ASSERT_LT(node, n);
      const int32_t d = c.degree(node);
      if (slot < 0) {
        EXPECT_EQ(slot, -1);
        seen_whole = true;
        ++whole[node];
        EXPECT_EQ(begin, c.ptr[node]);
        EXPECT_EQ(end, c.ptr[node + 1]);
        if (s.solver == SolverId::HubSplit) {
          EXPECT_LT(d, s.threshold) << "row " << node;
          EXPECT_EQ(part.lanes, s.lanes);
        } else if (part.lanes == 32) {  // hybrid warp bin (hybrid's own lanes are < 32)
          EXPECT_GE(d, s.mid) << "row " << node;
          EXPECT_LT(d, s.threshold) << "row " << node;
        } else {  // hybrid small bin
          EXPECT_EQ(part.lanes, s.lanes);
          EXPECT_LT(d, s.mid) << "row " << node;
        }
      } else {
        EXPECT_FALSE(seen_whole) << "chunk after whole rows in a part";
        EXPECT_GE(d, s.threshold) << "row " << node;
        EXPECT_EQ(part.lanes, s.solver == SolverId::Hybrid ? 32 : s.lanes);
        EXPECT_GE(end - begin, 1);
        EXPECT_LE(end - begin, s.chunk);
        ASSERT_LT(slot, plan.num_slots);
        ++slot_seen[slot];
        chunks[node].push_back(seg);
      }
    }
  }
  for (int32_t i = 0; i < n; ++i) {
    const bool split = chunks.count(i) > 0;
    EXPECT_EQ(whole[i] + (split ? 1 : 0), 1) << "row " << i << " (degree " << c.degree(i) << ") covered "
                                               << whole[i] << " times whole" << (split ? " and split" : "");
  }
  for (size_t k = 0; k < slot_seen.size(); ++k) EXPECT_EQ(slot_seen[k], 1) << "slot " << k;
  // Chunks tile the row in order with consecutive slots; one hubs entry per split row.
  ASSERT_EQ(plan.hubs.size(), chunks.size());
  size_t h = 0;
  int32_t next_slot = 0;
  for (const auto& [node, list] : chunks) {
    int32_t pos = c.ptr[node];
    for (size_t k = 0; k < list.size(); ++k) {
      EXPECT_EQ(list[k][1], pos) << "row " << node;
      EXPECT_EQ(list[k][3], list[0][3] + static_cast<int32_t>(k)) << "row " << node;
      pos = list[k][2];
    }
    EXPECT_EQ(pos, c.ptr[node + 1]) << "row " << node;
    const int32_t d = c.degree(node);
    EXPECT_EQ(static_cast<int32_t>(list.size()), (d + s.chunk - 1) / s.chunk);
    // Split rows in node order, slots handed out in that order.
    EXPECT_EQ(plan.hubs[h], (Segment{node, next_slot, static_cast<int32_t>(list.size()), 0}));
    EXPECT_EQ(list[0][3], next_slot);
    next_slot += static_cast<int32_t>(list.size());
    ++h;
  }
  EXPECT_EQ(plan.num_slots, next_slot);
}

}  // namespace

TEST(Plan, SubwarpAndBlockRowRunWholeRows) {
  const auto g = graph_with_degrees({5, 0, 2, 9, 4});
  for (int lanes : {4, 8, 16, 32}) {
    const HostPlan plan = dfgnn::make_plan(g->csr(), subwarp(lanes));
    ASSERT_EQ(plan.parts.size(), 1u);
    EXPECT_EQ(plan.parts[0].lanes, lanes);
    EXPECT_TRUE(plan.parts[0].whole_rows);
    EXPECT_TRUE(plan.parts[0].segments.empty());
    EXPECT_TRUE(plan.hubs.empty());
    EXPECT_EQ(plan.num_slots, 0);
  }
  Schedule block = subwarp(32);
  block.solver = SolverId::BlockRow;
  block.team = 4;
  block.groups = 4;
  const HostPlan plan = dfgnn::make_plan(g->csr(), block);
  ASSERT_EQ(plan.parts.size(), 1u);
  EXPECT_TRUE(plan.parts[0].whole_rows);
  EXPECT_EQ(plan.parts[0].lanes, 32);
  EXPECT_EQ(plan.num_slots, 0);
  check_plan(g->csr(), block, plan);
}

TEST(Plan, HubSplitHandWorked) {
  // Degrees {5, 0, 2, 9, 4}: ptr = {0, 5, 5, 7, 16, 20}. Threshold 4, chunk 3: rows 0, 3, 4 split.
  const auto g = graph_with_degrees({5, 0, 2, 9, 4});
  EXPECT_EQ(g->csr().ptr, (std::vector<int32_t>{0, 5, 5, 7, 16, 20}));
  const Schedule s = hub_split(8, 4, 3);
  const HostPlan plan = dfgnn::make_plan(g->csr(), s);
  ASSERT_EQ(plan.parts.size(), 1u);
  EXPECT_EQ(plan.parts[0].lanes, 8);
  EXPECT_FALSE(plan.parts[0].whole_rows);
  const std::vector<Segment> expected{
      // chunks of split rows, in node order, consecutive slots
      {0, 0, 3, 0}, {0, 3, 5, 1},                 // row 0: 5 edges
      {3, 7, 10, 2}, {3, 10, 13, 3}, {3, 13, 16, 4},  // row 3: 9 edges
      {4, 16, 19, 5}, {4, 19, 20, 6},             // row 4: 4 edges (= threshold: split)
      // then the other rows whole
      {1, 5, 5, -1}, {2, 5, 7, -1},
  };
  EXPECT_EQ(plan.parts[0].segments, expected);
  EXPECT_EQ(plan.hubs, (std::vector<Segment>{{0, 0, 2, 0}, {3, 2, 3, 0}, {4, 5, 2, 0}}));
  EXPECT_EQ(plan.num_slots, 7);
  check_plan(g->csr(), s, plan);
}

TEST(Plan, HubSplitChunkEdgeCases) {
  const auto g = graph_with_degrees({5, 0, 2, 9, 4});
  {
    // Threshold above every degree: nothing split, every row whole in node order.
    const HostPlan plan = dfgnn::make_plan(g->csr(), hub_split(32, 10, 4));
    ASSERT_EQ(plan.parts.size(), 1u);
    EXPECT_EQ(plan.parts[0].segments,
              (std::vector<Segment>{{0, 0, 5, -1}, {1, 5, 5, -1}, {2, 5, 7, -1}, {3, 7, 16, -1}, {4, 16, 20, -1}}));
    EXPECT_TRUE(plan.hubs.empty());
    EXPECT_EQ(plan.num_slots, 0);
  }
  {
    // Chunk larger than the row: a split row is one chunk (still merged).
    const HostPlan plan = dfgnn::make_plan(g->csr(), hub_split(32, 9, 100));
    EXPECT_EQ(plan.parts[0].segments,
              (std::vector<Segment>{{3, 7, 16, 0}, {0, 0, 5, -1}, {1, 5, 5, -1}, {2, 5, 7, -1}, {4, 16, 20, -1}}));
    EXPECT_EQ(plan.hubs, (std::vector<Segment>{{3, 0, 1, 0}}));
    EXPECT_EQ(plan.num_slots, 1);
  }
  {
    // Chunk 1, threshold 1: every edge its own chunk; the empty row stays whole.
    const Schedule s = hub_split(4, 1, 1);
    const HostPlan plan = dfgnn::make_plan(g->csr(), s);
    EXPECT_EQ(plan.num_slots, 20);
    EXPECT_EQ(plan.parts[0].segments.size(), 21u);
    EXPECT_EQ(plan.parts[0].segments.back(), (Segment{1, 5, 5, -1}));
    EXPECT_EQ(plan.hubs.size(), 4u);
    check_plan(g->csr(), s, plan);
  }
  {
    // Chunk dividing the degree exactly: no empty tail chunk.
    const HostPlan plan = dfgnn::make_plan(g->csr(), hub_split(32, 9, 3));
    EXPECT_EQ(plan.hubs, (std::vector<Segment>{{3, 0, 3, 0}}));
    EXPECT_EQ(plan.parts[0].segments[2], (Segment{3, 13, 16, 2}));
  }
}

TEST(Plan, HybridHandWorked) {
  // Degrees {5, 0, 2, 9, 4, 1, 3}: ptr = {0, 5, 5, 7, 16, 20, 21, 24}.
  // mid 2, threshold 5, chunk 3, lanes 8:
  //   small bin (d < 2): rows 1 (0), 5 (1)
  //   warp bin (2 <= d < 5): rows 2, 4, 6
  //   split (d >= 5): rows 0 (2 chunks), 3 (3 chunks), first in the warp part.
  const auto g = graph_with_degrees({5, 0, 2, 9, 4, 1, 3});
  EXPECT_EQ(g->csr().ptr, (std::vector<int32_t>{0, 5, 5, 7, 16, 20, 21, 24}));
  const Schedule s = hybrid(8, 2, 5, 3);
  const HostPlan plan = dfgnn::make_plan(g->csr(), s);
  ASSERT_EQ(plan.parts.size(), 2u);
  EXPECT_EQ(plan.parts[0].lanes, 8);
  EXPECT_FALSE(plan.parts[0].whole_rows);
  EXPECT_EQ(plan.parts[0].segments, (std::vector<Segment>{{1, 5, 5, -1}, {5, 20, 21, -1}}));
  EXPECT_EQ(plan.parts[1].lanes, 32);
  EXPECT_FALSE(plan.parts[1].whole_rows);
  EXPECT_EQ(plan.parts[1].segments, (std::vector<Segment>{{0, 0, 3, 0},
                                                          {0, 3, 5, 1},
                                                          {3, 7, 10, 2},
                                                          {3, 10, 13, 3},
                                                          {3, 13, 16, 4},
                                                          {2, 5, 7, -1},
                                                          {4, 16, 20, -1},
                                                          {6, 21, 24, -1}}));
  EXPECT_EQ(plan.hubs, (std::vector<Segment>{{0, 0, 2, 0}, {3, 2, 3, 0}}));
  EXPECT_EQ(plan.num_slots, 5);
  check_plan(g->csr(), s, plan);
}

TEST(Plan, HybridDropsEmptyBins) {
  const auto g = graph_with_degrees({5, 0, 2, 9, 4, 1, 3});
  {
    // mid 1: only the degree-0 row is small; threshold above everything: nothing split.
    const HostPlan plan = dfgnn::make_plan(g->csr(), hybrid(4, 1, 100, 8));
    ASSERT_EQ(plan.parts.size(), 2u);
    EXPECT_EQ(plan.parts[0].segments, (std::vector<Segment>{{1, 5, 5, -1}}));
    EXPECT_EQ(plan.parts[1].segments.size(), 6u);
    EXPECT_TRUE(plan.hubs.empty());
    EXPECT_EQ(plan.num_slots, 0);
  }
  {
    // Everything small: one part with this schedule's lanes.
    const HostPlan plan = dfgnn::make_plan(g->csr(), hybrid(16, 50, 100, 8));
    ASSERT_EQ(plan.parts.size(), 1u);
    EXPECT_EQ(plan.parts[0].lanes, 16);
    EXPECT_EQ(plan.parts[0].segments.size(), 7u);
  }
  {
    // mid 1 and no empty row: no small rows, only the warp part.
    const auto full = graph_with_degrees({5, 1, 2, 9});
    const Schedule s = hybrid(8, 1, 5, 4);
    const HostPlan plan = dfgnn::make_plan(full->csr(), s);
    ASSERT_EQ(plan.parts.size(), 1u);
    EXPECT_EQ(plan.parts[0].lanes, 32);
    EXPECT_EQ(plan.parts[0].segments, (std::vector<Segment>{{0, 0, 4, 0},
                                                            {0, 4, 5, 1},
                                                            {3, 8, 12, 2},
                                                            {3, 12, 16, 3},
                                                            {3, 16, 17, 4},
                                                            {1, 5, 6, -1},
                                                            {2, 6, 8, -1}}));
    check_plan(full->csr(), s, plan);
  }
}

TEST(Plan, EmptyGraph) {
  const auto g = graph_with_degrees({});
  EXPECT_EQ(dfgnn::make_plan(g->csr(), subwarp(32)).parts.size(), 1u);
  const HostPlan hs = dfgnn::make_plan(g->csr(), hub_split(32, 4, 2));
  ASSERT_EQ(hs.parts.size(), 1u);
  EXPECT_TRUE(hs.parts[0].segments.empty());
  EXPECT_EQ(hs.num_slots, 0);
  const HostPlan hy = dfgnn::make_plan(g->csr(), hybrid(8, 2, 4, 2));
  EXPECT_TRUE(hy.parts.empty());
  EXPECT_EQ(hy.num_slots, 0);
}

TEST(Plan, EveryRowCoveredExactlyOnceOnRandomGraphs) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 20; ++trial) {
    // Random graph with a heavy tail: most rows short, some long, some empty.
    const int32_t n = std::uniform_int_distribution<int32_t>(1, 300)(rng);
    std::vector<int32_t> degrees(n);
    for (int32_t& d : degrees) {
      const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
      d = kind == 0 ? 0 : kind < 8 ? std::uniform_int_distribution<int32_t>(1, 12)(rng)
                                   : std::uniform_int_distribution<int32_t>(13, 400)(rng);
    }
    const auto g = graph_with_degrees(degrees);
    const int32_t max_d = *std::max_element(degrees.begin(), degrees.end());
    for (int k = 0; k < 25; ++k) {
      const int32_t threshold = std::uniform_int_distribution<int32_t>(1, max_d + 2)(rng);
      const int32_t chunk = std::uniform_int_distribution<int32_t>(1, max_d + 2)(rng);
      const int lanes = 4 << std::uniform_int_distribution<int>(0, 2)(rng);
      {
        const Schedule s = hub_split(lanes, threshold, chunk);
        SCOPED_TRACE("trial " + std::to_string(trial) + " " + dfgnn::to_string(s));
        check_plan(g->csr(), s, dfgnn::make_plan(g->csr(), s));
        check_plan(g->csc(), s, dfgnn::make_plan(g->csc(), s));
      }
      if (threshold >= 2) {
        const int32_t mid = std::uniform_int_distribution<int32_t>(1, threshold - 1)(rng);
        const Schedule s = hybrid(lanes, mid, threshold, chunk);
        SCOPED_TRACE("trial " + std::to_string(trial) + " " + dfgnn::to_string(s));
        check_plan(g->csr(), s, dfgnn::make_plan(g->csr(), s));
        check_plan(g->csc(), s, dfgnn::make_plan(g->csc(), s));
      }
      if (testing::Test::HasFailure()) return;
    }
  }
}

TEST(Plan, ColumnPassPlansOverTheCsc) {
  // Asymmetric: row 0 receives from 1, 2, 3 (in-degree 3); row 3 receives from 1.
  // CSR ptr {0, 3, 3, 3, 4}; out-degrees: col 0: 0, col 1: 2 (-> 0, 3), col 2: 1, col 3: 1.
  const std::vector<int32_t> ptr{0, 3, 3, 3, 4}, col{1, 2, 3, 1};
  const auto g = dfgnn::Graph::from_csr(4, 4, ptr.data(), col.data(), DFGNN_INDEX_INT32, dfgnnGraphDefaultOptions());
  EXPECT_EQ(g->csc().ptr, (std::vector<int32_t>{0, 0, 2, 3, 4}));
  const Schedule s = hub_split(8, 2, 1);
  const auto row = dfgnn::get_plan(*g, dfgnn::PassKind::Forward, s);
  const auto back_row = dfgnn::get_plan(*g, dfgnn::PassKind::BackwardRow, s);
  const auto back_col = dfgnn::get_plan(*g, dfgnn::PassKind::BackwardCol, s);
  // CSR: row 0 (3 edges) split in 3 chunks of one edge; the others whole.
  EXPECT_EQ(row->host().parts.at(0).segments, (std::vector<Segment>{{0, 0, 1, 0},
                                                                     {0, 1, 2, 1},
                                                                     {0, 2, 3, 2},
                                                                     {1, 3, 3, -1},
                                                                     {2, 3, 3, -1},
                                                                     {3, 3, 4, -1}}));
  EXPECT_EQ(row->host().hubs, (std::vector<Segment>{{0, 0, 3, 0}}));
  // CSC: column 1 (2 out-edges) split; column 0 is empty.
  EXPECT_EQ(back_col->host().parts.at(0).segments, (std::vector<Segment>{{1, 0, 1, 0},
                                                                          {1, 1, 2, 1},
                                                                          {0, 0, 0, -1},
                                                                          {2, 2, 3, -1},
                                                                          {3, 3, 4, -1}}));
  EXPECT_EQ(back_col->host().hubs, (std::vector<Segment>{{1, 0, 2, 0}}));
  EXPECT_EQ(back_col->host().num_slots, 2);
  // The forward and the backward row pass share the CSR plan; plans are cached per graph.
  EXPECT_EQ(row.get(), back_row.get());
  EXPECT_NE(row.get(), back_col.get());
  EXPECT_EQ(dfgnn::get_plan(*g, dfgnn::PassKind::BackwardCol, s).get(), back_col.get());
  // Fields that do not shape the work lists (groups, vec) reuse the plan; those that do, do not.
  Schedule other_groups = s;
  other_groups.groups = 16;
  other_groups.vec = 2;
  EXPECT_EQ(dfgnn::get_plan(*g, dfgnn::PassKind::Forward, other_groups).get(), row.get());
  Schedule other_chunk = s;
  other_chunk.chunk = 2;
  const auto chunk2 = dfgnn::get_plan(*g, dfgnn::PassKind::Forward, other_chunk);
  EXPECT_NE(chunk2.get(), row.get());
  EXPECT_EQ(chunk2->host().hubs, (std::vector<Segment>{{0, 0, 2, 0}}));
  Schedule other_lanes = s;
  other_lanes.lanes = 16;
  EXPECT_EQ(dfgnn::get_plan(*g, dfgnn::PassKind::Forward, other_lanes)->host().parts.at(0).lanes, 16);
  // A sub-warp plan of the same graph is a different entry too.
  const auto whole = dfgnn::get_plan(*g, dfgnn::PassKind::BackwardCol, subwarp(8));
  EXPECT_TRUE(whole->host().parts.at(0).whole_rows);
  check_plan(g->csc(), s, back_col->host());
  check_plan(g->csr(), s, row->host());
}

// The coverage checker itself notices broken plans (so the random test above means something).
namespace {
// Runs check_plan with its failures captured; true if it failed with a message containing needle.
testing::AssertionResult checker_reports(const dfgnn::Compressed& c, const Schedule& s, const HostPlan& plan,
                                         const std::string& needle) {
  testing::TestPartResultArray results;
  {
    testing::ScopedFakeTestPartResultReporter reporter(
        testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    check_plan(c, s, plan);
  }
  if (results.size() == 0) return testing::AssertionFailure() << "check_plan accepted the broken plan";
  for (int k = 0; k < results.size(); ++k)
    if (std::string(results.GetTestPartResult(k).message()).find(needle) != std::string::npos)
      return testing::AssertionSuccess();
  return testing::AssertionFailure() << "no failure mentions '" << needle << "'; first: "
                                     << results.GetTestPartResult(0).message();
}
}  // namespace

TEST(Plan, CheckerCatchesBrokenPlans) {
  const auto g = graph_with_degrees({5, 0, 2, 9, 4});
  const Schedule s = hub_split(8, 4, 3);
  const HostPlan good = dfgnn::make_plan(g->csr(), s);
  {
    HostPlan bad = good;
    bad.parts[0].segments.pop_back();  // row 2 never processed
    EXPECT_TRUE(checker_reports(g->csr(), s, bad, "covered 0 times"));
  }
  {
    HostPlan bad = good;
    bad.parts[0].segments.push_back({1, 5, 5, -1});  // row 1 twice
    EXPECT_TRUE(checker_reports(g->csr(), s, bad, "covered 2 times"));
  }
  {
    HostPlan bad = good;
    bad.parts[0].segments[1][1] = 4;  // row 0's chunks overlap
    EXPECT_TRUE(checker_reports(g->csr(), s, bad, "row 0"));
  }
  {
    HostPlan bad = good;
    std::swap(bad.parts[0].segments[0][3], bad.parts[0].segments[1][3]);  // slots out of order
    EXPECT_TRUE(checker_reports(g->csr(), s, bad, "row 0"));
  }
  {
    HostPlan bad = good;
    bad.hubs[1][2] = 2;  // wrong chunk count in the merge list
    EXPECT_TRUE(checker_reports(g->csr(), s, bad, "hubs[h]"));
  }
}
