#include "plan.hpp"

#include "error.hpp"
#include "graph.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace dfgnn {
namespace {

// Appends the chunks of a split row and its merge entry.
void split_row(int32_t node, int32_t begin, int32_t end, int32_t chunk, HostPlan& plan, HostPlan::Part& part) {
  const int32_t first = plan.num_slots;
  for (int32_t b = begin; b < end; b += chunk)
    part.segments.push_back({node, b, std::min(end, b + chunk), plan.num_slots++});
  plan.hubs.push_back({node, first, plan.num_slots - first, 0});
}

}  // namespace

HostPlan make_plan(const Compressed& c, const Schedule& s) {
  HostPlan plan;
  using Part = HostPlan::Part;
  switch (s.solver) {
    case SolverId::Subwarp:
    case SolverId::BlockRow:
      plan.parts.push_back(Part{s.lanes, true, 0, HostPlan::kNoLimit, {}});
      break;
    case SolverId::HubSplit: {
      // Chunks of hub rows first (the longest work starts first), then the other rows whole.
      Part chunks{s.lanes, false, 0, HostPlan::kNoLimit, {}};
      for (int32_t i = 0; i < c.num_rows; ++i)
        if (c.degree(i) >= s.threshold) split_row(i, c.ptr[i], c.ptr[i + 1], s.chunk, plan, chunks);
      if (!chunks.segments.empty()) plan.parts.push_back(std::move(chunks));
      plan.parts.push_back(Part{s.lanes, true, 0, s.threshold, {}});
      break;
    }
    case SolverId::Hybrid: {
      // Degree bins: [threshold, inf) split into chunks on whole warps, [mid, threshold) whole
      // warps per row, [0, mid) small groups.
      Part chunks{32, false, 0, HostPlan::kNoLimit, {}};
      for (int32_t i = 0; i < c.num_rows; ++i)
        if (c.degree(i) >= s.threshold) split_row(i, c.ptr[i], c.ptr[i + 1], s.chunk, plan, chunks);
      if (!chunks.segments.empty()) plan.parts.push_back(std::move(chunks));
      plan.parts.push_back(Part{32, true, s.mid, s.threshold, {}});
      plan.parts.push_back(Part{s.lanes, true, 0, s.mid, {}});
      break;
    }
    case SolverId::EdgeBalanced: {
      // Consecutive rows gathered into groups costing at most `chunk` (a row costs its edges plus
      // one for its own loads and stores); a row with more than `chunk` edges is split instead,
      // into pieces of chunk / groups edges, one lane group's part of a block's edges (whole-chunk
      // pieces on one group each made hubs the tail, up to 3.9x slower on blogcatalog), and ends
      // the group before it.
      const int32_t piece = std::max(1, s.chunk / s.groups);
      Part chunks{s.lanes, false, 0, HostPlan::kNoLimit, {}};
      Part groups{s.lanes, false, 0, HostPlan::kNoLimit, {}, true};
      int32_t first = 0, cost = 0;
      auto close = [&](int32_t end) {
        if (end > first) groups.segments.push_back({first, end, c.ptr[first], c.ptr[end]});
      };
      for (int32_t i = 0; i < c.num_rows; ++i) {
        const int32_t degree = c.degree(i);
        if (degree > s.chunk) {
          close(i);
          split_row(i, c.ptr[i], c.ptr[i + 1], piece, plan, chunks);
          first = i + 1;
          cost = 0;
          continue;
        }
        if (cost + degree + 1 > s.chunk && i > first) {
          close(i);
          first = i;
          cost = 0;
        }
        cost += degree + 1;
      }
      close(c.num_rows);
      if (!chunks.segments.empty()) plan.parts.push_back(std::move(chunks));
      if (!groups.segments.empty()) plan.parts.push_back(std::move(groups));
      break;
    }
  }
  return plan;
}

const Plan::Device& Plan::device() const {
  std::call_once(uploaded_, [&] {
    for (const HostPlan::Part& part : host_.parts)
      device_.parts.push_back(part.whole_rows ? DeviceBuffer() : upload(part.segments.data(), part.segments.size() * sizeof(Segment)));
    device_.hubs = upload(host_.hubs.data(), host_.hubs.size() * sizeof(Segment));
  });
  return device_;
}

std::shared_ptr<const Plan> get_plan(const Graph& graph, PassKind pass, const Schedule& s) {
  const bool csc = pass == PassKind::BackwardCol;
  // Only the work-list fields shape a plan (lanes of a part follow from the schedule); groups do
  // for edge_balanced (the size of split-row pieces).
  const int32_t groups = s.solver == SolverId::EdgeBalanced ? s.groups : 0;
  const std::string key = fmt::format("{}:{}:{}:{}:{}:{}", csc ? "csc" : "csr", static_cast<int>(s.solver), s.mid,
                                      s.threshold, s.chunk, groups);
  return graph.plan(key, [&] { return std::make_shared<const Plan>(make_plan(csc ? graph.csc_rows() : graph.csr_rows(), s)); });
}

}  // namespace dfgnn
