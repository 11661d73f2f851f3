// Plans (make_plan): hand-worked plans for each solver, a coverage property on random graphs
// (every row is processed exactly once: by one whole-row degree range or by chunks that tile it),
// and the plan cache of get_plan (CSR for the forward and row pass, CSC for the column pass).
//
// A plan is a list of parts. A whole-row part launches one group per node over all nodes and a
// group whose row degree lies outside [min_degree, max_degree) does nothing, so it stands for
// "every row whose degree is in range" and has no list. A chunk part lists the chunks
// (node, begin, end, slot >= 0) of split rows; hubs has (node, first slot, count, 0) per split row.
// A row-group part (edge_balanced) lists groups of consecutive rows (first, end, ptr[first],
// ptr[end]), one block each.
#include "test_util.hpp"

#include <gtest/gtest-spi.h>

#include "graph.hpp"
#include "plan.hpp"
#include "schedule.hpp"
#include "solver.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

using dfgnn::HostPlan;
using dfgnn::Schedule;
using dfgnn::Segment;
using dfgnn::SolverId;
using Part = dfgnn::HostPlan::Part;

namespace {

constexpr int32_t kNoLimit = HostPlan::kNoLimit;

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

Schedule edge_balanced(int lanes, int groups, int chunk) {
  Schedule s = subwarp(lanes);
  s.solver = SolverId::EdgeBalanced;
  s.groups = groups;
  s.chunk = chunk;
  return s;
}

// Expected parts, for the hand-worked tests.
Part whole(int32_t lanes, int32_t min_degree, int32_t max_degree) {
  return Part{.kind = Part::Kind::Rows, .lanes = lanes, .min_degree = min_degree, .max_degree = max_degree};
}
Part warp_rows(int32_t min_degree, int32_t max_degree) {
  return Part{.kind = Part::Kind::WarpRows, .lanes = 32, .min_degree = min_degree, .max_degree = max_degree};
}
Part chunks(int32_t lanes, std::vector<Segment> segments) {
  return Part{.kind = Part::Kind::Chunks, .lanes = lanes, .segments = std::move(segments)};
}
Part row_groups(int32_t lanes, std::vector<Segment> segments) {
  return Part{.kind = Part::Kind::RowGroups, .lanes = lanes, .segments = std::move(segments)};
}

std::string bound(int32_t v) { return v == kNoLimit ? "inf" : std::to_string(v); }

// The shape of a part without its list: "whole lanes=32 [2, 5)", "warp rows lanes=32 [2, 5)",
// "chunks lanes=32" or "row groups lanes=32".
std::string shape(const Part& p) {
  const std::string lanes = "lanes=" + std::to_string(p.lanes);
  const std::string range = " [" + bound(p.min_degree) + ", " + bound(p.max_degree) + ")";
  switch (p.kind) {
    case Part::Kind::Rows: return "whole " + lanes + range;
    case Part::Kind::WarpRows: return "warp rows " + lanes + range;
    case Part::Kind::Chunks: return "chunks " + lanes;
    case Part::Kind::RowGroups: return "row groups " + lanes;
  }
  return "unknown kind";
}

// Everything of a part, for exact comparison with readable failures.
std::string describe(const Part& p) {
  std::string out = shape(p) + " {";
  if (p.listed()) out += "min " + bound(p.min_degree) + " max " + bound(p.max_degree) + ";";
  for (const Segment& s : p.segments)
    out += " (" + std::to_string(s[0]) + "," + std::to_string(s[1]) + "," + std::to_string(s[2]) + "," +
           std::to_string(s[3]) + ")";
  return out + " }";
}

std::vector<std::string> describe_parts(const std::vector<Part>& parts) {
  std::vector<std::string> out;
  for (const Part& p : parts) out.push_back(describe(p));
  return out;
}

// The rows a whole-row part processes: those whose degree lies in its range (the kernel's test).
std::vector<int32_t> rows_in(const dfgnn::Compressed& c, const Part& part) {
  std::vector<int32_t> rows;
  for (int32_t i = 0; i < c.num_rows; ++i)
    if (c.degree(i) >= part.min_degree && c.degree(i) < part.max_degree) rows.push_back(i);
  return rows;
}

// Checks the invariants every plan satisfies on a structure (failures are reported, not thrown).
// - layout: [a chunk part, present iff the solver splits and some row has degree >= threshold
//   (edge_balanced: > chunk)], then the whole-row parts of the solver: subwarp/block_row
//   {lanes, [0, inf)}; hub_split {lanes, [0, threshold)}; hybrid warp rows {32, [mid, threshold)},
//   {lanes, [0, mid)}; edge_balanced a row-group part (if any row is left unsplit); chunk parts
//   run the schedule's lanes (hub_split, edge_balanced) or whole warps (hybrid);
// - row groups tile the unsplit rows in order without spanning a split row, each costing at most
//   chunk (edges + rows) unless it is one row, and each as long as the greedy cut allows (the next
//   row after it would not have fitted);
// - whole-row parts carry no list; chunk parts list chunks only (slot >= 0) of rows of degree
//   >= threshold, each of 1..chunk edges;
// - every row is processed exactly once: its degree lies in exactly one whole-row range and it is
//   not split, or it is split and in no range;
// - the chunks of a split row tile [ptr[i], ptr[i+1]) in order with consecutive slots; hubs
//   names exactly the split rows, in node order, as (node, first slot, count, 0); slots
//   0..num_slots-1 each appear once, handed out in node order.
void check_plan(const dfgnn::Compressed& c, const Schedule& s, const HostPlan& plan) {
  const int32_t n = c.num_rows;
  const bool balanced = s.solver == SolverId::EdgeBalanced;
  const bool splits = s.solver == SolverId::HubSplit || s.solver == SolverId::Hybrid || balanced;
  const int32_t threshold = balanced ? s.chunk + 1 : s.threshold;
  const int32_t piece = balanced ? std::max(1, s.chunk / s.groups) : s.chunk;  // edges per chunk of a split row
  bool has_hub = false, has_unsplit = false;
  for (int32_t i = 0; i < n && splits; ++i) {
    has_hub = has_hub || c.degree(i) >= threshold;
    has_unsplit = has_unsplit || c.degree(i) < threshold;
  }
  std::vector<std::string> expected_layout;
  if (has_hub) expected_layout.push_back(shape(chunks(s.solver == SolverId::Hybrid ? 32 : s.lanes, {})));
  switch (s.solver) {
    case SolverId::Subwarp:
    case SolverId::BlockRow: expected_layout.push_back(shape(whole(s.lanes, 0, kNoLimit))); break;
    case SolverId::HubSplit: expected_layout.push_back(shape(whole(s.lanes, 0, s.threshold))); break;
    case SolverId::Hybrid:
      expected_layout.push_back(shape(warp_rows(s.mid, s.threshold)));
      expected_layout.push_back(shape(whole(s.lanes, 0, s.mid)));
      break;
    case SolverId::EdgeBalanced:
      if (has_unsplit) expected_layout.push_back(shape(row_groups(s.lanes, {})));
      break;
  }
  std::vector<std::string> layout;
  for (const Part& part : plan.parts) layout.push_back(shape(part));
  EXPECT_EQ(layout, expected_layout) << "part layout";

  std::vector<int> in_ranges(n, 0);
  std::map<int32_t, std::vector<Segment>> split;  // node -> its chunks in list order
  std::vector<int> slot_seen(std::max(plan.num_slots, 0), 0);
  for (size_t k = 0; k < plan.parts.size(); ++k) {
    const Part& part = plan.parts[k];
    SCOPED_TRACE("part " + std::to_string(k) + ": " + shape(part));
    if (!part.listed()) {
      EXPECT_TRUE(part.segments.empty()) << "whole-row part with a list";
      EXPECT_GE(part.min_degree, 0);
      EXPECT_LE(part.min_degree, part.max_degree);
      for (const int32_t i : rows_in(c, part)) ++in_ranges[i];
      continue;
    }
    if (part.kind == Part::Kind::RowGroups) {
      EXPECT_TRUE(balanced) << "row groups in a plan of another solver";
      EXPECT_FALSE(part.segments.empty()) << "empty row-group parts are not launched";
      int32_t next = 0;  // first row not yet grouped
      for (const Segment& seg : part.segments) {
        const auto [first, end, begin_edge, end_edge] = seg;
        ASSERT_GE(first, next) << "row groups out of order";
        ASSERT_LT(first, end);
        ASSERT_LE(end, n);
        for (int32_t i = next; i < first; ++i)
          EXPECT_GE(c.degree(i), threshold) << "row " << i << " skipped between row groups but not split";
        EXPECT_EQ(begin_edge, c.ptr[first]);
        EXPECT_EQ(end_edge, c.ptr[end]);
        const int32_t cost = end_edge - begin_edge + end - first;
        if (end - first > 1) EXPECT_LE(cost, s.chunk) << "row group [" << first << ", " << end << ")";
        int32_t empty_run = 0, trailing_empty = 0;  // the longest run of rows without edges, the run that ends it
        for (int32_t i = first; i < end; ++i) {
          trailing_empty = c.degree(i) == 0 ? trailing_empty + 1 : 0;
          empty_run = std::max(empty_run, trailing_empty);
        }
        EXPECT_LE(empty_run, dfgnn::solvers::kMaxEmptyRowsInGroup) << "row group [" << first << ", " << end << ")";
        const bool cut_for_empty = end < n && c.degree(end) == 0 &&
                                   trailing_empty == dfgnn::solvers::kMaxEmptyRowsInGroup;
        if (end < n && c.degree(end) < threshold && !cut_for_empty)
          EXPECT_GT(cost + c.degree(end) + 1, s.chunk) << "row group [" << first << ", " << end << ") cut early";
        for (int32_t i = first; i < end; ++i) ++in_ranges[i];
        next = end;
      }
      continue;
    }
    EXPECT_TRUE(splits) << "chunk part in a plan that splits no rows";
    EXPECT_FALSE(part.segments.empty()) << "empty chunk parts are not launched";
    for (const Segment& seg : part.segments) {
      const auto [node, begin, end, slot] = seg;
      ASSERT_GE(node, 0);
      ASSERT_LT(node, n);
      EXPECT_GE(slot, 0) << "chunk part entry without a slot (row " << node << ")";
      EXPECT_GE(c.degree(node), threshold) << "row " << node << " split below the threshold";
      EXPECT_GE(end - begin, 1) << "row " << node;
      EXPECT_LE(end - begin, piece) << "row " << node;
      if (slot >= 0) {
        ASSERT_LT(slot, plan.num_slots) << "row " << node;
        ++slot_seen[slot];
      }
      split[node].push_back(seg);
    }
  }
  for (int32_t i = 0; i < n; ++i) {
    const bool is_split = split.count(i) > 0;
    EXPECT_EQ(in_ranges[i] + (is_split ? 1 : 0), 1)
        << "row " << i << " (degree " << c.degree(i) << ") covered " << in_ranges[i] << " times whole"
        << (is_split ? " and split" : "");
  }
  for (size_t k = 0; k < slot_seen.size(); ++k) EXPECT_EQ(slot_seen[k], 1) << "slot " << k;
  // Chunks tile the row in order with consecutive slots; one hubs entry per split row.
  ASSERT_EQ(plan.hubs.size(), split.size()) << "hubs entries vs split rows";
  size_t h = 0;
  int32_t next_slot = 0;
  for (const auto& [node, list] : split) {
    int32_t pos = c.ptr[node];
    for (size_t k = 0; k < list.size(); ++k) {
      EXPECT_EQ(list[k][1], pos) << "row " << node << " chunk " << k;
      EXPECT_EQ(list[k][3], list[0][3] + static_cast<int32_t>(k)) << "row " << node << " chunk " << k;
      pos = list[k][2];
    }
    EXPECT_EQ(pos, c.ptr[node + 1]) << "row " << node << " chunks end early or late";
    const int32_t d = c.degree(node);
    EXPECT_EQ(static_cast<int32_t>(list.size()), (d + piece - 1) / piece) << "row " << node;
    // Split rows in node order, slots handed out in that order.
    EXPECT_EQ(plan.hubs[h], (Segment{node, next_slot, static_cast<int32_t>(list.size()), 0}));
    EXPECT_EQ(list[0][3], next_slot) << "row " << node;
    next_slot += static_cast<int32_t>(list.size());
    ++h;
  }
  EXPECT_EQ(plan.num_slots, next_slot);
}

}  // namespace

TEST(Plan, SubwarpAndBlockRowRunWholeRows) {
  const auto g = graph_with_degrees({5, 0, 2, 9, 4});
  for (int lanes : {4, 8, 16, 32}) {
    const Schedule s = subwarp(lanes);
    const HostPlan plan = dfgnn::make_plan(g->csr(), s);
    EXPECT_EQ(describe_parts(plan.parts), describe_parts({whole(lanes, 0, kNoLimit)}));
    EXPECT_EQ(rows_in(g->csr(), plan.parts.at(0)), (std::vector<int32_t>{0, 1, 2, 3, 4}));
    EXPECT_TRUE(plan.hubs.empty());
    EXPECT_EQ(plan.num_slots, 0);
    check_plan(g->csr(), s, plan);
  }
  Schedule block = subwarp(32);
  block.solver = SolverId::BlockRow;
  block.team = 4;
  block.groups = 4;
  const HostPlan plan = dfgnn::make_plan(g->csr(), block);
  EXPECT_EQ(describe_parts(plan.parts), describe_parts({whole(32, 0, kNoLimit)}));
  EXPECT_TRUE(plan.hubs.empty());
  EXPECT_EQ(plan.num_slots, 0);
  check_plan(g->csr(), block, plan);
}

TEST(Plan, HubSplitHandWorked) {
  // Degrees {5, 0, 2, 9, 4}: ptr = {0, 5, 5, 7, 16, 20}. Threshold 4, chunk 3: rows 0, 3, 4 split,
  // rows 1 (degree 0) and 2 (degree 2) run whole in the part for degrees [0, 4).
  const auto g = graph_with_degrees({5, 0, 2, 9, 4});
  EXPECT_EQ(g->csr().ptr, (std::vector<int32_t>{0, 5, 5, 7, 16, 20}));
  const Schedule s = hub_split(8, 4, 3);
  const HostPlan plan = dfgnn::make_plan(g->csr(), s);
  EXPECT_EQ(describe_parts(plan.parts), describe_parts({
                                      // chunks of split rows first, in node order, consecutive slots
                                      chunks(8, {{0, 0, 3, 0}, {0, 3, 5, 1},                   // row 0: 5 edges
                                                 {3, 7, 10, 2}, {3, 10, 13, 3}, {3, 13, 16, 4},  // row 3: 9 edges
                                                 {4, 16, 19, 5}, {4, 19, 20, 6}}),  // row 4: 4 (= threshold: split)
                                      // then every row below the threshold, whole
                                      whole(8, 0, 4),
                                  }));
  EXPECT_EQ(rows_in(g->csr(), plan.parts.at(1)), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(plan.hubs, (std::vector<Segment>{{0, 0, 2, 0}, {3, 2, 3, 0}, {4, 5, 2, 0}}));
  EXPECT_EQ(plan.num_slots, 7);
  check_plan(g->csr(), s, plan);
}

TEST(Plan, HubSplitChunkEdgeCases) {
  const auto g = graph_with_degrees({5, 0, 2, 9, 4});
  {
    // Threshold above every degree: nothing split, no chunk part; every row in the whole part.
    const Schedule s = hub_split(32, 10, 4);
    const HostPlan plan = dfgnn::make_plan(g->csr(), s);
    EXPECT_EQ(describe_parts(plan.parts), describe_parts({whole(32, 0, 10)}));
    EXPECT_EQ(rows_in(g->csr(), plan.parts.at(0)), (std::vector<int32_t>{0, 1, 2, 3, 4}));
    EXPECT_TRUE(plan.hubs.empty());
    EXPECT_EQ(plan.num_slots, 0);
    check_plan(g->csr(), s, plan);
  }
  {
    // Chunk larger than the row: a split row is one chunk (still merged).
    const Schedule s = hub_split(32, 9, 100);
    const HostPlan plan = dfgnn::make_plan(g->csr(), s);
    EXPECT_EQ(describe_parts(plan.parts), describe_parts({chunks(32, {{3, 7, 16, 0}}), whole(32, 0, 9)}));
    EXPECT_EQ(rows_in(g->csr(), plan.parts.at(1)), (std::vector<int32_t>{0, 1, 2, 4}));
    EXPECT_EQ(plan.hubs, (std::vector<Segment>{{3, 0, 1, 0}}));
    EXPECT_EQ(plan.num_slots, 1);
    check_plan(g->csr(), s, plan);
  }
  {
    // Chunk 1, threshold 1: every edge its own chunk; the empty row is the only whole row.
    const Schedule s = hub_split(4, 1, 1);
    const HostPlan plan = dfgnn::make_plan(g->csr(), s);
    ASSERT_EQ(plan.parts.size(), 2u);
    EXPECT_EQ(plan.parts[0].segments.size(), 20u);
    EXPECT_EQ(plan.parts[0].segments.back(), (Segment{4, 19, 20, 19}));
    EXPECT_EQ(describe(plan.parts[1]), describe(whole(4, 0, 1)));
    EXPECT_EQ(rows_in(g->csr(), plan.parts[1]), (std::vector<int32_t>{1}));
    EXPECT_EQ(plan.hubs, (std::vector<Segment>{{0, 0, 5, 0}, {2, 5, 2, 0}, {3, 7, 9, 0}, {4, 16, 4, 0}}));
    EXPECT_EQ(plan.num_slots, 20);
    check_plan(g->csr(), s, plan);
  }
  {
    // Chunk dividing the degree exactly: no empty tail chunk.
    const Schedule s = hub_split(32, 9, 3);
    const HostPlan plan = dfgnn::make_plan(g->csr(), s);
    EXPECT_EQ(describe_parts(plan.parts), describe_parts({chunks(32, {{3, 7, 10, 0}, {3, 10, 13, 1}, {3, 13, 16, 2}}), whole(32, 0, 9)}));
    EXPECT_EQ(plan.hubs, (std::vector<Segment>{{3, 0, 3, 0}}));
    check_plan(g->csr(), s, plan);
  }
}

TEST(Plan, HybridHandWorked) {
  // Degrees {5, 0, 2, 9, 4, 1, 3}: ptr = {0, 5, 5, 7, 16, 20, 21, 24}.
  // mid 2, threshold 5, chunk 3, lanes 8:
  //   split (d >= 5): rows 0 (2 chunks), 3 (3 chunks), chunks on whole warps, first
  //   warp bin (2 <= d < 5): rows 2, 4, 6, whole warps
  //   small bin (d < 2): rows 1 (0), 5 (1), 8 lanes
  const auto g = graph_with_degrees({5, 0, 2, 9, 4, 1, 3});
  EXPECT_EQ(g->csr().ptr, (std::vector<int32_t>{0, 5, 5, 7, 16, 20, 21, 24}));
  const Schedule s = hybrid(8, 2, 5, 3);
  const HostPlan plan = dfgnn::make_plan(g->csr(), s);
  EXPECT_EQ(describe_parts(plan.parts),
            describe_parts({chunks(32, {{0, 0, 3, 0}, {0, 3, 5, 1}, {3, 7, 10, 2}, {3, 10, 13, 3}, {3, 13, 16, 4}}),
                      warp_rows(2, 5), whole(8, 0, 2)}));
  ASSERT_EQ(plan.parts.size(), 3u);
  EXPECT_EQ(rows_in(g->csr(), plan.parts[1]), (std::vector<int32_t>{2, 4, 6}));
  EXPECT_EQ(rows_in(g->csr(), plan.parts[2]), (std::vector<int32_t>{1, 5}));
  EXPECT_EQ(plan.hubs, (std::vector<Segment>{{0, 0, 2, 0}, {3, 2, 3, 0}}));
  EXPECT_EQ(plan.num_slots, 5);
  check_plan(g->csr(), s, plan);
}

TEST(Plan, HybridKeepsEmptyBins) {
  // Whole-row parts are launched even when no row's degree falls in their range (their groups
  // exit at once); only the chunk part is left out when nothing is split.
  const auto g = graph_with_degrees({5, 0, 2, 9, 4, 1, 3});
  {
    // mid 1: only the degree-0 row is small; threshold above everything: nothing split.
    const Schedule s = hybrid(4, 1, 100, 8);
    const HostPlan plan = dfgnn::make_plan(g->csr(), s);
    EXPECT_EQ(describe_parts(plan.parts), describe_parts({warp_rows(1, 100), whole(4, 0, 1)}));
    ASSERT_EQ(plan.parts.size(), 2u);
    EXPECT_EQ(rows_in(g->csr(), plan.parts[0]), (std::vector<int32_t>{0, 2, 3, 4, 5, 6}));
    EXPECT_EQ(rows_in(g->csr(), plan.parts[1]), (std::vector<int32_t>{1}));
    EXPECT_TRUE(plan.hubs.empty());
    EXPECT_EQ(plan.num_slots, 0);
    check_plan(g->csr(), s, plan);
  }
  {
    // Everything small: the warp bin is empty but still there.
    const Schedule s = hybrid(16, 50, 100, 8);
    const HostPlan plan = dfgnn::make_plan(g->csr(), s);
    EXPECT_EQ(describe_parts(plan.parts), describe_parts({warp_rows(50, 100), whole(16, 0, 50)}));
    ASSERT_EQ(plan.parts.size(), 2u);
    EXPECT_TRUE(rows_in(g->csr(), plan.parts[0]).empty());
    EXPECT_EQ(rows_in(g->csr(), plan.parts[1]), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6}));
    check_plan(g->csr(), s, plan);
  }
  {
    // mid 1 and no empty row: the small bin is empty but still there.
    // Degrees {5, 1, 2, 9}: ptr = {0, 5, 6, 8, 17}; threshold 5, chunk 4: rows 0 and 3 split.
    const auto full = graph_with_degrees({5, 1, 2, 9});
    EXPECT_EQ(full->csr().ptr, (std::vector<int32_t>{0, 5, 6, 8, 17}));
    const Schedule s = hybrid(8, 1, 5, 4);
    const HostPlan plan = dfgnn::make_plan(full->csr(), s);
    EXPECT_EQ(describe_parts(plan.parts),
              describe_parts({chunks(32, {{0, 0, 4, 0}, {0, 4, 5, 1}, {3, 8, 12, 2}, {3, 12, 16, 3}, {3, 16, 17, 4}}),
                        warp_rows(1, 5), whole(8, 0, 1)}));
    ASSERT_EQ(plan.parts.size(), 3u);
    EXPECT_EQ(rows_in(full->csr(), plan.parts[1]), (std::vector<int32_t>{1, 2}));
    EXPECT_TRUE(rows_in(full->csr(), plan.parts[2]).empty());
    EXPECT_EQ(plan.hubs, (std::vector<Segment>{{0, 0, 2, 0}, {3, 2, 3, 0}}));
    EXPECT_EQ(plan.num_slots, 5);
    check_plan(full->csr(), s, plan);
  }
}

TEST(Plan, EdgeBalancedHandWorked) {
  // Degrees {5, 0, 2, 9, 4}: ptr = {0, 5, 5, 7, 16, 20}; a row costs its degree + 1. Chunk 6 over
  // 2 groups: row 0 (cost 6) fills a row group; row 1 (1) + row 2 (3) share one; row 3 (9 > 6
  // edges) is split into pieces of 6 / 2 = 3 edges and closes the group before it; row 4 (5) is
  // the last group.
  const auto g = graph_with_degrees({5, 0, 2, 9, 4});
  const Schedule s = edge_balanced(16, 2, 6);
  const HostPlan plan = dfgnn::make_plan(g->csr(), s);
  EXPECT_EQ(describe_parts(plan.parts),
            describe_parts({chunks(16, {{3, 7, 10, 0}, {3, 10, 13, 1}, {3, 13, 16, 2}}),
                            row_groups(16, {{0, 1, 0, 5}, {1, 3, 5, 7}, {4, 5, 16, 20}})}));
  EXPECT_EQ(plan.hubs, (std::vector<Segment>{{3, 0, 3, 0}}));
  EXPECT_EQ(plan.num_slots, 3);
  check_plan(g->csr(), s, plan);

  // Chunk 20: nothing split; rows 0-3 cost 6 + 1 + 3 + 10 = 20 and fill a group, row 4 is alone.
  const Schedule wide = edge_balanced(32, 8, 20);
  const HostPlan one = dfgnn::make_plan(g->csr(), wide);
  EXPECT_EQ(describe_parts(one.parts), describe_parts({row_groups(32, {{0, 4, 0, 16}, {4, 5, 16, 20}})}));
  EXPECT_TRUE(one.hubs.empty());
  check_plan(g->csr(), wide, one);

  // Chunk 1: every row with an edge is split into single edges; the empty row is its own group.
  const Schedule tiny = edge_balanced(4, 64, 1);
  const HostPlan split = dfgnn::make_plan(g->csr(), tiny);
  ASSERT_EQ(split.parts.size(), 2u);
  EXPECT_EQ(split.parts[0].segments.size(), 20u);
  EXPECT_EQ(describe(split.parts[1]), describe(row_groups(4, {{1, 2, 5, 5}})));
  check_plan(g->csr(), tiny, split);

  // Rows without edges: at most kMaxEmptyRowsInGroup (4) in a row of a group, so of the 9 after
  // row 0, 4 end row 0's group, 4 fill a group of their own and the ninth starts the group of rows
  // 10 and 11 (cost 1 + 3 + 2); chunk 64 alone would have held all 12 rows in one group.
  const auto runs = graph_with_degrees({3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 1});
  const Schedule roomy = edge_balanced(16, 4, 64);
  const HostPlan cut = dfgnn::make_plan(runs->csr(), roomy);
  EXPECT_EQ(describe_parts(cut.parts), describe_parts({row_groups(16, {{0, 5, 0, 3}, {5, 9, 3, 3}, {9, 12, 3, 6}})}));
  check_plan(runs->csr(), roomy, cut);

  // No nodes: no parts at all (nothing to launch).
  const auto empty = graph_with_degrees({});
  EXPECT_TRUE(dfgnn::make_plan(empty->csr(), s).parts.empty());
}

TEST(Plan, EdgeBalancedPlansAreCachedPerGroupCount) {
  // Split pieces are chunk / groups edges, so groups shape an edge_balanced plan (and only its).
  const auto g = graph_with_degrees({5, 0, 2, 9, 4});
  const auto two = dfgnn::get_plan(*g, dfgnn::PassKind::Forward, edge_balanced(16, 2, 6));
  const auto three = dfgnn::get_plan(*g, dfgnn::PassKind::Forward, edge_balanced(16, 3, 6));
  EXPECT_NE(two.get(), three.get());
  EXPECT_EQ(two->host().num_slots, 3);    // row 3: 9 edges in pieces of 3
  EXPECT_EQ(three->host().num_slots, 5);  // pieces of 2
  EXPECT_EQ(dfgnn::get_plan(*g, dfgnn::PassKind::Forward, edge_balanced(32, 2, 6)).get(), two.get());
}

TEST(Plan, EmptyGraph) {
  const auto g = graph_with_degrees({});
  EXPECT_EQ(describe_parts(dfgnn::make_plan(g->csr(), subwarp(32)).parts), describe_parts({whole(32, 0, kNoLimit)}));
  const HostPlan hs = dfgnn::make_plan(g->csr(), hub_split(32, 4, 2));
  EXPECT_EQ(describe_parts(hs.parts), describe_parts({whole(32, 0, 4)}));
  EXPECT_TRUE(hs.hubs.empty());
  EXPECT_EQ(hs.num_slots, 0);
  const HostPlan hy = dfgnn::make_plan(g->csr(), hybrid(8, 2, 4, 2));
  EXPECT_EQ(describe_parts(hy.parts), describe_parts({warp_rows(2, 4), whole(8, 0, 2)}));
  EXPECT_TRUE(hy.hubs.empty());
  EXPECT_EQ(hy.num_slots, 0);
  check_plan(g->csr(), hub_split(32, 4, 2), hs);
  check_plan(g->csr(), hybrid(8, 2, 4, 2), hy);
}

TEST(Plan, EveryRowCoveredExactlyOnceOnRandomGraphs) {
  std::mt19937 rng(12345);
  int plans_with_chunks = 0, plans_without = 0;
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
    for (int lanes : {4, 8, 16, 32}) {
      const Schedule s = subwarp(lanes);
      SCOPED_TRACE("trial " + std::to_string(trial) + " " + dfgnn::to_string(s));
      check_plan(g->csr(), s, dfgnn::make_plan(g->csr(), s));
      check_plan(g->csc(), s, dfgnn::make_plan(g->csc(), s));
    }
    for (int k = 0; k < 25; ++k) {
      // The first threshold lies above every degree (nothing split), the others anywhere.
      const int32_t threshold = k == 0 ? max_d + 1 : std::uniform_int_distribution<int32_t>(1, max_d + 2)(rng);
      const int32_t chunk = std::uniform_int_distribution<int32_t>(1, max_d + 2)(rng);
      const int lanes = 4 << std::uniform_int_distribution<int>(0, 2)(rng);
      {
        const Schedule s = hub_split(lanes, threshold, chunk);
        SCOPED_TRACE("trial " + std::to_string(trial) + " " + dfgnn::to_string(s));
        const HostPlan csr = dfgnn::make_plan(g->csr(), s);
        check_plan(g->csr(), s, csr);
        check_plan(g->csc(), s, dfgnn::make_plan(g->csc(), s));
        ++(csr.num_slots > 0 ? plans_with_chunks : plans_without);
      }
      {
        const Schedule s = edge_balanced(lanes, 1 << std::uniform_int_distribution<int>(0, 4)(rng), chunk);
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
  // The property was exercised both with and without split rows.
  EXPECT_GT(plans_with_chunks, 0);
  EXPECT_GT(plans_without, 0);
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
  // CSR: row 0 (3 edges) split in 3 chunks of one edge; rows 1, 2, 3 (degrees 0, 0, 1) whole.
  EXPECT_EQ(describe_parts(row->host().parts),
            describe_parts({chunks(8, {{0, 0, 1, 0}, {0, 1, 2, 1}, {0, 2, 3, 2}}), whole(8, 0, 2)}));
  EXPECT_EQ(rows_in(g->csr(), row->host().parts.at(1)), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(row->host().hubs, (std::vector<Segment>{{0, 0, 3, 0}}));
  EXPECT_EQ(row->host().num_slots, 3);
  // CSC: column 1 (2 out-edges) split; columns 0 (empty), 2, 3 whole.
  EXPECT_EQ(describe_parts(back_col->host().parts), describe_parts({chunks(8, {{1, 0, 1, 0}, {1, 1, 2, 1}}), whole(8, 0, 2)}));
  EXPECT_EQ(rows_in(g->csc(), back_col->host().parts.at(1)), (std::vector<int32_t>{0, 2, 3}));
  EXPECT_EQ(back_col->host().hubs, (std::vector<Segment>{{1, 0, 2, 0}}));
  EXPECT_EQ(back_col->host().num_slots, 2);
  check_plan(g->csc(), s, back_col->host());
  check_plan(g->csr(), s, row->host());

  // The forward and the backward row pass share the CSR plan; plans are cached per graph.
  EXPECT_EQ(row.get(), back_row.get());
  EXPECT_NE(row.get(), back_col.get());
  EXPECT_EQ(dfgnn::get_plan(*g, dfgnn::PassKind::BackwardCol, s).get(), back_col.get());
  // The cache key is (structure, solver, mid, threshold, chunk): fields that do not shape the
  // work lists (lanes, groups, vec) reuse the plan; those that do, do not.
  Schedule other_groups = s;
  other_groups.groups = 16;
  other_groups.vec = 2;
  EXPECT_EQ(dfgnn::get_plan(*g, dfgnn::PassKind::Forward, other_groups).get(), row.get());
  Schedule other_lanes = s;
  other_lanes.lanes = 16;
  other_lanes.groups = 16;
  EXPECT_EQ(dfgnn::get_plan(*g, dfgnn::PassKind::Forward, other_lanes).get(), row.get());
  EXPECT_EQ(dfgnn::get_plan(*g, dfgnn::PassKind::BackwardCol, other_lanes).get(), back_col.get());
  // So the lanes recorded in a cached plan's parts are those of the schedule that built it
  // first, not of a later request: a launcher must take the group size from its own schedule.
  EXPECT_EQ(dfgnn::get_plan(*g, dfgnn::PassKind::Forward, other_lanes)->host().parts.at(0).lanes, 8);
  Schedule other_chunk = s;
  other_chunk.chunk = 2;
  const auto chunk2 = dfgnn::get_plan(*g, dfgnn::PassKind::Forward, other_chunk);
  EXPECT_NE(chunk2.get(), row.get());
  EXPECT_EQ(chunk2->host().hubs, (std::vector<Segment>{{0, 0, 2, 0}}));
  check_plan(g->csr(), other_chunk, chunk2->host());
  Schedule other_threshold = s;
  other_threshold.threshold = 4;
  const auto unsplit = dfgnn::get_plan(*g, dfgnn::PassKind::Forward, other_threshold);
  EXPECT_NE(unsplit.get(), row.get());
  EXPECT_EQ(describe_parts(unsplit->host().parts), describe_parts({whole(8, 0, 4)}));
  // Hybrid with the same threshold and chunk is another entry, and so is another mid.
  const Schedule hy = hybrid(8, 1, 2, 1);
  const auto hy_plan = dfgnn::get_plan(*g, dfgnn::PassKind::Forward, hy);
  EXPECT_NE(hy_plan.get(), row.get());
  EXPECT_EQ(describe_parts(hy_plan->host().parts),
            describe_parts({chunks(32, {{0, 0, 1, 0}, {0, 1, 2, 1}, {0, 2, 3, 2}}), warp_rows(1, 2), whole(8, 0, 1)}));
  check_plan(g->csr(), hy, hy_plan->host());
  Schedule hy_mid = hybrid(8, 1, 3, 1);
  Schedule hy_mid2 = hybrid(8, 2, 3, 1);
  EXPECT_NE(dfgnn::get_plan(*g, dfgnn::PassKind::Forward, hy_mid).get(),
            dfgnn::get_plan(*g, dfgnn::PassKind::Forward, hy_mid2).get());
  // A sub-warp plan of the same graph is a different entry too.
  const auto all_rows = dfgnn::get_plan(*g, dfgnn::PassKind::BackwardCol, subwarp(8));
  EXPECT_NE(all_rows.get(), back_col.get());
  EXPECT_EQ(describe_parts(all_rows->host().parts), describe_parts({whole(8, 0, kNoLimit)}));
}

TEST(Plan, CachedPlanLanesFollowTheFirstRequest) {
  // On a fresh graph, the same work lists asked for with 16 lanes first, then with 4: one plan,
  // whose parts carry 16 lanes (and hybrid's small bin likewise).
  const auto g = graph_with_degrees({5, 0, 2, 9, 4});
  const auto first = dfgnn::get_plan(*g, dfgnn::PassKind::Forward, hub_split(16, 4, 3));
  const auto second = dfgnn::get_plan(*g, dfgnn::PassKind::Forward, hub_split(4, 4, 3));
  EXPECT_EQ(first.get(), second.get());
  for (const Part& part : second->host().parts) EXPECT_EQ(part.lanes, 16) << shape(part);
  const auto hy_first = dfgnn::get_plan(*g, dfgnn::PassKind::Forward, hybrid(16, 2, 4, 3));
  const auto hy_second = dfgnn::get_plan(*g, dfgnn::PassKind::Forward, hybrid(4, 2, 4, 3));
  EXPECT_EQ(hy_first.get(), hy_second.get());
  EXPECT_EQ(describe(hy_second->host().parts.back()), describe(whole(16, 0, 2)));
  const auto sw_first = dfgnn::get_plan(*g, dfgnn::PassKind::Forward, subwarp(32));
  const auto sw_second = dfgnn::get_plan(*g, dfgnn::PassKind::Forward, subwarp(4));
  EXPECT_EQ(sw_first.get(), sw_second.get());
  EXPECT_EQ(describe_parts(sw_second->host().parts), describe_parts({whole(32, 0, kNoLimit)}));
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
  // Degrees {5, 0, 2, 9, 4}, threshold 4, chunk 3: part 0 = chunks of rows 0, 3, 4 (slots 0..6),
  // part 1 = whole rows of degree [0, 4) (rows 1, 2).
  const auto g = graph_with_degrees({5, 0, 2, 9, 4});
  const Schedule s = hub_split(8, 4, 3);
  const HostPlan good = dfgnn::make_plan(g->csr(), s);
  {
    testing::TestPartResultArray results;
    {
      testing::ScopedFakeTestPartResultReporter reporter(
          testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
      check_plan(g->csr(), s, good);
    }
    EXPECT_EQ(results.size(), 0) << "the good plan is accepted";
  }
  ASSERT_EQ(good.parts.size(), 2u);
  {
    HostPlan bad = good;
    bad.parts[1].max_degree = 2;  // row 2 (degree 2) never processed
    EXPECT_TRUE(checker_reports(g->csr(), s, bad, "row 2 (degree 2) covered 0 times"));
  }
  {
    HostPlan bad = good;
    bad.parts[1].max_degree = 5;  // row 4 (degree 4) both split and whole
    EXPECT_TRUE(checker_reports(g->csr(), s, bad, "row 4 (degree 4) covered 1 times whole and split"));
  }
  {
    HostPlan bad = good;
    bad.parts.push_back(whole(8, 0, 1));  // row 1 (degree 0) twice
    EXPECT_TRUE(checker_reports(g->csr(), s, bad, "row 1 (degree 0) covered 2 times"));
  }
  {
    HostPlan bad = good;
    bad.parts.erase(bad.parts.begin());  // no chunks: rows 0, 3, 4 never processed
    EXPECT_TRUE(checker_reports(g->csr(), s, bad, "row 3 (degree 9) covered 0 times"));
  }
  {
    HostPlan bad = good;
    bad.parts[0].segments[1][1] = 2;  // row 0's chunks overlap
    EXPECT_TRUE(checker_reports(g->csr(), s, bad, "row 0 chunk 1"));
  }
  {
    HostPlan bad = good;
    std::swap(bad.parts[0].segments[0][3], bad.parts[0].segments[1][3]);  // slots out of order
    EXPECT_TRUE(checker_reports(g->csr(), s, bad, "row 0 chunk 1"));
  }
  {
    HostPlan bad = good;
    bad.parts[0].segments.pop_back();  // row 4's last chunk missing
    EXPECT_TRUE(checker_reports(g->csr(), s, bad, "row 4 chunks end early"));
  }
  {
    HostPlan bad = good;
    bad.parts[0].segments[2][3] = -1;  // a chunk without a slot
    EXPECT_TRUE(checker_reports(g->csr(), s, bad, "without a slot"));
  }
  {
    HostPlan bad = good;
    bad.hubs[1][2] = 2;  // wrong chunk count in the merge list
    EXPECT_TRUE(checker_reports(g->csr(), s, bad, "plan.hubs[h]"));
  }
  {
    HostPlan bad = good;
    std::swap(bad.hubs[0], bad.hubs[1]);  // merge list out of node order
    EXPECT_TRUE(checker_reports(g->csr(), s, bad, "plan.hubs[h]"));
  }
  {
    HostPlan bad = good;
    bad.parts[1].segments.push_back({1, 5, 5, -1});  // a whole-row part with a list
    EXPECT_TRUE(checker_reports(g->csr(), s, bad, "whole-row part with a list"));
  }
  {
    HostPlan bad = good;
    std::swap(bad.parts[0], bad.parts[1]);  // chunks after the whole rows
    EXPECT_TRUE(checker_reports(g->csr(), s, bad, "part layout"));
  }
  {
    HostPlan bad = good;
    bad.parts[1].lanes = 32;  // whole rows on another group size than the schedule's
    EXPECT_TRUE(checker_reports(g->csr(), s, bad, "part layout"));
  }
  {
    // Hybrid: the warp bin on the schedule's small lanes, and the bins in the other order.
    const auto g7 = graph_with_degrees({5, 0, 2, 9, 4, 1, 3});
    const Schedule hy = hybrid(8, 2, 5, 3);
    const HostPlan hy_good = dfgnn::make_plan(g7->csr(), hy);
    ASSERT_EQ(hy_good.parts.size(), 3u);
    HostPlan bad = hy_good;
    bad.parts[1].lanes = 8;
    EXPECT_TRUE(checker_reports(g7->csr(), hy, bad, "part layout"));
    bad = hy_good;
    std::swap(bad.parts[1], bad.parts[2]);
    EXPECT_TRUE(checker_reports(g7->csr(), hy, bad, "part layout"));
    bad = hy_good;
    bad.parts[2].max_degree = 3;  // row 2 (degree 2) in both bins
    EXPECT_TRUE(checker_reports(g7->csr(), hy, bad, "row 2 (degree 2) covered 2 times"));
  }
}

// ---------------------------------------------------------------- plans from extreme schedule text
namespace dfgnn {
namespace {

constexpr int32_t kInt32Max = std::numeric_limits<int32_t>::max();

// With the largest chunk (2^31 - 1), the chunks of a split row stay inside the row (no int32 wrap).
TEST(Plan, SplitRowsWithTheLargestChunkStayInsideTheRow) {
  const auto g = graph_with_degrees({3, 100, 2});
  for (const char* text : {"hub_split:lanes=32,groups=8,threshold=64,chunk=2147483647",
                           "hybrid:lanes=8,groups=32,mid=8,threshold=64,chunk=2147483647"}) {
    SCOPED_TRACE(text);
    const HostPlan plan = make_plan(g->csr(), parse_schedule(text));
    ASSERT_FALSE(plan.parts.empty());
    EXPECT_EQ(plan.parts[0].segments, (std::vector<Segment>{{1, 3, 103, 0}}));  // the whole hub row, one chunk
    EXPECT_EQ(plan.hubs, (std::vector<Segment>{{1, 0, 1, 0}}));
    EXPECT_EQ(plan.num_slots, 1);
  }
}

// A row group costs at most block_edges(), also where the sum passes 2^31 (no int32 wrap).
TEST(Plan, EdgeBalancedGroupsNeverCostMoreThanTheBlockEdges) {
  Compressed rows;  // a plan reads only the row pointers
  rows.num_rows = 2;
  rows.ptr = {0, kInt32Max - 1, kInt32Max};
  const HostPlan plan = make_plan(rows, parse_schedule("edge_balanced:lanes=32,groups=8,vec=1,chunk=2147483647"));
  ASSERT_EQ(plan.parts.size(), 1u);
  EXPECT_EQ(plan.parts[0].kind, dfgnn::HostPlan::Part::Kind::RowGroups);
  EXPECT_EQ(plan.parts[0].segments, (std::vector<Segment>{{0, 1, 0, kInt32Max - 1}, {1, 2, kInt32Max - 1, kInt32Max}}));
}

}  // namespace
}  // namespace dfgnn
