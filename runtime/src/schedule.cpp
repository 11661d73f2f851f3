#include "schedule.hpp"

#include "default_rule.hpp"
#include "error.hpp"
#include "op.hpp"
#include "solver.hpp"

#include <algorithm>
#include <charconv>
#include <set>

namespace dfgnn {

int32_t state_floats(const dfgnn_op_t& op, PassKind pass) {
  const ModelTraits traits = traits_of(op.model);
  const StateShape shape = pass == PassKind::Forward       ? traits.forward
                           : pass == PassKind::BackwardRow ? traits.backward_row
                                                           : traits.backward_col;
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
  const Solver* solver = find_solver(id);
  return solver == nullptr ? "unknown" : solver->name();
}

int32_t lanes_for_dim(int32_t dim, int32_t vec) {
  return static_cast<int32_t>(std::clamp<int64_t>(solvers::next_pow2((int64_t{dim} + vec - 1) / vec), 4, 32));
}

int32_t lanes_per_head_for_dim(int32_t dim, int32_t vec) {
  return static_cast<int32_t>(std::clamp<int64_t>(solvers::next_pow2((int64_t{dim} + vec - 1) / vec), 1, 32));
}

int32_t default_group_heads(const dfgnn_op_t& op, int32_t vec) {
  if (op.heads <= 1 || op.dim > 32) return 1;
  const int32_t per_head = lanes_per_head_for_dim(op.dim, vec);
  int32_t heads = 1;
  while (op.heads % (heads * 2) == 0 && heads * 2 * per_head <= 32) heads *= 2;
  return heads;
}

int32_t registers_per_lane(int32_t dim, int32_t lanes, int32_t vec) {
  // In 64 bits: D near 2^31 must not wrap; the result is at most D, so it fits again.
  const int64_t per_chunk = int64_t{lanes} * vec;
  return static_cast<int32_t>((int64_t{dim} + per_chunk - 1) / per_chunk * vec);
}

std::string to_string(const Schedule& s) {
  std::string text = std::string(solver_name(s.solver)) + ":";
  bool first = true;
  Schedule::visit(s, [&](const char* name, int32_t value, std::optional<int32_t> left_out_at) {
    if (value == left_out_at) return;
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
    if (name == s->name()) solver = s;
  if (solver == nullptr) {
    std::string known;
    for (const Solver* s : all_solvers()) known += std::string(known.empty() ? "" : ", ") + s->name();
    fail(DFGNN_STATUS_PARSE_ERROR, "schedule '{}': unknown solver '{}' ({})", text, name, known);
  }
  Schedule s;
  s.solver = solver->id();
  std::string rest = colon == std::string::npos ? "" : text.substr(colon + 1);
  std::set<std::string> seen;  // a repeated field would otherwise let the last value win silently
  size_t pos = 0;
  while (pos < rest.size()) {
    size_t comma = rest.find(',', pos);
    if (comma == std::string::npos) comma = rest.size();
    const std::string item = rest.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) fail(DFGNN_STATUS_PARSE_ERROR, "schedule '{}': '{}' is not name=value", text, item);
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (!seen.insert(key).second) fail(DFGNN_STATUS_PARSE_ERROR, "schedule '{}': field '{}' is given twice", text, key);
    bool known = false;
    Schedule::visit(s, [&](const char* field, int32_t& member, std::optional<int32_t>) {
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

SchedulePair parse_schedules(dfgnn_direction_t direction, const std::string& text) {
  const size_t bar = text.find('|');
  SchedulePair s;
  if (direction == DFGNN_FORWARD) {
    if (bar != std::string::npos)
      fail(DFGNN_STATUS_PARSE_ERROR, "schedule '{}': '|' separates the backward's row and column schedules; a forward takes one", text);
    s.row = parse_schedule(text);
    return s;
  }
  s.row = parse_schedule(text.substr(0, bar));
  s.col = bar == std::string::npos ? s.row : parse_schedule(text.substr(bar + 1));
  return s;
}

std::string to_string(dfgnn_direction_t direction, const SchedulePair& s) {
  return direction == DFGNN_FORWARD ? to_string(s.row) : to_string(s.row) + "|" + to_string(s.col);
}

DefaultChoice default_choice(const PassProblem& problem) {
  return choose_default(hand_rule_selected() ? nullptr : embedded_rule(), problem);
}

Schedule default_schedule(const PassProblem& problem) { return default_choice(problem).schedule; }

Schedule hand_rule_schedule(const PassProblem& problem) {
  const Solver* hub = find_solver(SolverId::HubSplit);
  // A long row serialises one lane group while the rest of the GPU idles: split rows past the
  // hub solver's default threshold (solvers::default_split) into chunks.
  const bool long_rows = hub->applicable(problem) &&
                         problem.fingerprint->max_degree >= hub->default_schedule(problem).threshold;
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
