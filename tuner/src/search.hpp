// The tuner's search: which of a list of candidate schedules to keep, decided by measurement.
// GPU-independent (standard library only): the caller supplies a Measurer that compiles, checks
// and times one candidate; CPU tests drive it with deterministic cost functions.
//
// THE PROTOCOL (everything below is implemented by search()'s Race, search.cpp, and nowhere else)
//
// Inputs. An ordered list of candidates (schedule texts, the solvers' enumeration order, exactly
// one flagged as the default, texts unique), a Measurer, SearchOptions.
//
// Threads. Measurer::prepare (CPU work: NVRTC compiles) runs on `prepare_threads` pool threads,
// at most `prepare_ahead` candidates ahead of the one being measured, in the order the
// candidates are visited (default first, then enumeration order). verify/warmup/time run on
// the calling thread only, one at a time (the GPU is measured single-threaded), and never
// before that candidate's prepare has returned. With prepare_threads == 0, prepare runs inline
// on the calling thread. The clock and the log callback are called from the calling thread only.
// search() returns only after every prepare it started has returned (a compile in flight when
// the budget runs out is waited for, not abandoned). The order of verify/warmup/time calls
// depends only on the measurer's answers and the clock, never on thread timing.
//
// Round 0 (screening). For each candidate, default first, then in enumeration order: wait for
// its prepare, verify it (a candidate whose output is wrong is failed and never timed, so a
// wrong-but-fast schedule can never win), warm it up, take its first timing sample. A prepare,
// verify, warmup or time that throws (or a time that is not a positive finite number) fails the
// candidate with the stage and message; it is logged, remembered and skipped, and the search
// goes on.
//
// Rounds 1, 2, ... (racing). Each round times every surviving candidate that still wants
// samples once, round-robin over the survivors in visiting order, with the starting position
// rotated by one each round, so that drifts (clocks, temperature) hit every candidate alike. A
// survivor wants samples while it has fewer than `max_samples`; a near-tie wants them up to
// `tie_samples` (re-measuring near-ties): when two or more survivors are near-ties of the leader
// (the survivor with the lowest median), i.e. tied with it under the tie rule below widened to
// two standard errors (so that borderline tie decisions, above all the default's, get the extra
// samples that settle them), each of them is a near-tie.
//
// Noise model (shared by the rules below). For candidates a, b with n samples each and relative
// spreads r, the standard error of the relative difference of their medians is
//     se(a, b) = 1.2533 * sqrt(r_a^2/n_a + r_b^2/n_b)
// (1.2533 / sqrt(n) * sigma is the standard error of a median of n normal samples), with
// r = max(tie.noise_floor, pooled spread, own spread), robust relative standard deviations from
// pairwise differences (stats.hpp, kPairToSigma): own spread from the candidate's samples (with
// >= 3 samples, Stats::relative_pair_spread), pooled spread from the pairs of every measured
// candidate, each scaled by its own median (SampleStats::pooled_pair_spread: measurement noise is
// mostly the machine's, a few samples can look accidentally tight, and a pooled median shrugs off
// a hiccup).
//
// Tie (racing). a is tied with b when median_a <= median_b * (1 + tie.tolerance + tie.z * se(a, b)):
// within the tolerance, plus one standard error (tie.z = 1) so that a difference the samples
// cannot resolve is not taken for a real one. The decision's tie is the policy's (below), the same
// band over moment statistics.
//
// Elimination (racing), after every round, including round 0. The leader is the survivor with
// the lowest median among those with at least `min_samples` samples (exact ties: smaller text).
// A survivor c with at least `min_samples` samples is eliminated when it is clearly slower:
//
//     median_c > median_leader * (1 + tie.tolerance + confidence_z * se(c, leader))
//
// i.e. outside the tie band by confidence_z (3) standard errors. The margin shrinks like
// 1/sqrt(n) towards the tie tolerance: clear losers go after min_samples samples, close
// contenders are kept and re-measured. The default is never eliminated before the others: only
// once every other survivor but the leader is gone (then it is judged by the same rule); it
// keeps being measured as the reference.
//
// Stop. When one survivor is left, when no survivor wants more samples, or when the budget is
// spent. The clock is read before every verify/warmup/time call; once `budget_s` has elapsed
// nothing more is started, so the search overruns the budget by at most one measurer call (plus
// waiting for a prepare). The exception: until some candidate has a timing sample, the budget is
// not enforced (a result with nothing measured is useless; this only matters for budgets smaller
// than one candidate's verify + warmup + time). Candidates never timed are reported as not
// measured (budget).
//
// Decision: the winner policy of stats/stats.hpp (one rule for the tuner, the database and nearest
// dispatch) over every candidate that was timed and did not fail (survivors and eliminated ones:
// exactly the candidates the tuner stores, so the database recomputes the same winner), each
// summarised by its moments and median, with `tie` as the policy's band: the best is the lowest median (exact ties: the smaller text); a default tied with it is
// kept. The runner-up is the lowest-median non-failed measured candidate other than the winner.
// The result names the winner, the default's fate (including "default failed", an important
// signal), the runner-up, per-candidate records, counts and a one-line reason.
#pragma once

#include <cstddef>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "stats.hpp"

namespace dfgnn::tuner {

using stats::SampleStats;
using stats::Stats;

struct Candidate {
  std::string text;         // schedule text, unique within the list
  bool is_default = false;  // exactly one candidate is the default
};

struct VerifyResult {
  bool ok = true;
  std::string reason;  // why the output was wrong (when !ok)

  static VerifyResult pass() { return {}; }
  static VerifyResult fail(std::string why) { return {false, std::move(why)}; }
};

// What the search needs from the machine. `index` is the candidate's position in the list given
// to search(), `text` its schedule text. Every method may throw: the candidate is then failed
// with the exception's message.
class Measurer {
 public:
  virtual ~Measurer() = default;
  // CPU-side work (compile the candidate). Called once per candidate, from pool threads:
  // concurrently with other prepare calls and with verify/warmup/time of other candidates.
  virtual void prepare(std::size_t index, const std::string& text) = 0;
  // Run the candidate and compare its output against a trusted result.
  virtual VerifyResult verify(std::size_t index, const std::string& text) = 0;
  // Run it untimed (module load, clocks, caches); called once, after a successful verify.
  virtual void warmup(std::size_t index, const std::string& text) = 0;
  // One timed run (e.g. CUDA events around a launch on rotated inputs), in milliseconds.
  virtual double time(std::size_t index, const std::string& text) = 0;
};

enum class LogLevel { Debug, Info, Warn };

struct SearchOptions {
  // Wall-clock budget in seconds for the whole search (infinity: none).
  double budget_s = std::numeric_limits<double>::infinity();
  int min_samples = 3;          // samples a candidate (and the leader) need before elimination
  int max_samples = 10;         // samples per survivor in the regular rounds
  int tie_samples = 20;         // cap for near-ties (re-measured beyond max_samples)
  // The tie band of the racing and of the decision: the winner policy's (stats.hpp), so that the
  // database, deciding with the same band, stores the winner the tuner reports.
  stats::TiePolicy tie;
  double confidence_z = 3.0;    // standard errors beyond the tie band for elimination
  int prepare_threads = 2;      // CPU threads running Measurer::prepare ahead (0: inline)
  int prepare_ahead = 8;        // candidates prepared at most ahead of the one measured
  // Seconds from an arbitrary origin (default: std::chrono::steady_clock). Tests inject a fake.
  std::function<double()> clock;
  // Failures (Warn), eliminations (Debug), the decision (Info). Default: the "dfgnn" spdlog
  // logger when one is registered, else nothing.
  std::function<void(LogLevel, const std::string&)> log;
};

enum class CandidateStatus {
  Measured,     // survived to the end (the winner is one of these)
  Eliminated,   // clearly slower than the leader after `eliminated_round`
  Failed,       // prepare/verify/warmup/time failed, see `failed_stage` and `failure`
  NotMeasured,  // never timed: the budget ran out first
};
enum class Stage { None, Prepare, Verify, Warmup, Time };

const char* status_name(CandidateStatus status);  // "measured", "eliminated", ...
const char* stage_name(Stage stage);              // "prepare", "verify", ...

struct CandidateRecord {
  std::string text;
  bool is_default = false;
  CandidateStatus status = CandidateStatus::NotMeasured;
  int eliminated_round = -1;  // Eliminated: after which round (0 = screening)
  Stage failed_stage = Stage::None;
  std::string failure;          // Failed: the message (verify's reason or the exception's)
  bool prepared = false;        // prepare returned normally
  bool verified = false;        // verify passed
  Stats stats;                  // of the timing samples (count 0 when never timed)
  std::vector<double> samples;  // milliseconds, in the order taken

  // "measured", "eliminated (round 3)", "failed (verify: max error 0.3 at row 17)",
  // "not measured (budget)".
  std::string describe() const;
};

struct SearchResult {
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  bool found = false;  // a winner was chosen (some candidate was valid and timed)
  std::size_t winner_index = npos;
  std::string winner;
  Stats winner_stats;

  std::size_t default_index = npos;
  std::string default_text;
  Stats default_stats;
  bool default_failed = false;       // the default failed (see its record): an important signal
  bool kept_default_on_tie = false;  // the default won because it tied with a faster median

  bool has_runner_up = false;
  std::size_t runner_up_index = npos;
  std::string runner_up;
  Stats runner_up_stats;

  // median(default) / median(winner); 0 when no winner, or the default failed or was never timed.
  double speedup_over_default = 0.0;

  std::vector<CandidateRecord> candidates;  // same order as the input

  std::size_t prepares = 0;       // prepare calls started
  std::size_t verifications = 0;  // verify calls
  std::size_t warmups = 0;        // warmup calls
  std::size_t timings = 0;        // time calls
  int rounds = 0;                 // rounds run, counting the screening round
  double elapsed_s = 0.0;         // by the search's clock
  // Of elapsed_s, the time the race stood waiting for prepares (compiles): every prepare's whole
  // time when they run inline, only what the pool had not finished ahead otherwise.
  double prepare_wait_s = 0.0;
  bool budget_exhausted = false;  // stopped because the budget was spent

  // One line: "fastest by 12.3% over default", "tied with default within 2.2% ('x' was 1.0%
  // faster), kept default", "default is fastest; runner-up 'x' is 3.4% slower", "default failed
  // verify (...); fastest valid candidate, 4.0% ahead of runner-up", plus "; budget exhausted
  // with 12 of 120 candidates measured" when it was.
  std::string reason;
};

// The candidates of one tuning, in visiting order: the default (flagged), then `incumbent`, what
// dispatch answered before this tuning (an earlier winner or the nearest tuned graphs'; empty: none),
// then the enumeration in its order; each text once. The incumbent is visited second so that a budget
// spent before the enumeration ends still measures it: tuning then never stores a winner slower than
// what the graph ran before (2026-12-07c: with 3 s a pass, wiki-chameleon's nearest answer went
// unmeasured and the tuned GAT 8x8 ran 1.31x slower than it).
std::vector<Candidate> candidate_list(const std::string& default_text, const std::string& incumbent,
                                      const std::vector<std::string>& enumerated);

// Runs the protocol above. Throws std::invalid_argument for an empty list, no or several
// defaults, duplicate texts or inconsistent options; measurer failures never escape.
SearchResult search(const std::vector<Candidate>& candidates, Measurer& measurer,
                    const SearchOptions& options = {});

// The racing rules, exposed for tests and reports (see the protocol above). `pooled_spread` is
// SampleStats::pooled_pair_spread of all measured candidates; se is stats::median_difference_se.
// tie.tolerance + confidence_z * se: by how much (relative) `candidate`'s median must exceed
// `leader`'s for it to be clearly slower (eliminated).
double elimination_margin(const Stats& candidate, const Stats& leader, double pooled_spread,
                          const SearchOptions& options);
bool clearly_slower(const Stats& candidate, const Stats& leader, double pooled_spread,
                    const SearchOptions& options);
// The tie rule with 2 * tie.z standard errors: who is re-measured up to tie_samples.
bool near_tie(const Stats& candidate, const Stats& leader, double pooled_spread,
              const SearchOptions& options);

}  // namespace dfgnn::tuner
