// The fitted default rule: what dispatch runs for a problem nobody tuned. A small decision tree over
// fingerprint and op features, fitted on sweep data by tools/fit_default_rule.py; its JSON
// (runtime/data/default_rule.json) is embedded into the library at build time. Every leaf holds
// schedule texts, best first; the first that is valid for the problem answers. Where none is, or
// the rule does not parse, the hand rule answers.
#pragma once

#include "schedule.hpp"

#include <array>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace dfgnn {

// The default rule: what runs without tuning. The fitted rule (FittedRule, below) answers where its
// leaf has a schedule valid for the problem, else the hand rule; DFGNN_DEFAULT_RULE=hand selects
// the hand rule alone. Never an invalid schedule: where none serves the problem (very large D),
// Error(NOT_SUPPORTED).
struct DefaultChoice {
  Schedule schedule;
  std::string rule;  // which rule answered, for explain: "fitted rule leaf 7" or "hand rule"
};
DefaultChoice default_choice(const PassProblem& problem);
Schedule default_schedule(const PassProblem& problem);  // default_choice(problem).schedule
// The hand rule, the documented fallback: hub split (rows of >= 256 edges cut into 256-edge
// chunks) where the traversed structure has such rows, else the sub-warp mapping sized to D.
Schedule hand_rule_schedule(const PassProblem& problem);

class FittedRule {
 public:
  struct Leaf {
    int32_t id = 0;                      // the fitter's leaf number, named in explain
    std::vector<std::string> schedules;  // best first
  };

  // Throws Error(PARSE_ERROR) naming what is wrong (not JSON, wrong format or version, an unknown
  // feature, a child index that does not point forward, ...).
  static FittedRule parse(const std::string& text);

  // The leaf the problem's features lead to (value <= threshold goes left). Features outside the
  // fitted range simply follow the tree to its nearest leaf.
  const Leaf& leaf_for(const PassProblem& problem) const;
  // The leaf's first schedule that parses, whose solver applies to the problem, which is valid for
  // it and which is among its solver's candidates for it (the tuner's search space, which the fit
  // was scored on). On an op shape the fit did not measure ("fit": {"domain": {"op_shapes"}}), where
  // no text is such a candidate, one is fitted to the shape: for H > 1 heads the leaf's choice for
  // one head of H * D channels first. nullopt when none is.
  std::optional<DefaultChoice> choose(const PassProblem& problem) const;
  // Why the rule does not answer for the problem's graph, or empty: a graph with more than twice the
  // edges of the largest the rule was fitted on (its "fit": {"domain": {"max_log2_edges"}}), where
  // its leaves were measured 1.3-2x slower than the hand rule (bench/results/2026-12-04-shapes.md).
  std::string beyond_domain(const PassProblem& problem) const;

 private:
  // choose() for a text of the leaf; one_head: what to fit first where a text must be fitted;
  // may_fit: whether a text may be fitted to the shape at all (not on the fit's own op shapes).
  std::optional<DefaultChoice> choose_text(const PassProblem& problem, const DefaultChoice* one_head, bool may_fit) const;

  struct Node {
    int32_t feature = -1;  // index into the feature table; -1: a leaf
    double threshold = 0;
    int32_t left = 0, right = 0;  // node indices (children come after their parent)
    int32_t leaf = -1;            // index into leaves_
  };
  std::vector<Node> nodes_;
  std::vector<Leaf> leaves_;
  std::optional<double> max_log2_edges_;  // none: the rule answers for every graph
  // (model, dtype, heads, dim, variant: the database's key bits, pack_key_bits) the fit measured
  std::set<std::array<int32_t, 5>> op_shapes_;
};

// The value of a rule feature (the names of tools/fit_default_rule.py's FEATURES) for a problem;
// nullopt for an unknown name.
std::optional<double> rule_feature(std::string_view name, const PassProblem& problem);

// The rule text, or null when it does not parse: then one warning naming `origin` and the reason
// is logged.
std::shared_ptr<const FittedRule> parse_rule_or_warn(const std::string& text, std::string_view origin);
// The rule embedded at build time, parsed on first use (null when it does not parse).
const FittedRule* embedded_rule();
// The embedded rule's text (runtime/data/default_rule.json).
const char* embedded_rule_text();

// The default rule's answer with the given fitted rule (null: none): its choice, else the hand
// rule's. default_choice() calls it with the embedded rule.
DefaultChoice choose_default(const FittedRule* rule, const PassProblem& problem);

// DFGNN_DEFAULT_RULE: "hand" selects the hand rule (for A/B benchmarks); unset, empty or
// "fitted" the fitted rule. Another value is warned about once and means "fitted".
bool hand_rule_selected();

}  // namespace dfgnn
