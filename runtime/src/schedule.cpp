#include "schedule.hpp"

#include "error.hpp"
#include "op.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

namespace dfgnn {
namespace {

constexpr int32_t kMaxRegistersPerLane = 64;  // channels a lane holds; beyond, kernels would spill
constexpr int32_t kMaxTeamSharedBytes = 48 * 1024;
constexpr int32_t kDefaultSplit = 256;  // default hub threshold and chunk (edges)

int32_t next_pow2(int32_t x) {
  int32_t p = 1;
  while (p < x) p *= 2;
  return p;
}

int32_t max_degree(const PassProblem& p) { return static_cast<int32_t>(p.fingerprint->max_degree); }

// Largest vector width for the dtype that divides D and the alignment allows.
int32_t best_vec(const PassProblem& p) {
  const int32_t by_bytes = 16 / static_cast<int32_t>(dtype_size(p.op.dtype));
  int32_t v = std::min(by_bytes, p.max_vec);
  while (v > 1 && p.op.dim % v != 0) v /= 2;
  return v;
}

// Hub thresholds drawn from the graph's own degree distribution (tail quantiles and multiples of
// the mean), clipped to [64, max degree).
std::vector<int32_t> threshold_candidates(const PassProblem& p) {
  const dfgnn_fingerprint_t& fp = *p.fingerprint;
  std::set<int32_t> t;
  for (double q : {fp.p99, fp.p999, 8 * fp.mean_degree, 32 * fp.mean_degree, 256.0, 1024.0, 4096.0}) {
    const int32_t v = static_cast<int32_t>(std::ceil(q));
    if (v >= 64 && next_pow2(v) < fp.max_degree) t.insert(next_pow2(v));
  }
  return {t.begin(), t.end()};
}

std::string common_invalid_reason(const PassProblem& p, const Schedule& s) {
  const int32_t lanes = s.lanes;
  if (lanes != 4 && lanes != 8 && lanes != 16 && lanes != 32) return fmt::format("lanes = {} is not 4, 8, 16 or 32", lanes);
  if (s.vec < 1 || s.vec > 8 || (s.vec & (s.vec - 1)) != 0) return fmt::format("vec = {} is not 1, 2, 4 or 8", s.vec);
  if (s.vec * static_cast<int32_t>(dtype_size(p.op.dtype)) > 16)
    return fmt::format("vec = {} {} values exceed a 16-byte load", s.vec, dtype_name(p.op.dtype));
  if (p.op.dim % s.vec != 0) return fmt::format("vec = {} does not divide D = {}", s.vec, p.op.dim);
  if (s.vec > p.max_vec) return fmt::format("vec = {} exceeds what the data's alignment allows ({})", s.vec, p.max_vec);
  if (s.groups < 1 || s.groups * lanes > 1024 || (s.groups * lanes) % 32 != 0)
    return fmt::format("groups = {} of {} lanes is not a block of 32..1024 whole warps", s.groups, lanes);
  if (s.team < 1 || s.groups % s.team != 0) return fmt::format("team = {} does not divide groups = {}", s.team, s.groups);
  if (registers_per_lane(p.op.dim, lanes, s.vec) > kMaxRegistersPerLane)
    return fmt::format("D = {} needs {} values per lane with {} lanes (limit {})", p.op.dim,
                       registers_per_lane(p.op.dim, lanes, s.vec), lanes, kMaxRegistersPerLane);
  if (s.team > 1 && s.groups * state_floats(p.op, p.pass) * 4 > kMaxTeamSharedBytes)
    return fmt::format("team merge needs {} bytes of shared memory (limit {})",
                       s.groups * state_floats(p.op, p.pass) * 4, kMaxTeamSharedBytes);
  return {};
}

Schedule base_schedule(const PassProblem& p, SolverId id) {
  Schedule s;
  s.solver = id;
  s.vec = best_vec(p);
  s.lanes = lanes_for_dim(p.op.dim, s.vec);
  s.groups = 256 / s.lanes;
  return s;
}

// ---------------------------------------------------------------- solvers
class SubwarpSolver final : public Solver {
 public:
  SolverId id() const override { return SolverId::Subwarp; }
  bool applicable(const PassProblem&) const override { return true; }
  Schedule default_schedule(const PassProblem& p) const override { return base_schedule(p, id()); }
  std::string invalid_reason(const PassProblem& p, const Schedule& s) const override {
    if (s.team != 1) return "subwarp schedules have team = 1";
    if (s.mid != 0 || s.threshold != 0 || s.chunk != 0) return "subwarp schedules take no mid/threshold/chunk";
    return Solver::invalid_reason(p, s);
  }
  std::vector<Schedule> enumerate(const PassProblem& p) const override {
    std::vector<Schedule> out;
    const Schedule base = default_schedule(p);
    for (int32_t lanes : {4, 8, 16, 32}) {
      if (lanes > 2 * base.lanes) continue;  // mostly idle lanes
      for (int32_t threads : {128, 256, 512}) {
        Schedule s = base;
        s.lanes = lanes;
        s.groups = threads / lanes;
        if (invalid_reason(p, s).empty()) out.push_back(s);
      }
    }
    return out;
  }
};

class BlockRowSolver final : public Solver {
 public:
  SolverId id() const override { return SolverId::BlockRow; }
  // Worth trying only when rows are long enough to keep several warps busy.
  bool applicable(const PassProblem& p) const override { return p.fingerprint->mean_degree >= 16 || max_degree(p) >= 256; }
  Schedule default_schedule(const PassProblem& p) const override {
    Schedule s = base_schedule(p, id());
    s.lanes = 32;
    s.team = 4;
    s.groups = 4;
    return s;
  }
  std::string invalid_reason(const PassProblem& p, const Schedule& s) const override {
    if (s.team < 2) return "block_row schedules have team >= 2";
    if (s.mid != 0 || s.threshold != 0 || s.chunk != 0) return "block_row schedules take no mid/threshold/chunk";
    return Solver::invalid_reason(p, s);
  }
  std::vector<Schedule> enumerate(const PassProblem& p) const override {
    std::vector<Schedule> out;
    for (int32_t lanes : {16, 32})
      for (int32_t team : {2, 4, 8}) {
        Schedule s = default_schedule(p);
        s.lanes = lanes;
        s.team = team;
        s.groups = team * (lanes == 16 ? 2 : 1);
        if (invalid_reason(p, s).empty()) out.push_back(s);
      }
    return out;
  }
};

class HubSplitSolver final : public Solver {
 public:
  SolverId id() const override { return SolverId::HubSplit; }
  bool applicable(const PassProblem& p) const override { return max_degree(p) >= 128; }
  Schedule default_schedule(const PassProblem& p) const override {
    Schedule s = base_schedule(p, id());
    s.threshold = kDefaultSplit;
    s.chunk = kDefaultSplit;
    return s;
  }
  std::string invalid_reason(const PassProblem& p, const Schedule& s) const override {
    if (s.team != 1) return "hub_split schedules have team = 1";
    if (s.mid != 0) return "hub_split schedules take no mid";
    if (s.threshold < 1 || s.chunk < 1) return "hub_split needs threshold >= 1 and chunk >= 1";
    return Solver::invalid_reason(p, s);
  }
  std::vector<Schedule> enumerate(const PassProblem& p) const override {
    std::vector<Schedule> out;
    const Schedule base = default_schedule(p);
    for (int32_t lanes : {base.lanes, 32})
      for (int32_t threshold : threshold_candidates(p))
        for (int32_t chunk : {128, 256, 512, 1024}) {
          if (chunk > threshold) continue;
          Schedule s = base;
          s.lanes = lanes;
          s.groups = 256 / lanes;
          s.threshold = threshold;
          s.chunk = chunk;
          if (invalid_reason(p, s).empty() && std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
        }
    return out;
  }
};

class HybridSolver final : public Solver {
 public:
  SolverId id() const override { return SolverId::Hybrid; }
  bool applicable(const PassProblem& p) const override { return p.fingerprint->cv >= 1.0 && max_degree(p) >= 64; }
  Schedule default_schedule(const PassProblem& p) const override {
    Schedule s = base_schedule(p, id());
    s.lanes = std::min<int32_t>(s.lanes, 8);
    s.groups = 256 / s.lanes;
    s.mid = 32;
    s.threshold = 2048;
    s.chunk = 512;
    return s;
  }
  std::string invalid_reason(const PassProblem& p, const Schedule& s) const override {
    if (s.team != 1) return "hybrid schedules have team = 1";
    if (s.lanes == 32) return "hybrid schedules use fewer than 32 lanes for their low-degree bin";
    if (s.mid < 1 || s.threshold <= s.mid || s.chunk < 1) return "hybrid needs 1 <= mid < threshold and chunk >= 1";
    if (std::string r = Solver::invalid_reason(p, s); !r.empty()) return r;
    Schedule warp = s;  // the high-degree bins run whole warps
    warp.lanes = 32;
    warp.groups = 8;
    return Solver::invalid_reason(p, warp);
  }
  std::vector<Schedule> enumerate(const PassProblem& p) const override {
    std::vector<Schedule> out;
    const Schedule base = default_schedule(p);
    std::vector<int32_t> thresholds = threshold_candidates(p);
    thresholds.push_back(base.threshold);
    for (int32_t lanes : {4, 8, 16})
      for (int32_t mid : {8, 16, 32, 64})
        for (int32_t threshold : thresholds) {
          Schedule s = base;
          s.lanes = lanes;
          s.groups = 256 / lanes;
          s.mid = mid;
          s.threshold = threshold;
          s.chunk = 512;
          if (invalid_reason(p, s).empty() && std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
        }
    return out;
  }
};

// Blocks take row groups of about `chunk` edges (a row costs its edges plus one) and split them
// evenly over their groups; rows longer than `chunk` are split into pieces of chunk / groups edges
// and merged as in hub_split. Balances blocks whatever the degree distribution, at the price of
// merging rows cut by share boundaries.
class EdgeBalancedSolver final : public Solver {
 public:
  SolverId id() const override { return SolverId::EdgeBalanced; }
  bool applicable(const PassProblem&) const override { return true; }
  Schedule default_schedule(const PassProblem& p) const override {
    Schedule s = base_schedule(p, id());
    s.chunk = 64 * s.groups;
    return s;
  }
  std::string invalid_reason(const PassProblem& p, const Schedule& s) const override {
    if (s.team != 1) return "edge_balanced schedules have team = 1";
    if (s.mid != 0 || s.threshold != 0) return "edge_balanced schedules take no mid/threshold";
    if (s.chunk < 1) return "edge_balanced needs chunk >= 1";
    if (std::string r = Solver::invalid_reason(p, s); !r.empty()) return r;
    // Split rows run on rows_kernel blocks of 256 threads (kernels shared with hub_split).
    Schedule split = s;
    split.groups = 256 / s.lanes;
    if (std::string r = Solver::invalid_reason(p, split); !r.empty()) return r;
    const int32_t parked = s.groups * state_floats(p.op, p.pass) * 4;
    if (parked > kMaxTeamSharedBytes)
      return fmt::format("parked row pieces need {} bytes of shared memory (limit {})", parked, kMaxTeamSharedBytes);
    return {};
  }
  std::vector<Schedule> enumerate(const PassProblem& p) const override {
    std::vector<Schedule> out;
    const Schedule base = default_schedule(p);
    for (int32_t threads : {256, 512})
      for (int32_t edges_per_group : {16, 64, 256}) {
        Schedule s = base;
        s.groups = threads / s.lanes;
        s.chunk = edges_per_group * s.groups;
        if (invalid_reason(p, s).empty()) out.push_back(s);
      }
    return out;
  }
};

}  // namespace

int32_t state_floats(const dfgnn_op_t& op, PassKind pass) {
  struct Shape {
    int nv, ns;
  };
  auto shape = [&]() -> Shape {
    if (pass == PassKind::Forward) return {1, 2};
    const bool row = pass == PassKind::BackwardRow;
    switch (op.model) {
      case DFGNN_MODEL_TRANSFORMER: return row ? Shape{1, 0} : Shape{2, 0};
      case DFGNN_MODEL_GAT: return row ? Shape{0, 1} : Shape{1, 1};
      case DFGNN_MODEL_GATV2: return row ? Shape{2, 0} : Shape{2, 0};
      case DFGNN_MODEL_AGNN: return row ? Shape{1, 2} : Shape{2, 1};
    }
    return {2, 2};
  }();
  return shape.ns + shape.nv * op.dim;
}

const char* pass_name(PassKind pass) {
  switch (pass) {
    case PassKind::Forward: return "forward";
    case PassKind::BackwardRow: return "backward_row";
    case PassKind::BackwardCol: return "backward_col";
  }
  return "unknown";
}

const char* solver_name(SolverId id) {
  switch (id) {
    case SolverId::Subwarp: return "subwarp";
    case SolverId::BlockRow: return "block_row";
    case SolverId::HubSplit: return "hub_split";
    case SolverId::Hybrid: return "hybrid";
    case SolverId::EdgeBalanced: return "edge_balanced";
  }
  return "unknown";
}

int32_t lanes_for_dim(int32_t dim, int32_t vec) {
  return std::clamp(next_pow2((dim + vec - 1) / vec), 4, 32);
}

int32_t registers_per_lane(int32_t dim, int32_t lanes, int32_t vec) {
  const int32_t per_chunk = lanes * vec;
  return (dim + per_chunk - 1) / per_chunk * vec;
}

std::string to_string(const Schedule& s) {
  std::string text = std::string(solver_name(s.solver)) + ":";
  bool first = true;
  Schedule::visit(s, [&](const char* name, int32_t value) {
    text += fmt::format("{}{}={}", first ? "" : ",", name, value);
    first = false;
  });
  return text;
}

Schedule parse_schedule(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string name = text.substr(0, colon);
  const Solver* solver = nullptr;
  for (const Solver* s : all_solvers())
    if (name == solver_name(s->id())) solver = s;
  if (solver == nullptr) {
    std::string known;
    for (const Solver* s : all_solvers()) known += std::string(known.empty() ? "" : ", ") + solver_name(s->id());
    fail(DFGNN_STATUS_PARSE_ERROR, "schedule '{}': unknown solver '{}' ({})", text, name, known);
  }
  Schedule s;
  s.solver = solver->id();
  std::string rest = colon == std::string::npos ? "" : text.substr(colon + 1);
  size_t pos = 0;
  while (pos < rest.size()) {
    size_t comma = rest.find(',', pos);
    if (comma == std::string::npos) comma = rest.size();
    const std::string item = rest.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) fail(DFGNN_STATUS_PARSE_ERROR, "schedule '{}': '{}' is not name=value", text, item);
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    bool known = false;
    Schedule::visit(s, [&](const char* field, int32_t& member) {
      if (key != field) return;
      known = true;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), member);
      if (ec != std::errc() || end != value.data() + value.size())
        fail(DFGNN_STATUS_PARSE_ERROR, "schedule '{}': {} = '{}' is not an integer", text, key, value);
    });
    if (!known) fail(DFGNN_STATUS_PARSE_ERROR, "schedule '{}': unknown field '{}'", text, key);
  }
  return s;
}

std::string Solver::invalid_reason(const PassProblem& problem, const Schedule& s) const {
  if (s.solver != id()) return fmt::format("schedule belongs to solver {}, not {}", solver_name(s.solver), solver_name(id()));
  return common_invalid_reason(problem, s);
}

const std::vector<const Solver*>& all_solvers() {
  static const SubwarpSolver subwarp;
  static const BlockRowSolver block_row;
  static const HubSplitSolver hub_split;
  static const HybridSolver hybrid;
  static const EdgeBalancedSolver edge_balanced;
  static const std::vector<const Solver*> solvers{&subwarp, &block_row, &hub_split, &hybrid, &edge_balanced};
  return solvers;
}

const Solver* find_solver(SolverId id) {
  for (const Solver* s : all_solvers())
    if (s->id() == id) return s;
  return nullptr;
}

Schedule default_schedule(const PassProblem& problem) {
  const Solver* hub = find_solver(SolverId::HubSplit);
  // A long row serialises one lane group while the rest of the GPU idles: split rows of 256 or
  // more edges into 256-edge chunks (the best hub_split setting measured on blogcatalog and
  // Enron; see bench/results).
  const bool long_rows = problem.fingerprint->max_degree >= kDefaultSplit && hub->applicable(problem);
  const Solver* chosen = long_rows ? hub : find_solver(SolverId::Subwarp);
  Schedule s = chosen->default_schedule(problem);
  // Defaults are valid wherever the kernels can serve the problem at all; only sizes beyond the
  // register budget (very large D) have no schedule.
  if (const std::string reason = chosen->invalid_reason(problem, s); !reason.empty())
    fail(DFGNN_STATUS_NOT_SUPPORTED, "no schedule serves {} with D = {}: {}", model_name(problem.op.model),
         problem.op.dim, reason);
  return s;
}

std::vector<Schedule> enumerate_schedules(const PassProblem& problem) {
  std::vector<Schedule> out;
  for (const Solver* s : all_solvers()) {
    if (!s->applicable(problem)) continue;
    for (const Schedule& sched : s->enumerate(problem)) out.push_back(sched);
  }
  return out;
}

void require_valid(const PassProblem& problem, const Schedule& s) {
  const Solver* solver = find_solver(s.solver);
  if (solver == nullptr) fail(DFGNN_STATUS_INVALID_ARGUMENT, "unknown solver id {}", static_cast<int>(s.solver));
  const std::string reason = solver->invalid_reason(problem, s);
  if (!reason.empty())
    fail(DFGNN_STATUS_INVALID_ARGUMENT, "schedule {} is not valid for {} {} (D = {}): {}", to_string(s),
         model_name(problem.op.model), pass_name(problem.pass), problem.op.dim, reason);
}

}  // namespace dfgnn
