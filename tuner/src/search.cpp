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

// Standard error of the median of n samples with standard deviation sigma: sqrt(pi/2) sigma/sqrt(n).
constexpr double kMedianEfficiency = 1.2533141373155003;

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
  if (!(o.tie_tolerance >= 0.0) || !(o.confidence_z >= 0.0) || !(o.tie_z >= 0.0) || !(o.noise_floor >= 0.0))
    throw std::invalid_argument(
        "tuner search: tie_tolerance, confidence_z, tie_z and noise_floor must be >= 0");
  if (o.prepare_threads < 0 || o.prepare_ahead < 0)
    throw std::invalid_argument("tuner search: prepare_threads and prepare_ahead must be >= 0");
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

double median_difference_se(const Stats& a, const Stats& b, double pooled_spread, const SearchOptions& o) {
  const double floor = std::max(o.noise_floor, pooled_spread);
  const double ra = std::max(floor, a.relative_spread());
  const double rb = std::max(floor, b.relative_spread());
  const double na = static_cast<double>(std::max<std::size_t>(a.count, 1));
  const double nb = static_cast<double>(std::max<std::size_t>(b.count, 1));
  return kMedianEfficiency * std::sqrt(ra * ra / na + rb * rb / nb);
}

double elimination_margin(const Stats& candidate, const Stats& leader, double pooled_spread,
                          const SearchOptions& o) {
  return o.tie_tolerance + o.confidence_z * median_difference_se(candidate, leader, pooled_spread, o);
}

stats::TiePolicy tie_policy(const SearchOptions& o) { return {o.tie_tolerance, o.tie_z, o.noise_floor}; }

bool clearly_slower(const Stats& candidate, const Stats& leader, double pooled_spread,
                    const SearchOptions& o) {
  return candidate.median > leader.median * (1.0 + elimination_margin(candidate, leader, pooled_spread, o));
}

bool near_tie(const Stats& candidate, const Stats& leader, double pooled_spread, const SearchOptions& o) {
  const double margin =
      o.tie_tolerance + 2.0 * o.tie_z * median_difference_se(candidate, leader, pooled_spread, o);
  return candidate.median <= leader.median * (1.0 + margin);
}

SearchResult search(const std::vector<Candidate>& candidates, Measurer& measurer,
                    const SearchOptions& options) {
  validate(candidates, options);
  const SearchOptions& o = options;
  const std::size_t n = candidates.size();

  // Logging: the caller's sink, else the library's logger if it exists.
  std::shared_ptr<spdlog::logger> fallback = o.log ? nullptr : spdlog::get("dfgnn");
  auto log = [&](LogLevel level, const std::string& message) {
    if (o.log) {
      o.log(level, message);
    } else if (fallback) {
      const auto lvl = level == LogLevel::Warn   ? spdlog::level::warn
                       : level == LogLevel::Info ? spdlog::level::info
                                                 : spdlog::level::debug;
      fallback->log(lvl, "tuner: {}", message);
    }
  };

  const std::function<double()> clock = o.clock ? o.clock : std::function<double()>([] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  });

  // Visiting order: the default first, then the enumeration order.
  std::size_t def = 0;
  while (!candidates[def].is_default) ++def;
  std::vector<std::size_t> order{def};
  for (std::size_t i = 0; i < n; ++i)
    if (i != def) order.push_back(i);

  SearchResult result;
  std::vector<Slot> slots(n);
  const double t0 = clock();
  bool any_sample = false;

  auto out_of_budget = [&] {
    if (result.budget_exhausted) return true;
    if (!any_sample || std::isinf(o.budget_s)) return false;
    if (clock() - t0 >= o.budget_s) result.budget_exhausted = true;
    return result.budget_exhausted;
  };
  auto fail = [&](std::size_t i, Stage stage, std::string message) {
    Slot& s = slots[i];
    s.state = State::Failed;
    s.failed_stage = stage;
    s.failure = std::move(message);
    log(LogLevel::Warn, "candidate '" + candidates[i].text + "'" +
                            (candidates[i].is_default ? " (the default)" : "") + " failed at " +
                            stage_name(stage) + ": " + s.failure);
  };
  // One timing sample; false if the candidate failed.
  auto time_once = [&](std::size_t i) {
    result.timings += 1;
    double ms = 0.0;
    try {
      ms = measurer.time(i, candidates[i].text);
    } catch (...) {
      fail(i, Stage::Time, exception_message(std::current_exception()));
      return false;
    }
    if (!std::isfinite(ms) || !(ms > 0.0)) {
      fail(i, Stage::Time, "time() returned " + std::to_string(ms) + " ms, not a positive finite time");
      return false;
    }
    slots[i].samples.add(ms);
    slots[i].stats = slots[i].samples.summary();
    any_sample = true;
    return true;
  };
  // Lowest median, exact ties by smaller text.
  auto faster = [&](std::size_t a, std::size_t b) {
    const double ma = slots[a].stats.median, mb = slots[b].stats.median;
    if (ma != mb) return ma < mb;
    return candidates[a].text < candidates[b].text;
  };
  auto alive = [&] {
    std::vector<std::size_t> v;
    for (std::size_t i : order)
      if (slots[i].state == State::Alive) v.push_back(i);
    return v;
  };
  auto pooled_spread = [&] {
    std::vector<const SampleStats*> sets;
    for (const Slot& s : slots)
      if (s.state == State::Alive || s.state == State::Eliminated) sets.push_back(&s.samples);
    return SampleStats::pooled_relative_spread(sets);
  };
  // Elimination after round `round` (the rule in search.hpp).
  auto eliminate = [&](int round) {
    const std::vector<std::size_t> live = alive();
    const std::size_t min_n = static_cast<std::size_t>(o.min_samples);
    std::size_t leader = SearchResult::npos;
    for (std::size_t i : live)
      if (slots[i].stats.count >= min_n && (leader == SearchResult::npos || faster(i, leader))) leader = i;
    if (leader == SearchResult::npos) return;
    const double pooled = pooled_spread();
    auto drop = [&](std::size_t i) {
      slots[i].state = State::Eliminated;
      slots[i].eliminated_round = round;
      log(LogLevel::Debug, "round " + std::to_string(round) + ": eliminated '" + candidates[i].text +
                               "' (median " + std::to_string(slots[i].stats.median) + " ms vs leader " +
                               std::to_string(slots[leader].stats.median) + " ms)");
    };
    std::size_t left = live.size();
    for (std::size_t i : live) {
      if (i == leader || i == def || slots[i].stats.count < min_n) continue;
      if (clearly_slower(slots[i].stats, slots[leader].stats, pooled, o)) {
        drop(i);
        left -= 1;
      }
    }
    // The default goes last: only when the leader is the only other survivor.
    if (def != leader && slots[def].state == State::Alive && left == 2 && slots[def].stats.count >= min_n &&
        clearly_slower(slots[def].stats, slots[leader].stats, pooled, o))
      drop(def);
  };

  // ---- round 0: screening, in visiting order.
  {
    PreparePool pool(measurer, candidates, order, o.prepare_threads, o.prepare_ahead);
    for (std::size_t pos = 0; pos < n; ++pos) {
      const std::size_t i = order[pos];
      const std::string& text = candidates[i].text;
      if (out_of_budget()) break;
      const PreparePool::Outcome prepared = pool.wait(pos);
      if (!prepared.ok) {
        fail(i, Stage::Prepare, prepared.error);
        continue;
      }
      slots[i].prepared = true;
      if (out_of_budget()) break;
      result.verifications += 1;
      try {
        const VerifyResult v = measurer.verify(i, text);
        if (!v.ok) {
          fail(i, Stage::Verify, v.reason.empty() ? "wrong result" : v.reason);
          continue;
        }
      } catch (...) {
        fail(i, Stage::Verify, exception_message(std::current_exception()));
        continue;
      }
      slots[i].verified = true;
      if (out_of_budget()) break;
      result.warmups += 1;
      try {
        measurer.warmup(i, text);
      } catch (...) {
        fail(i, Stage::Warmup, exception_message(std::current_exception()));
        continue;
      }
      if (out_of_budget()) break;
      if (time_once(i)) slots[i].state = State::Alive;
    }
    pool.stop();
    result.prepares = pool.started();
  }
  result.rounds = 1;
  if (!result.budget_exhausted) eliminate(0);

  // ---- rounds 1, 2, ...: racing over the survivors.
  for (int round = 1; !result.budget_exhausted; ++round) {
    const std::vector<std::size_t> live = alive();
    if (live.size() <= 1) break;
    std::size_t lead = live.front();
    for (std::size_t i : live)
      if (faster(i, lead)) lead = i;
    const double pooled = pooled_spread();
    std::vector<char> near(n, 0);
    std::size_t near_count = 0;
    for (std::size_t i : live)
      if (near_tie(slots[i].stats, slots[lead].stats, pooled, o)) {
        near[i] = 1;
        near_count += 1;
      }
    std::vector<std::size_t> want;
    for (std::size_t i : live) {
      const int cap = (near_count >= 2 && near[i]) ? o.tie_samples : o.max_samples;
      if (slots[i].stats.count < static_cast<std::size_t>(cap)) want.push_back(i);
    }
    if (want.empty()) break;
    std::rotate(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(round % want.size()), want.end());
    result.rounds = round + 1;
    for (std::size_t i : want) {
      if (out_of_budget()) break;
      time_once(i);
    }
    if (!result.budget_exhausted) eliminate(round);
  }

  // ---- decision: the shared winner policy over every timed, non-failed candidate.
  std::vector<std::size_t> pool;
  std::vector<stats::Named> named;
  std::size_t def_in_pool = stats::Choice::npos;
  for (std::size_t i : order)
    if ((slots[i].state == State::Alive || slots[i].state == State::Eliminated) && slots[i].stats.count > 0) {
      if (i == def) def_in_pool = pool.size();
      pool.push_back(i);
      named.push_back({candidates[i].text, slots[i].samples.moments()});
    }

  result.default_index = def;
  result.default_text = candidates[def].text;
  result.default_stats = slots[def].stats;
  result.default_failed = slots[def].state == State::Failed;

  const stats::Choice choice = stats::choose_winner(named, def_in_pool, tie_policy(o));
  const std::size_t best = choice.best == stats::Choice::npos ? SearchResult::npos : pool[choice.best];
  const std::size_t winner = choice.winner == stats::Choice::npos ? SearchResult::npos : pool[choice.winner];
  result.kept_default_on_tie = choice.kept_default;

  if (winner != SearchResult::npos) {
    result.found = true;
    result.winner_index = winner;
    result.winner = candidates[winner].text;
    result.winner_stats = slots[winner].stats;
    std::size_t ru = SearchResult::npos;
    for (std::size_t i : order) {
      const Slot& s = slots[i];
      if (i == winner || s.state == State::Failed || s.stats.count == 0) continue;
      if (ru == SearchResult::npos || faster(i, ru)) ru = i;
    }
    if (ru != SearchResult::npos) {
      result.has_runner_up = true;
      result.runner_up_index = ru;
      result.runner_up = candidates[ru].text;
      result.runner_up_stats = slots[ru].stats;
    }
    if (!result.default_failed && slots[def].stats.count > 0)
      result.speedup_over_default = slots[def].stats.median / slots[winner].stats.median;
  }

  // ---- records.
  std::size_t measured = 0;
  result.candidates.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const Slot& s = slots[i];
    CandidateRecord& r = result.candidates[i];
    r.text = candidates[i].text;
    r.is_default = candidates[i].is_default;
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
    measured += s.stats.count > 0 ? 1 : 0;
  }

  // ---- the reason, one line.
  const Slot& d = slots[def];
  std::string reason;
  const std::string default_failure =
      std::string("default failed ") + stage_name(d.failed_stage) + " (" + d.failure + ")";
  if (!result.found) {
    reason = result.default_failed
                 ? "no valid candidate: " + default_failure + " and no other candidate could be timed"
                 : "no valid candidate: none could be timed";
  } else if (winner == def) {
    if (result.kept_default_on_tie) {
      const double margin = stats::tie_margin(named[choice.winner].summary, named[choice.best].summary,
                                              choice.pooled_spread, tie_policy(o));
      reason = "tied with default within " + percent(margin) + " ('" + candidates[best].text + "' was " +
               percent(1.0 - slots[best].stats.median / d.stats.median) + " faster), kept default";
    } else if (result.has_runner_up) {
      reason = "default is fastest; runner-up '" + result.runner_up + "' is " +
               percent(result.runner_up_stats.median / d.stats.median - 1.0) + " slower";
    } else {
      reason = "default is the only valid measured candidate";
    }
  } else if (result.default_failed) {
    reason = default_failure + "; fastest valid candidate";
    if (result.has_runner_up)
      reason += ", " + percent(result.runner_up_stats.median / result.winner_stats.median - 1.0) +
                " ahead of runner-up";
  } else if (d.stats.count > 0) {
    reason = "fastest by " + percent(result.speedup_over_default - 1.0) + " over default";
  } else {
    reason = "fastest measured candidate (default not measured)";
  }
  if (result.budget_exhausted)
    reason += "; budget exhausted with " + std::to_string(measured) + " of " + std::to_string(n) +
              " candidates measured";
  result.reason = std::move(reason);
  result.elapsed_s = clock() - t0;
  log(LogLevel::Info, result.found ? "chose '" + result.winner + "': " + result.reason : result.reason);
  return result;
}

}  // namespace dfgnn::tuner
