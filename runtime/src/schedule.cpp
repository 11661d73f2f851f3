// The schedule's text form: "SOLVER:field=value,...", one field list (Schedule::visit).
#include "schedule.hpp"

#include "error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <iterator>
#include <set>

namespace dfgnn {
namespace {

// Each solver's name in schedule text, in id order (the order parse errors list them in).
struct SolverName {
  SolverId id;
  const char* name;
};
constexpr SolverName kSolverNames[] = {
    {SolverId::Subwarp, "subwarp"},
    {SolverId::BlockRow, "block_row"},
    {SolverId::HubSplit, "hub_split"},
    {SolverId::Hybrid, "hybrid"},
    {SolverId::EdgeBalanced, "edge_balanced"},
};

}  // namespace

const char* pass_name(PassKind pass) {
  switch (pass) {
    case PassKind::Forward: return "forward";
    case PassKind::BackwardRow: return "backward_row";
    case PassKind::BackwardCol: return "backward_col";
  }
  return "unknown";
}

const char* solver_name(SolverId id) {
  const auto it =
      std::find_if(std::begin(kSolverNames), std::end(kSolverNames), [&](const SolverName& n) { return n.id == id; });
  return it == std::end(kSolverNames) ? "unknown" : it->name;
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
  const auto solver =
      std::find_if(std::begin(kSolverNames), std::end(kSolverNames), [&](const SolverName& n) { return name == n.name; });
  if (solver == std::end(kSolverNames)) {
    std::string known;
    for (const SolverName& n : kSolverNames) known += std::string(known.empty() ? "" : ", ") + n.name;
    fail(DFGNN_STATUS_PARSE_ERROR, "schedule '{}': unknown solver '{}' ({})", text, name, known);
  }
  Schedule s;
  s.solver = solver->id;
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

int32_t pack_key_bits(const KeyBits& bits) { return bits.max_vec + kEdgeFeaturesKeyBits * bits.edge_features; }

int32_t pack_key_bits(const PassProblem& problem) {
  return pack_key_bits({problem.max_vec, problem.op.edge_features ? 1 : 0});
}

KeyBits unpack_key_bits(int32_t key_bits) {
  return {key_bits % kEdgeFeaturesKeyBits, key_bits / kEdgeFeaturesKeyBits};
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

}  // namespace dfgnn
