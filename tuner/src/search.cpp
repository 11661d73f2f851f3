// The search protocol documented in search.hpp. The order of measurer calls on the calling
// thread depends only on the measurer's answers and the clock, never on thread timing, so a
// deterministic measurer and clock give a deterministic result.
#include "search.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

namespace dfgnn::tuner {

namespace {

std::string exception_message(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what()[0] ? ex.what() : "exception with an empty message";
  } catch (...) {
    return "unknown exception";
  }
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", fraction * 100.0);
  return buf;
}

// Runs Measurer::prepare for the candidates in visiting order on a few threads, at most `ahead`
// positions past the one the calling thread waits for. With no threads, wait() prepares inline.
class PreparePool {
 public:
  PreparePool(Measurer& measurer, const std::vector<Candidate>& candidates,
              const std::vector<std::size_t>& order, int threads, int ahead)
      : measurer_(measurer),
        candidates_(candidates),
        order_(order),
        ahead_(static_cast<std::size_t>(ahead)),
        done_(order.size(), 0),
        ok_(order.size(), 0),
        error_(order.size()) {
    try {
      for (int t = 0; t < threads; ++t) workers_.emplace_back([this] { work(); });
    } catch (...) {
      stop();
      throw;
    }
  }
  PreparePool(const PreparePool&) = delete;
  PreparePool& operator=(const PreparePool&) = delete;
  ~PreparePool() { stop(); }

  struct Outcome {
    bool ok;
    std::string error;
  };

  // Blocks until the candidate at visiting position `pos` is prepared.
  Outcome wait(std::size_t pos) {
    if (workers_.empty()) {
      started_ += 1;
      std::string error;
      const bool ok = run(pos, error);
      return {ok, error};
    }
    std::unique_lock lock(mutex_);
    consumed_ = std::max(consumed_, pos);
    cv_.notify_all();
    cv_.wait(lock, [&] { return done_[pos] != 0; });
    return {ok_[pos] != 0, error_[pos]};
  }

  // Starts nothing more and waits for the prepares in flight (they cannot be interrupted).
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : workers_)
      if (t.joinable()) t.join();
  }

  std::size_t started() {
    std::lock_guard lock(mutex_);
    return started_;
  }

 private:
  bool run(std::size_t pos, std::string& error) {
    const std::size_t index = order_[pos];
    try {
      measurer_.prepare(index, candidates_[index].text);
      return true;
    } catch (...) {
      error = exception_message(std::current_exception());
      return false;
    }
  }

  void work() {
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || (next_ < order_.size() && next_ <= consumed_ + ahead_); });
      if (stop_) return;
      const std::size_t pos = next_++;
      started_ += 1;
      lock.unlock();
      std::string error;
      const bool ok = run(pos, error);
      lock.lock();
      done_[pos] = 1;
      ok_[pos] = ok ? 1 : 0;
      error_[pos] = std::move(error);
      cv_.notify_all();
    }
  }

  Measurer& measurer_;
  const std::vector<Candidate>& candidates_;
  const std::vector<std::size_t>& order_;
  const std::size_t ahead_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<char> done_, ok_;
  std::vector<std::string> error_;
  std::size_t next_ = 0;      // next visiting position to start
  std::size_t consumed_ = 0;  // position the calling thread waits for or measures
  std::size_t started_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

void validate(const std::vector<Candidate>& candidates, const SearchOptions& o) {
  if (candidates.empty()) throw std::invalid_argument("tuner search: no candidates");
  std::size_t defaults = 0;
  std::set<std::string> texts;
  for (const Candidate& c : candidates) {
    defaults += c.is_default ? 1 : 0;
    if (!texts.insert(c.text).second)
      throw std::invalid_argument("tuner search: duplicate candidate '" + c.text + "'");
  }
  if (defaults != 1)
    throw std::invalid_argument("tuner search: exactly one candidate must be the default, got " +
                                std::to_string(defaults));
  if (!(o.budget_s > 0.0)) throw std::invalid_argument("tuner search: budget_s must be > 0");
  if (o.min_samples < 1 || o.max_samples < 1 || o.tie_samples < o.max_samples ||
      o.min_samples > o.max_samples)
    throw std::invalid_argument("tuner search: need 1 <= min_samples <= max_samples <= tie_samples");
  if (!(o.tie.tolerance >= 0.0) || !(o.confidence_z >= 0.0) || !(o.tie.z >= 0.0) || !(o.tie.noise_floor >= 0.0))
    throw std::invalid_argument(
        "tuner search: tie.tolerance, confidence_z, tie.z and tie.noise_floor must be >= 0");
  if (o.prepare_threads < 0 || o.prepare_ahead < 0)
    throw std::invalid_argument("tuner search: prepare_threads and prepare_ahead must be >= 0");
}

enum class State { Pending, Alive, Eliminated, Failed };

struct Slot {
  State state = State::Pending;
  SampleStats samples;
  Stats stats;  // summary of `samples`, refreshed after each sample
  int eliminated_round = -1;
  Stage failed_stage = Stage::None;
  std::string failure;
  bool prepared = false;
  bool verified = false;
};

constexpr std::size_t npos = SearchResult::npos;

double steady_clock_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::size_t default_index(const std::vector<Candidate>& candidates) {
  std::size_t def = 0;
  while (!candidates[def].is_default) ++def;
  return def;
}

// The default first, then the enumeration order.
std::vector<std::size_t> visiting_order(std::size_t count, std::size_t def) {
  std::vector<std::size_t> order{def};
  for (std::size_t i = 0; i < count; ++i)
    if (i != def) order.push_back(i);
  return order;
}

// One search of the protocol in search.hpp: screen() runs round 0, round() each racing round,
// decide() chooses and reports, once, at the end.
class Race {
 public:
  Race(const std::vector<Candidate>& candidates, Measurer& measurer, const SearchOptions& options);

  // Round 0: each candidate, in visiting order, is prepared, verified, warmed up and timed once.
  void screen();
  // The next racing round; false, having run nothing, when the race is over.
  bool round();
  // The winner policy over every timed, non-failed candidate; the result with its records and reason.
  SearchResult decide();

 private:
  std::vector<CandidateRecord> records() const;
  std::string reason(std::size_t best, double kept_within) const;
  void set_winner(std::size_t winner);
  bool screen_candidate(PreparePool& pool, std::size_t pos);
  bool time_once(std::size_t i);
  template <typename Call>
  bool attempt(std::size_t i, Stage stage, Call&& call);
  void fail(std::size_t i, Stage stage, std::string message);
  bool out_of_budget();
  std::vector<std::size_t> wanting_samples(const std::vector<std::size_t>& live) const;
  void eliminate(int after_round);
  void drop(std::size_t i, std::size_t leader, int after_round);
  bool faster(std::size_t a, std::size_t b) const;
  bool in_decision(std::size_t i) const;
  std::vector<std::size_t> alive() const;
  double pooled_spread() const;
  void log(LogLevel level, const std::string& message) const;

  const std::vector<Candidate>& candidates_;
  Measurer& measurer_;
  const SearchOptions& options_;
  std::shared_ptr<spdlog::logger> fallback_log_;  // the library's logger, when the caller gave no sink
  std::function<double()> clock_;
  std::size_t default_;
  std::vector<std::size_t> order_;  // visiting order
  std::vector<Slot> slots_;
  SearchResult result_;
  double start_s_;
  bool any_sample_ = false;
};

Race::Race(const std::vector<Candidate>& candidates, Measurer& measurer, const SearchOptions& options)
    : candidates_(candidates),
      measurer_(measurer),
      options_(options),
      fallback_log_(options.log ? nullptr : spdlog::get("dfgnn")),
      clock_(options.clock ? options.clock : std::function<double()>(steady_clock_seconds)),
      default_(default_index(candidates)),
      order_(visiting_order(candidates.size(), default_)),
      slots_(candidates.size()),
      start_s_(clock_()) {}

void Race::screen() {
  PreparePool pool(measurer_, candidates_, order_, options_.prepare_threads, options_.prepare_ahead);
  for (std::size_t pos = 0; pos < order_.size(); ++pos)
    if (!screen_candidate(pool, pos)) break;
  const double stopping = clock_();
  pool.stop();  // the compiles in flight are waited for: part of the compile share too
  result_.prepare_wait_s += clock_() - stopping;
  result_.prepares = pool.started();
  result_.rounds = 1;
  if (!result_.budget_exhausted) eliminate(0);
}

// Round 0 for the candidate at visiting position `pos`; false once the budget is spent.
bool Race::screen_candidate(PreparePool& pool, std::size_t pos) {
  const std::size_t i = order_[pos];
  const std::string& text = candidates_[i].text;
  if (out_of_budget()) return false;
  const double waiting = clock_();
  const PreparePool::Outcome prepared = pool.wait(pos);
  result_.prepare_wait_s += clock_() - waiting;
  if (!prepared.ok) {
    fail(i, Stage::Prepare, prepared.error);
    return true;
  }
  slots_[i].prepared = true;
  if (out_of_budget()) return false;
  result_.verifications += 1;
  VerifyResult verdict;
  if (!attempt(i, Stage::Verify, [&] { verdict = measurer_.verify(i, text); })) return true;
  if (!verdict.ok) {
    fail(i, Stage::Verify, verdict.reason.empty() ? "wrong result" : verdict.reason);
    return true;
  }
  slots_[i].verified = true;
  if (out_of_budget()) return false;
  result_.warmups += 1;
  if (!attempt(i, Stage::Warmup, [&] { measurer_.warmup(i, text); })) return true;
  if (out_of_budget()) return false;
  if (time_once(i)) slots_[i].state = State::Alive;
  return true;
}

bool Race::round() {
  if (result_.budget_exhausted) return false;
  const std::vector<std::size_t> live = alive();
  if (live.size() <= 1) return false;
  std::vector<std::size_t> want = wanting_samples(live);
  if (want.empty()) return false;
  const int number = result_.rounds;  // the rounds run so far count the screening, round 0
  std::rotate(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(number % want.size()), want.end());
  result_.rounds = number + 1;
  for (std::size_t i : want) {
    if (out_of_budget()) break;
    time_once(i);
  }
  if (!result_.budget_exhausted) eliminate(number);
  return true;
}

// The survivors, in visiting order, with fewer samples than their cap: tie_samples for the
// near-ties of the leader when there are two or more of them, else max_samples.
std::vector<std::size_t> Race::wanting_samples(const std::vector<std::size_t>& live) const {
  std::size_t lead = live.front();
  for (std::size_t i : live)
    if (faster(i, lead)) lead = i;
  const double pooled = pooled_spread();
  std::vector<char> near(slots_.size(), 0);
  std::size_t near_count = 0;
  for (std::size_t i : live)
    if (near_tie(slots_[i].stats, slots_[lead].stats, pooled, options_)) {
      near[i] = 1;
      near_count += 1;
    }
  std::vector<std::size_t> want;
  for (std::size_t i : live) {
    const int cap = (near_count >= 2 && near[i]) ? options_.tie_samples : options_.max_samples;
    if (slots_[i].stats.count < static_cast<std::size_t>(cap)) want.push_back(i);
  }
  return want;
}

// Elimination after round `after_round` (the rule in search.hpp).
void Race::eliminate(int after_round) {
  const std::vector<std::size_t> live = alive();
  const std::size_t min_n = static_cast<std::size_t>(options_.min_samples);
  std::size_t leader = npos;
  for (std::size_t i : live)
    if (slots_[i].stats.count >= min_n && (leader == npos || faster(i, leader))) leader = i;
  if (leader == npos) return;
  const double pooled = pooled_spread();
  std::size_t left = live.size();
  for (std::size_t i : live) {
    if (i == leader || i == default_ || slots_[i].stats.count < min_n) continue;
    if (clearly_slower(slots_[i].stats, slots_[leader].stats, pooled, options_)) {
      drop(i, leader, after_round);
      left -= 1;
    }
  }
  // The default goes last: only when the leader is the only other survivor.
  const Slot& d = slots_[default_];
  if (default_ != leader && d.state == State::Alive && left == 2 && d.stats.count >= min_n &&
      clearly_slower(d.stats, slots_[leader].stats, pooled, options_))
    drop(default_, leader, after_round);
}

void Race::drop(std::size_t i, std::size_t leader, int after_round) {
  slots_[i].state = State::Eliminated;
  slots_[i].eliminated_round = after_round;
  log(LogLevel::Debug, "round " + std::to_string(after_round) + ": eliminated '" + candidates_[i].text + "' (median " +
                           std::to_string(slots_[i].stats.median) + " ms vs leader " +
                           std::to_string(slots_[leader].stats.median) + " ms)");
}

SearchResult Race::decide() {
  std::vector<std::size_t> timed;  // positions in `named`, as candidate indices
  std::vector<stats::Named> named;
  std::size_t default_in_timed = stats::Choice::npos;
  for (std::size_t i : order_)
    if (in_decision(i)) {
      if (i == default_) default_in_timed = timed.size();
      timed.push_back(i);
      named.push_back({candidates_[i].text, slots_[i].samples.moments()});
    }
  result_.default_index = default_;
  result_.default_text = candidates_[default_].text;
  result_.default_stats = slots_[default_].stats;
  result_.default_failed = slots_[default_].state == State::Failed;

  const stats::Choice choice = stats::choose_winner(named, default_in_timed, options_.tie);
  result_.kept_default_on_tie = choice.kept_default;
  if (choice.winner != stats::Choice::npos) set_winner(timed[choice.winner]);
  const std::size_t best = choice.best == stats::Choice::npos ? npos : timed[choice.best];
  const double kept_within = choice.kept_default ? stats::tie_margin(named[choice.winner].summary,
                                                                     named[choice.best].summary,
                                                                     choice.pooled_spread, options_.tie)
                                                 : 0.0;
  result_.candidates = records();
  result_.reason = reason(best, kept_within);
  result_.elapsed_s = clock_() - start_s_;
  log(LogLevel::Info, result_.found ? "chose '" + result_.winner + "': " + result_.reason : result_.reason);
  return std::move(result_);
}

// The winner, the runner-up (the fastest other candidate in the decision) and the speedup.
void Race::set_winner(std::size_t winner) {
  result_.found = true;
  result_.winner_index = winner;
  result_.winner = candidates_[winner].text;
  result_.winner_stats = slots_[winner].stats;
  std::size_t runner_up = npos;
  for (std::size_t i : order_)
    if (i != winner && in_decision(i) && (runner_up == npos || faster(i, runner_up))) runner_up = i;
  if (runner_up != npos) {
    result_.has_runner_up = true;
    result_.runner_up_index = runner_up;
    result_.runner_up = candidates_[runner_up].text;
    result_.runner_up_stats = slots_[runner_up].stats;
  }
  const Slot& d = slots_[default_];
  if (!result_.default_failed && d.stats.count > 0)
    result_.speedup_over_default = d.stats.median / slots_[winner].stats.median;
}

std::vector<CandidateRecord> Race::records() const {
  std::vector<CandidateRecord> records(slots_.size());
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    CandidateRecord& r = records[i];
    r.text = candidates_[i].text;
    r.is_default = candidates_[i].is_default;
    r.status = s.state == State::Alive        ? CandidateStatus::Measured
               : s.state == State::Eliminated ? CandidateStatus::Eliminated
               : s.state == State::Failed     ? CandidateStatus::Failed
                                              : CandidateStatus::NotMeasured;
    r.eliminated_round = s.eliminated_round;
    r.failed_stage = s.failed_stage;
    r.failure = s.failure;
    r.prepared = s.prepared;
    r.verified = s.verified;
    r.stats = s.stats;
    r.samples = s.samples.samples();
  }
  return records;
}

// The one-line reason of search.hpp; `best` is the lowest median, `kept_within` the tie margin
// the default was kept within.
std::string Race::reason(std::size_t best, double kept_within) const {
  const SearchResult& r = result_;
  const Slot& d = slots_[default_];
  const std::string default_failure =
      std::string("default failed ") + stage_name(d.failed_stage) + " (" + d.failure + ")";
  std::string reason;
  if (!r.found) {
    reason = r.default_failed ? "no valid candidate: " + default_failure + " and no other candidate could be timed"
                              : "no valid candidate: none could be timed";
  } else if (r.winner_index == default_) {
    if (r.kept_default_on_tie) {
      reason = "tied with default within " + percent(kept_within) + " ('" + candidates_[best].text + "' was " +
               percent(1.0 - slots_[best].stats.median / d.stats.median) + " faster), kept default";
    } else if (r.has_runner_up) {
      reason = "default is fastest; runner-up '" + r.runner_up + "' is " +
               percent(r.runner_up_stats.median / d.stats.median - 1.0) + " slower";
    } else {
      reason = "default is the only valid measured candidate";
    }
  } else if (r.default_failed) {
    reason = default_failure + "; fastest valid candidate";
    if (r.has_runner_up)
      reason += ", " + percent(r.runner_up_stats.median / r.winner_stats.median - 1.0) + " ahead of runner-up";
  } else if (d.stats.count > 0) {
    reason = "fastest by " + percent(r.speedup_over_default - 1.0) + " over default";
  } else {
    reason = "fastest measured candidate (default not measured)";
  }
  if (r.budget_exhausted) {
    const auto measured = std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.stats.count > 0; });
    reason += "; budget exhausted with " + std::to_string(measured) + " of " + std::to_string(slots_.size()) +
              " candidates measured";
  }
  return reason;
}

// One timing sample; false if the candidate failed.
bool Race::time_once(std::size_t i) {
  result_.timings += 1;
  double ms = 0.0;
  if (!attempt(i, Stage::Time, [&] { ms = measurer_.time(i, candidates_[i].text); })) return false;
  if (!std::isfinite(ms) || !(ms > 0.0)) {
    fail(i, Stage::Time, "time() returned " + std::to_string(ms) + " ms, not a positive finite time");
    return false;
  }
  Slot& s = slots_[i];
  s.samples.add(ms);
  s.stats = s.samples.summary();
  any_sample_ = true;
  return true;
}

// One measurer call for candidate i; one that throws fails the candidate at `stage`.
template <typename Call>
bool Race::attempt(std::size_t i, Stage stage, Call&& call) {
  try {
    call();
    return true;
  } catch (...) {
    fail(i, stage, exception_message(std::current_exception()));
    return false;
  }
}

void Race::fail(std::size_t i, Stage stage, std::string message) {
  Slot& s = slots_[i];
  s.state = State::Failed;
  s.failed_stage = stage;
  s.failure = std::move(message);
  log(LogLevel::Warn, "candidate '" + candidates_[i].text + "'" + (candidates_[i].is_default ? " (the default)" : "") +
                          " failed at " + stage_name(stage) + ": " + s.failure);
}

// Not enforced until some candidate has a sample: a result with nothing measured is useless.
bool Race::out_of_budget() {
  if (result_.budget_exhausted) return true;
  if (!any_sample_ || std::isinf(options_.budget_s)) return false;
  if (clock_() - start_s_ >= options_.budget_s) result_.budget_exhausted = true;
  return result_.budget_exhausted;
}

// Lowest median, exact ties by smaller text.
bool Race::faster(std::size_t a, std::size_t b) const {
  const double ma = slots_[a].stats.median, mb = slots_[b].stats.median;
  if (ma != mb) return ma < mb;
  return candidates_[a].text < candidates_[b].text;
}

// Timed and not failed (survivors and eliminated ones): what the decision, and the database, see.
bool Race::in_decision(std::size_t i) const {
  return (slots_[i].state == State::Alive || slots_[i].state == State::Eliminated) && slots_[i].stats.count > 0;
}

std::vector<std::size_t> Race::alive() const {
  std::vector<std::size_t> v;
  for (std::size_t i : order_)
    if (slots_[i].state == State::Alive) v.push_back(i);
  return v;
}

double Race::pooled_spread() const {
  std::vector<const SampleStats*> sets;
  for (const Slot& s : slots_)
    if (s.state == State::Alive || s.state == State::Eliminated) sets.push_back(&s.samples);
  return SampleStats::pooled_pair_spread(sets);
}

// The caller's sink, else the library's logger if it exists.
void Race::log(LogLevel level, const std::string& message) const {
  if (options_.log) {
    options_.log(level, message);
  } else if (fallback_log_) {
    const auto lvl = level == LogLevel::Warn   ? spdlog::level::warn
                     : level == LogLevel::Info ? spdlog::level::info
                                               : spdlog::level::debug;
    fallback_log_->log(lvl, "tuner: {}", message);
  }
}

}  // namespace


const char* status_name(CandidateStatus status) {
  switch (status) {
    case CandidateStatus::Measured: return "measured";
    case CandidateStatus::Eliminated: return "eliminated";
    case CandidateStatus::Failed: return "failed";
    case CandidateStatus::NotMeasured: return "not measured";
  }
  return "?";
}

const char* stage_name(Stage stage) {
  switch (stage) {
    case Stage::None: return "none";
    case Stage::Prepare: return "prepare";
    case Stage::Verify: return "verify";
    case Stage::Warmup: return "warmup";
    case Stage::Time: return "time";
  }
  return "?";
}

std::string CandidateRecord::describe() const {
  switch (status) {
    case CandidateStatus::Measured: return "measured";
    case CandidateStatus::Eliminated: return "eliminated (round " + std::to_string(eliminated_round) + ")";
    case CandidateStatus::Failed:
      return std::string("failed (") + stage_name(failed_stage) + ": " + failure + ")";
    case CandidateStatus::NotMeasured: return "not measured (budget)";
  }
  return "?";
}

double elimination_margin(const Stats& candidate, const Stats& leader, double pooled_spread,
                          const SearchOptions& o) {
  return o.tie.tolerance + o.confidence_z * stats::median_difference_se(candidate, leader, pooled_spread, o.tie);
}

bool clearly_slower(const Stats& candidate, const Stats& leader, double pooled_spread,
                    const SearchOptions& o) {
  return candidate.median > leader.median * (1.0 + elimination_margin(candidate, leader, pooled_spread, o));
}

bool near_tie(const Stats& candidate, const Stats& leader, double pooled_spread, const SearchOptions& o) {
  const double margin =
      o.tie.tolerance + 2.0 * o.tie.z * stats::median_difference_se(candidate, leader, pooled_spread, o.tie);
  return candidate.median <= leader.median * (1.0 + margin);
}

std::vector<Candidate> candidate_list(const std::string& default_text, const std::string& incumbent,
                                      const std::vector<std::string>& enumerated) {
  std::vector<Candidate> out{{default_text, true}};
  std::set<std::string> seen{default_text};
  const auto add = [&](const std::string& text) {
    if (!text.empty() && seen.insert(text).second) out.push_back({text, false});
  };
  add(incumbent);
  for (const std::string& text : enumerated) add(text);
  return out;
}

SearchResult search(const std::vector<Candidate>& candidates, Measurer& measurer,
                    const SearchOptions& options) {
  validate(candidates, options);
  Race race(candidates, measurer, options);
  race.screen();
  while (race.round()) {
  }
  return race.decide();
}

}  // namespace dfgnn::tuner
