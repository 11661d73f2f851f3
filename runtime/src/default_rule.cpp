#include "default_rule.hpp"

#include "error.hpp"
#include "logging.hpp"
#include "op.hpp"
#include "solver.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <iterator>

namespace dfgnn {

// Generated at build time from runtime/data/default_rule.json (cmake/embed_file.cmake).
extern const char kDefaultRuleJson[];

namespace {

using Json = nlohmann::json;

constexpr const char* kFormat = "dfgnn-default-rule";
constexpr int kVersion = 1;

double log2_at_least_1(int64_t x) { return std::log2(static_cast<double>(std::max<int64_t>(x, 1))); }

// The features, as tools/fit_default_rule.py's FEATURES computes them: same names, same formulas.
struct Feature {
  const char* name;
  double (*value)(const dfgnn_fingerprint_t& fp, const PassProblem& p);
};
const Feature kFeatures[] = {
    {"log2_nodes", [](const dfgnn_fingerprint_t& fp, const PassProblem&) { return log2_at_least_1(fp.num_nodes); }},
    {"log2_edges", [](const dfgnn_fingerprint_t& fp, const PassProblem&) { return log2_at_least_1(fp.num_edges); }},
    {"mean_degree", [](const dfgnn_fingerprint_t& fp, const PassProblem&) { return fp.mean_degree; }},
    {"log2_max_degree",
     [](const dfgnn_fingerprint_t& fp, const PassProblem&) { return std::log2(static_cast<double>(fp.max_degree) + 1); }},
    {"p50", [](const dfgnn_fingerprint_t& fp, const PassProblem&) { return fp.p50; }},
    {"p90", [](const dfgnn_fingerprint_t& fp, const PassProblem&) { return fp.p90; }},
    {"p99", [](const dfgnn_fingerprint_t& fp, const PassProblem&) { return fp.p99; }},
    {"p999", [](const dfgnn_fingerprint_t& fp, const PassProblem&) { return fp.p999; }},
    {"cv", [](const dfgnn_fingerprint_t& fp, const PassProblem&) { return fp.cv; }},
    {"gini", [](const dfgnn_fingerprint_t& fp, const PassProblem&) { return fp.gini; }},
    {"top1pct_edge_share", [](const dfgnn_fingerprint_t& fp, const PassProblem&) { return fp.top1pct_edge_share; }},
    {"hub_row_share",
     [](const dfgnn_fingerprint_t& fp, const PassProblem&) {
       return static_cast<double>(fp.hub_rows[0]) / static_cast<double>(std::max<int64_t>(fp.num_nodes, 1));
     }},
    {"log2_long_rows",
     [](const dfgnn_fingerprint_t& fp, const PassProblem&) { return std::log2(static_cast<double>(fp.hub_rows[2]) + 1); }},
    {"model", [](const dfgnn_fingerprint_t&, const PassProblem& p) { return static_cast<double>(p.op.model); }},
    {"pass", [](const dfgnn_fingerprint_t&, const PassProblem& p) { return static_cast<double>(p.pass); }},
    {"heads", [](const dfgnn_fingerprint_t&, const PassProblem& p) { return static_cast<double>(p.op.heads); }},
    {"dim", [](const dfgnn_fingerprint_t&, const PassProblem& p) { return static_cast<double>(p.op.dim); }},
    {"dtype_bytes",
     [](const dfgnn_fingerprint_t&, const PassProblem& p) { return static_cast<double>(dtype_size(p.op.dtype)); }},
};

int32_t feature_index(std::string_view name) {
  for (size_t i = 0; i < std::size(kFeatures); ++i)
    if (name == kFeatures[i].name) return static_cast<int32_t>(i);
  return -1;
}

const Json& member(const Json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) fail(DFGNN_STATUS_PARSE_ERROR, "default rule: {} has no \"{}\"", where, key);
  return *it;
}

int32_t node_index(const Json& v, const char* key, size_t at, size_t count) {
  const std::string where = fmt::format("node {}", at);
  const Json& j = member(v, key, where);
  // Children after their parent: the walk always ends, and a cycle cannot be written.
  if (!j.is_number_integer() || j.get<int64_t>() <= static_cast<int64_t>(at) || j.get<int64_t>() >= static_cast<int64_t>(count))
    fail(DFGNN_STATUS_PARSE_ERROR, "default rule: {} \"{}\" = {} is not a node index in ({}, {})", where, key, j.dump(),
         at, count);
  return static_cast<int32_t>(j.get<int64_t>());
}

}  // namespace

std::optional<double> rule_feature(std::string_view name, const PassProblem& problem) {
  const int32_t i = feature_index(name);
  if (i < 0) return std::nullopt;
  return kFeatures[i].value(*problem.fingerprint, problem);
}

FittedRule FittedRule::parse(const std::string& text) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    fail(DFGNN_STATUS_PARSE_ERROR, "default rule: not valid JSON: {}", e.what());
  }
  if (!j.is_object()) fail(DFGNN_STATUS_PARSE_ERROR, "default rule: expected a JSON object, got {}", j.type_name());
  const Json& format = member(j, "format", "the rule");
  if (format != kFormat)
    fail(DFGNN_STATUS_PARSE_ERROR, "default rule: \"format\" is {}, not \"{}\"", format.dump(), kFormat);
  const Json& version = member(j, "version", "the rule");
  if (version != kVersion)
    fail(DFGNN_STATUS_PARSE_ERROR, "default rule: \"version\" {} is not {} (this build's)", version.dump(), kVersion);
  const Json& nodes = member(j, "nodes", "the rule");
  if (!nodes.is_array() || nodes.empty())
    fail(DFGNN_STATUS_PARSE_ERROR, "default rule: \"nodes\" must be a non-empty array");

  FittedRule rule;
  for (size_t at = 0; at < nodes.size(); ++at) {
    const Json& v = nodes[at];
    const std::string where = fmt::format("node {}", at);
    if (!v.is_object()) fail(DFGNN_STATUS_PARSE_ERROR, "default rule: {} is not an object", where);
    Node node;
    if (v.contains("leaf")) {
      const Json& id = v["leaf"];
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
        fail(DFGNN_STATUS_PARSE_ERROR, "default rule: {} \"leaf\" = {} is not a leaf number", where, id.dump());
      Leaf leaf;
      leaf.id = static_cast<int32_t>(id.get<int64_t>());
      const Json& schedules = member(v, "schedules", where);
      if (!schedules.is_array()) fail(DFGNN_STATUS_PARSE_ERROR, "default rule: {} \"schedules\" is not an array", where);
      for (const Json& s : schedules) {
        if (!s.is_string()) fail(DFGNN_STATUS_PARSE_ERROR, "default rule: {} holds a schedule that is not text: {}", where, s.dump());
        leaf.schedules.push_back(s.get<std::string>());
      }
      node.leaf = static_cast<int32_t>(rule.leaves_.size());
      rule.leaves_.push_back(std::move(leaf));
    } else {
      const Json& feature = member(v, "feature", where);
      node.feature = feature.is_string() ? feature_index(feature.get<std::string>()) : -1;
      if (node.feature < 0) {
        std::string known;
        for (const Feature& f : kFeatures) known += std::string(known.empty() ? "" : ", ") + f.name;
        fail(DFGNN_STATUS_PARSE_ERROR, "default rule: {} splits on unknown feature {} (known: {})", where, feature.dump(), known);
      }
      const Json& threshold = member(v, "threshold", where);
      if (!threshold.is_number() || !std::isfinite(threshold.get<double>()))
        fail(DFGNN_STATUS_PARSE_ERROR, "default rule: {} \"threshold\" = {} is not a finite number", where, threshold.dump());
      node.threshold = threshold.get<double>();
      node.left = node_index(v, "left", at, nodes.size());
      node.right = node_index(v, "right", at, nodes.size());
    }
    rule.nodes_.push_back(node);
  }
  if (const auto fit = j.find("fit"); fit != j.end() && fit->is_object())
    if (const auto domain = fit->find("domain"); domain != fit->end()) {
      const auto edges = domain->is_object() ? domain->find("max_log2_edges") : domain->end();
      if (!domain->is_object() || edges == domain->end() || !edges->is_number() || !std::isfinite(edges->get<double>()))
        fail(DFGNN_STATUS_PARSE_ERROR, "default rule: \"fit\": \"domain\" must hold a finite \"max_log2_edges\", not {}",
             domain->dump());
      rule.max_log2_edges_ = edges->get<double>();
      if (const auto shapes = domain->find("op_shapes"); shapes != domain->end()) {
        const auto bad = [&] {
          fail(DFGNN_STATUS_PARSE_ERROR, "default rule: \"fit\": \"domain\": \"op_shapes\" must be a list of "
               "[model, dtype, heads, dim, variant] integers, not {}", shapes->dump());
        };
        if (!shapes->is_array()) bad();
        for (const Json& shape : *shapes) {
          if (!shape.is_array() || shape.size() != 5) bad();
          std::array<int32_t, 5> key{};
          for (size_t k = 0; k < 5; ++k) {
            if (!shape[k].is_number_integer()) bad();
            key[k] = shape[k].get<int32_t>();
          }
          rule.op_shapes_.insert(key);
        }
      }
    }
  return rule;
}

std::string FittedRule::beyond_domain(const PassProblem& problem) const {
  if (!max_log2_edges_) return {};
  const double edges = log2_at_least_1(problem.fingerprint->num_edges);
  if (edges <= *max_log2_edges_ + 1) return {};
  return fmt::format("2^{:.1f} edges, past the fitted rule's 2^{:.1f}", edges, *max_log2_edges_);
}

const FittedRule::Leaf& FittedRule::leaf_for(const PassProblem& problem) const {
  const Node* node = &nodes_[0];
  while (node->leaf < 0) {
    const double value = kFeatures[node->feature].value(*problem.fingerprint, problem);
    node = &nodes_[value <= node->threshold ? node->left : node->right];
  }
  return leaves_[node->leaf];
}

namespace {

// Whether the tuner would race `s` here: the fit scored a text where the tuner measured it, and
// counted it as skipped elsewhere, so a valid text outside the search space is not taken.
bool in_space(const Solver& solver, const PassProblem& problem, const Schedule& s) {
  if (!solver.invalid_reason(problem, s).empty()) return false;
  const std::vector<Schedule> space = solver.enumerate(problem);
  return std::find(space.begin(), space.end(), s) != space.end();
}

// A leaf's schedule on an op shape it does not fit (the rule was fitted on a few shapes: its lane
// mapping may not divide this D, or leave lanes idle where groups could span heads): the solver's
// own fit of it to this shape, where that is among the tuner's candidates.
std::optional<Schedule> fitted_to_shape(const Solver& solver, const PassProblem& problem, const Schedule& s) {
  const Schedule fitted = solver.fit_to_shape(problem, s);
  if (fitted == s || !in_space(solver, problem, fitted)) return std::nullopt;
  return fitted;
}

// A leaf's texts, those measured at the lane width nearest the problem's first (in powers of two;
// ties keep the leaf's order). Fitting keeps a text's edges per group, which were measured for its
// own lane width: leaf 3's 128-channel text (32 lanes, 64 edges per group) fitted to D = 7 ran
// PubMed's class layer 3x slower than a schedule of 16 edges per group (bench/results/2026-12-06b-h100.md).
std::vector<std::string> by_lane_distance(const std::vector<std::string>& texts, const PassProblem& problem) {
  std::vector<std::pair<int, std::string>> ranked;
  for (const std::string& text : texts) {
    int distance = INT_MAX;  // a text that does not parse or apply keeps its place at the end
    try {
      const Schedule s = parse_schedule(text);
      const Solver& solver = solver_of(s);
      if (solver.applicable(problem))
        distance = std::abs(static_cast<int>(std::bit_width(static_cast<uint32_t>(s.lanes))) -
                            static_cast<int>(std::bit_width(static_cast<uint32_t>(solver.default_schedule(problem).lanes))));
    } catch (const Error&) {
    }
    ranked.emplace_back(distance, text);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (auto& r : ranked) out.push_back(std::move(r.second));
  return out;
}

}  // namespace

std::optional<DefaultChoice> FittedRule::choose(const PassProblem& problem) const {
  // An op shape of the fit: the fit scored the leaf's first text the tuner raced there, else the hand
  // rule, and its leaves hold texts for this shape where one pays. No text is fitted to it.
  const dfgnn_op_t& op = problem.op;
  if (op_shapes_.count({static_cast<int32_t>(op.model), static_cast<int32_t>(op.dtype), op.heads, op.dim,
                        pack_key_bits(problem)}) != 0)
    return choose_text(problem, nullptr, false);
  // Where H > 1 heads need a fitted text, the text the leaf runs for one head of H * D channels (the
  // same bytes per node) is fitted, not the leaf's first, which is made for its widest op shape:
  // fitted to H = 8, D = 8 in bfloat16 that gave 64 edges per group on PubMed, 2.2x the time of the
  // leaf's own (1, 64) text with 16 (bench/results/2026-12-06-h100.md).
  std::optional<DefaultChoice> one_head;
  if (problem.op.heads > 1) {
    PassProblem wide = problem;
    wide.op.heads = 1;
    wide.op.dim = problem.op.heads * problem.op.dim;
    one_head = choose_text(wide, nullptr, true);
    if (one_head) one_head->rule += fmt::format(" for one head of {} channels", wide.op.dim);
  }
  return choose_text(problem, one_head ? &*one_head : nullptr, true);
}

std::optional<DefaultChoice> FittedRule::choose_text(const PassProblem& problem, const DefaultChoice* one_head,
                                                     bool may_fit) const {
  const Leaf& leaf = leaf_for(problem);
  // A text fitted to the problem's shape, labelled with where it came from.
  const auto fitted_choice = [&](const Schedule& s, const std::string& from) -> std::optional<DefaultChoice> {
    const Solver& solver = solver_of(s);
    if (!solver.applicable(problem)) return std::nullopt;
    const std::optional<Schedule> fitted = fitted_to_shape(solver, problem, s);
    if (!fitted) return std::nullopt;
    return DefaultChoice{*fitted, fmt::format("{}, lanes fitted to H = {}, D = {}", from, problem.op.heads,
                                              problem.op.dim)};
  };
  // The leaf's first text the tuner would race here, as it is: the fit measured it on this op shape
  // (the sweep covers the zoo's shapes, multi-head ones among them). Where none is, the one-head
  // text of the same bytes per node, else the leaf's text measured nearest this op shape's lane
  // width, fitted to the shape.
  for (const bool fit : {false, true}) {
    if (fit && !may_fit) break;
    for (const std::string& text : fit ? by_lane_distance(leaf.schedules, problem) : leaf.schedules) {
      try {
        const Schedule s = parse_schedule(text);
        const Solver& solver = solver_of(s);
        if (!solver.applicable(problem)) {
          if (!fit)
            log().debug("default rule leaf {}: {} does not apply to {} {}", leaf.id, text, model_name(problem.op.model),
                        pass_name(problem.pass));
          continue;
        }
        const bool usable = in_space(solver, problem, s);
        if (usable == fit) continue;  // the first round takes usable texts, the second fits the others
        // Off the fit's shapes, a one-head text where the solver's groups span heads takes the spanning
        // mapping (it was measured on one head, not on this shape).
        const bool spans = may_fit && s.heads == 1 && solver.default_schedule(problem).heads > 1;
        if (!usable || spans) {
          if (one_head != nullptr)
            if (auto c = fitted_choice(one_head->schedule, one_head->rule)) return c;
          if (auto c = fitted_choice(s, fmt::format("fitted rule leaf {}", leaf.id))) return c;
        }
        if (usable) return DefaultChoice{s, fmt::format("fitted rule leaf {}", leaf.id)};
        log().debug("default rule leaf {}: {} is not valid here or not among the tuner's candidates", leaf.id, text);
      } catch (const Error& e) {
        if (!fit) log().debug("default rule leaf {}: {} skipped: {}", leaf.id, text, e.what());
      }
    }
  }
  return std::nullopt;
}

std::shared_ptr<const FittedRule> parse_rule_or_warn(const std::string& text, std::string_view origin) {
  try {
    return std::make_shared<const FittedRule>(FittedRule::parse(text));
  } catch (const Error& e) {
    log().warn("the {} default rule is not usable, the hand rule answers instead: {}", origin, e.what());
    return nullptr;
  }
}

DefaultChoice choose_default(const FittedRule* rule, const PassProblem& problem) {
  if (rule != nullptr) {
    if (const std::string beyond = rule->beyond_domain(problem); !beyond.empty())
      return {hand_rule_schedule(problem), fmt::format("hand rule ({})", beyond)};
    if (std::optional<DefaultChoice> choice = rule->choose(problem)) return *std::move(choice);
  }
  return {hand_rule_schedule(problem), "hand rule"};
}

const char* embedded_rule_text() { return kDefaultRuleJson; }

const FittedRule* embedded_rule() {
  static const std::shared_ptr<const FittedRule> rule = parse_rule_or_warn(kDefaultRuleJson, "embedded");
  return rule.get();
}

bool hand_rule_selected() {
  const char* v = std::getenv("DFGNN_DEFAULT_RULE");
  if (v == nullptr || *v == '\0') return false;
  const std::string_view s(v);
  if (s == "hand") return true;
  if (s != "fitted") {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      log().warn("DFGNN_DEFAULT_RULE='{}' is not 'hand' or 'fitted'; the fitted rule answers", s);
  }
  return false;
}

// ---------------------------------------------------------------- the default rule
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

}  // namespace dfgnn
