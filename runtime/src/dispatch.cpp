#include "dispatch.hpp"

#include "context.hpp"
#include "cuda.hpp"
#include "default_rule.hpp"
#include "env_number.hpp"
#include "error.hpp"
#include "fingerprint.hpp"
#include "graph.hpp"
#include "logging.hpp"
#include "nearest.hpp"
#include "nvrtc.hpp"
#include "op.hpp"
#include "ops.hpp"
#include "solver.hpp"
#include "stats.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace dfgnn {
namespace {

std::mutex hook_mutex;
std::shared_ptr<TuningHook> registered_hook;

TuneMode mode_from_environment() {
  const char* v = std::getenv("DFGNN_TUNE");
  if (v == nullptr) return TuneMode::Off;
  const std::string s(v);
  if (s == "on_miss" || s == "on-miss" || s == "1") return TuneMode::OnMiss;
  if (s != "off" && s != "0" && !s.empty())
    log().warn("DFGNN_TUNE='{}' is not 'off' or 'on_miss'; tuning stays off", s);
  return TuneMode::Off;
}

// The nearest-fingerprint radius: the calibrated one (tools/calibrate_nearest.py), unless the
// environment overrides it.
double distance_from_environment() {
  const double calibrated = nearest_calibration().radius;
  const char* v = std::getenv("DFGNN_NEAREST_MAX_DISTANCE");
  if (v == nullptr) return calibrated;
  const std::optional<double> d = parse_env_number(v);  // NaN would disable the nearest level unsaid
  if (!d || *d < 0) {
    log().warn("DFGNN_NEAREST_MAX_DISTANCE='{}' is not a non-negative number; using {}", v, calibrated);
    return calibrated;
  }
  return *d;
}

// The problem a row was tuned for; its fingerprint is `fp`, the row's parsed text.
PassProblem problem_of_row(const db::TuningResult& row, const dfgnn_fingerprint_t& fp) {
  PassProblem p;
  p.op = dfgnnOpDefault(static_cast<dfgnn_model_t>(row.op.model), static_cast<dfgnn_dtype_t>(row.op.dtype),
                        row.op.heads, row.op.dim);
  const KeyBits bits = unpack_key_bits(row.op.key_bits);
  p.op.edge_features = bits.edge_features;
  p.pass = static_cast<PassKind>(row.op.direction);
  p.fingerprint = &fp;
  p.max_vec = bits.max_vec;
  return p;
}

}  // namespace

const char* level_name(DispatchLevel level) {
  switch (level) {
    case DispatchLevel::Cache: return "cache";
    case DispatchLevel::Exact: return "exact";
    case DispatchLevel::Nearest: return "nearest";
    case DispatchLevel::Tuned: return "tuned";
    case DispatchLevel::Default: return "default";
  }
  return "unknown";
}

namespace {

std::string describe_first_answer(const Decision& d) {
  std::string from = d.row ? fmt::format(" of the {} database {}", d.layer, d.row->source) : std::string();
  if (d.row && d.row->op.model != static_cast<int32_t>(d.model))
    from += fmt::format(", tuned for {} on the same op shape",
                        model_name(static_cast<dfgnn_model_t>(d.row->op.model)));
  if (!d.tuned_on.empty()) from += ", tuned on " + d.tuned_on;
  switch (d.origin) {
    case DispatchLevel::Exact: return "exact hit" + from;
    case DispatchLevel::Nearest: {
      if (!d.row) break;
      const dfgnn_fingerprint_t fp = stored_fingerprint(d.row->fingerprint_text).fp;  // checked when the row was read
      return fmt::format("nearest tuned graph {} ({} nodes, {} edges) at distance {:.3g} within radius {:g}{}",
                         d.row->fingerprint_hash, fp.num_nodes, fp.num_edges, d.distance, d.radius, from);
    }
    case DispatchLevel::Tuned: return "tuned on a miss, stored in the user database";
    case DispatchLevel::Default: return "default rule: " + d.rule;
    case DispatchLevel::Cache: break;
  }
  return level_name(d.origin);
}

// The in-process caches' key of an op's pass (with max_vec), also the database rows' op part.
std::string op_part_of(const dfgnn_op_t& op, PassKind pass, int32_t max_vec) {
  return fmt::format("{}:{}:{}:{}:{}:{}:{}", static_cast<int>(op.model), static_cast<int>(op.dtype), op.heads, op.dim,
                     static_cast<int>(pass), max_vec, op.edge_features);
}

}  // namespace

std::string describe_origin(const Decision& d) {
  const std::string text = describe_first_answer(d);
  return d.bucket ? text + ", given to an earlier graph of the same fingerprint bucket" : text;
}

void register_tuning_hook(std::shared_ptr<TuningHook> hook) {
  std::lock_guard lock(hook_mutex);
  registered_hook = std::move(hook);
}

std::shared_ptr<TuningHook> tuning_hook() {
  std::lock_guard lock(hook_mutex);
  return registered_hook;
}

db::OpKey op_key(const dfgnn_op_t& op, PassKind pass, int32_t max_vec) {
  db::OpKey k;
  k.model = op.model;
  k.dtype = op.dtype;
  k.heads = op.heads;
  k.dim = op.dim;
  k.direction = static_cast<int32_t>(pass);
  k.key_bits = pack_key_bits({max_vec, op.edge_features ? 1 : 0});
  return k;
}

db::FingerprintText db_fingerprint(const dfgnn_fingerprint_t& fp) {
  return {serialize_fingerprint(fp), fingerprint_bucket_key(fp)};
}

std::string row_problem(const db::TuningResult& row) {
  try {
    if (row.op.direction < 0 || row.op.direction > 2) return fmt::format("pass {} is unknown", row.op.direction);
    // Checked as integers: casting an out-of-range value to the C enums is undefined behaviour.
    if (row.op.model < 0 || row.op.model >= kNumModels) return fmt::format("model {} is unknown", row.op.model);
    if (row.op.dtype < DFGNN_DTYPE_FLOAT32 || row.op.dtype > DFGNN_DTYPE_FLOAT64)
      return fmt::format("dtype {} is unknown", row.op.dtype);
    const KeyBits bits = unpack_key_bits(row.op.key_bits);
    if (row.op.key_bits < 0 || bits.max_vec < 1 || bits.max_vec > 8 || bits.edge_features > 1)
      return fmt::format("key bits {} are not a vector limit 1..8 plus {} for edge features", row.op.key_bits,
                         kEdgeFeaturesKeyBits);
    const StoredFingerprint stored = stored_fingerprint(row.fingerprint_text);
    const dfgnn_fingerprint_t& fp = stored.fp;
    if (!stored.canonical) return "fingerprint text is not in canonical form";
    if (stored.bucket_key != row.bucket_key)
      return fmt::format("bucket key '{}' is not the fingerprint's ('{}')", row.bucket_key, stored.bucket_key);
    const PassProblem problem = problem_of_row(row, fp);
    validate_op(problem.op, fp.num_nodes, fp.num_edges);
    const Schedule s = parse_schedule(row.schedule);
    if (static_cast<int32_t>(s.solver) != row.solver_id)
      return fmt::format("solver id {} does not match schedule '{}'", row.solver_id, row.schedule);
    require_valid(problem, s);
    return {};
  } catch (const std::exception& e) {
    return e.what();
  }
}

Dispatcher::Dispatcher() : mode_(mode_from_environment()), max_distance_(distance_from_environment()) {}

void Dispatcher::set_database(std::optional<std::filesystem::path> user_path,
                              std::optional<std::vector<std::filesystem::path>> site_paths) {
  std::lock_guard lock(mutex_);
  user_path_ = std::move(user_path);
  site_paths_ = std::move(site_paths);
  db_.reset();
  db_opened_ = false;
  forget_locked();
}

std::shared_ptr<db::LayeredDb> Dispatcher::database() {
  std::lock_guard lock(mutex_);
  if (!db_opened_) {
    const Span span("database layers opened");
    db_opened_ = true;
    db::LayeredDb::Options options;
    options.user_path = user_path_;
    options.site_paths = site_paths_;
    options.db.validator = row_problem;
    // With the GPU's identity known, site and shipped databases of another GPU or build are
    // skipped at open (one logged line each) rather than missing on every lookup.
    try {
      if (env_ || device_status().available) options.environment = environment_locked();
    } catch (const std::exception& e) {
      log().debug("tuning database layers opened without the GPU's identity: {}", e.what());
    }
    try {
      db_ = std::make_shared<db::LayeredDb>(options);  // it logs each layer it cannot use, once
    } catch (const std::exception& e) {
      log().warn("tuning database unavailable, dispatch uses the default rule: {}", e.what());
      db_.reset();
    }
  }
  return db_;
}

const db::EnvironmentInfo& Dispatcher::environment() {
  std::lock_guard lock(mutex_);
  return environment_locked();
}

const db::EnvironmentInfo& Dispatcher::environment_locked() {
  if (!env_) {
    const Span span("GPU identity read");
    require_device("reading the GPU's identity");
    int device = 0;
    cuda_check(cudaGetDevice(&device), "cudaGetDevice");
    int major = 0, minor = 0, sms = 0;
    cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute");
    cuda_check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "cudaDeviceGetAttribute");
    cuda_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    db::EnvironmentInfo env;
    env.gpu_name = device_name(device);
    env.compute_capability = major * 10 + minor;
    env.sm_count = sms;
    int driver = 0;
    if (cudaDriverGetVersion(&driver) == cudaSuccess) env.driver_version = driver;
    // nvrtc_version stays 0 here: no lookup reads it, and loading NVRTC to ask took 5.6 ms of a
    // process's first dispatch (shipped modules need no NVRTC); environment_for_writes fills it in.
    env.library_version = dfgnnGetVersion();
    env.template_hash = kernel_source_hash();
    env_ = std::move(env);
  }
  return *env_;
}

db::EnvironmentInfo Dispatcher::environment_for_writes() {
  std::lock_guard lock(mutex_);
  db::EnvironmentInfo env = environment_locked();
  if (env.nvrtc_version == 0) {
    try {  // 0 without NVRTC: the shipped and stored modules still run
      env.nvrtc_version = nvrtc_version();
    } catch (const Error&) {
    }
  }
  return env;
}

bool Dispatcher::environment_known() {
  {
    std::lock_guard lock(mutex_);
    if (env_) return true;
  }
  return device_status().available;
}

void Dispatcher::set_environment(db::EnvironmentInfo env) {
  std::lock_guard lock(mutex_);
  env_ = std::move(env);
  db_.reset();  // reopened for this environment
  db_opened_ = false;
  forget_locked();
}

void Dispatcher::set_mode(TuneMode mode) {
  std::lock_guard lock(mutex_);
  mode_ = mode;
  forget_locked();
}

void Dispatcher::set_max_distance(double d) {
  std::lock_guard lock(mutex_);
  max_distance_ = d;
  forget_locked();
}

void Dispatcher::forget() {
  std::lock_guard lock(mutex_);
  forget_locked();
}

void Dispatcher::forget_locked() {
  cache_.clear();
  bucket_cache_.clear();
  op_rows_.clear();
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

Dispatcher::Answering Dispatcher::answering_rows(const std::string& hash, const std::string& op_part,
                                                 const db::OpKey& own) {
  if (!environment_known()) return {.key = own};
  const std::shared_ptr<db::LayeredDb> layers = database();
  if (layers == nullptr) return {.key = own};
  {
    std::lock_guard lock(mutex_);
    if (auto it = op_rows_.find(op_part); it != op_rows_.end())
      return {.key = it->second.key, .own_row = it->second.hashes.count(hash) > 0};
  }
  OpRows rows{own, {}};
  try {
    // A graph tuned for itself needs no other row. The set of every fingerprint with a row (each row
    // read and validated: most of an exact hit's cost) is read at the first graph without one, which
    // it serves: a sampler's later graphs, and the models_alike fallback below.
    if (std::optional<db::TuningResult> row = layers->find_exact(environment(), own, hash))
      return {.key = own, .own_row = true, .exact = std::move(row)};
    const auto hashes_of = [&](const db::OpKey& key) {
      std::unordered_set<std::string> out;
      for (const db::TuningResult& row : layers->candidates_for(environment(), key)) out.insert(row.fingerprint_hash);
      return out;
    };
    rows.hashes = hashes_of(own);
    // No row of this model on the op shape: the most alike model's rows answer (op.hpp). On the 12-06
    // sweep a winner of another (H, D) ran up to 1.48x the best (8 x 8 from 1 x 16) or was no candidate
    // there (D = 7 from D = 3 in 64 of 87 cases), so shapes do not answer for each other
    // (bench/results/2026-12-06c-default-rule.md). Tuning on a miss tunes the op's own instead.
    if (rows.hashes.empty() && mode_ != TuneMode::OnMiss)
      for (const dfgnn_model_t other : models_alike(static_cast<dfgnn_model_t>(own.model))) {
        db::OpKey key = own;
        key.model = other;
        rows.hashes = hashes_of(key);
        if (!rows.hashes.empty()) {
          rows.key = key;
          break;
        }
      }
  } catch (const std::exception& e) {
    log().warn("tuning database lookup failed: {}", e.what());
    // unknown: ask the database for this graph rather than share a bucket-mate's answer
    return {.key = own, .own_row = true};
  }
  Answering out{.key = rows.key, .own_row = rows.hashes.count(hash) > 0};
  std::lock_guard lock(mutex_);
  op_rows_.emplace(op_part, std::move(rows));
  return out;
}

std::optional<Decision> Dispatcher::from_database(const PassProblem& problem, const std::string& hash,
                                                  Answering rows) {
  const std::shared_ptr<db::LayeredDb> layers = database();
  if (layers == nullptr) return std::nullopt;
  const db::EnvironmentInfo& env = environment();
  const dfgnn_fingerprint_t& fp = *problem.fingerprint;
  // A row of another GPU of this architecture (a read-only layer's stand-in) says so in explain.
  const auto answered_by = [&, here = db::environment_class(env)](Decision& d, db::TuningResult&& row) {
    d.layer = row.layer;
    if (row.env_class != here) d.tuned_on = row.env_class;
    d.row = std::move(row);
  };
  // Rows were validated against their own problem; the schedule must also suit this graph.
  auto usable = [&](const db::TuningResult& row, Schedule& out) {
    try {
      out = parse_schedule(row.schedule);
      require_valid(problem, out);
      return true;
    } catch (const std::exception& e) {
      log().debug("tuning row for {} not usable here: {}", row.schedule, e.what());
      return false;
    }
  };
  const db::OpKey& key = rows.key;
  // Only a graph with a row of its own (answering_rows) has an exact answer to look up.
  if (!rows.exact && rows.own_row) rows.exact = layers->find_exact(env, key, hash);
  if (auto& row = rows.exact) {
    Decision d;
    if (usable(*row, d.schedule)) {
      d.level = d.origin = DispatchLevel::Exact;
      answered_by(d, std::move(*row));
      return d;
    }
  }
  // Nearest level (nearest.hpp): the tuned graphs within the vote radius, nearest first. Every
  // result of this op and GPU class is a candidate (no bucket pre-filter: the calibrated distance
  // alone decides who is near).
  const double radius = max_distance_;
  const double vote_radius = radius * nearest_calibration().vote_factor;
  std::vector<std::pair<double, db::TuningResult>> near;
  for (db::TuningResult& row : layers->candidates_for(env, key)) {
    const double distance = fingerprint_distance(fp, stored_fingerprint(row.fingerprint_text).fp);  // validated rows
    if (distance <= vote_radius) near.emplace_back(distance, std::move(row));
  }
  std::sort(near.begin(), near.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second.fingerprint_hash < b.second.fingerprint_hash;
  });
  if (near.empty() || near.front().first > radius) return std::nullopt;
  const auto neighbour = [&](const std::pair<double, db::TuningResult>& near_row) {
    TunedNeighbour n{near_row.first, near_row.second.schedule, layers->pooled_candidates(near_row.second), 0.0};
    std::vector<stats::Summary> summaries;
    for (const db::CandidateStat& c : n.candidates) summaries.push_back(c.summary());
    n.pooled_spread = stats::median_relative_stddev(summaries);
    return n;
  };
  const stats::TiePolicy& tie = layers->policy().tie;
  std::vector<TunedNeighbour> neighbours{neighbour(near.front())};
  // The others vote only among the schedules the nearest graph offers. When it offers its winner
  // alone, no vote can change the answer, so their statistics are not read (a process's first
  // decision reads each from the database, 0.05-0.1 ms apiece).
  if (eligible_schedules(neighbours.front(), tie).size() > 1)
    for (size_t i = 1; i < near.size(); ++i) neighbours.push_back(neighbour(near[i]));
  const NearestRanking ranking = rank_nearest(neighbours, radius, tie);
  Decision d;
  d.level = d.origin = DispatchLevel::Nearest;
  d.distance = near.front().first;
  d.radius = radius;
  d.neighbours = ranking.voters;
  for (const std::string& text : ranking.schedules) {
    db::TuningResult probe = near.front().second;
    probe.schedule = text;
    if (usable(probe, d.schedule)) {
      answered_by(d, std::move(near.front().second));
      return d;
    }
  }
  return std::nullopt;
}

std::optional<Decision> Dispatcher::database_answer(const Graph& graph, const dfgnn_op_t& op, PassKind pass,
                                                    int32_t max_vec) {
  if (!environment_known()) return std::nullopt;
  const PassProblem problem = pass_problem(graph, op, pass, max_vec);
  const std::string hash = db::fingerprint_hash(serialize_fingerprint(*problem.fingerprint));
  try {
    std::optional<Decision> d =
        from_database(problem, hash, answering_rows(hash, op_part_of(op, pass, max_vec), op_key(op, pass, max_vec)));
    if (d) d->model = op.model;
    return d;
  } catch (const std::exception& e) {
    log().warn("tuning database lookup failed: {}", e.what());
    return std::nullopt;
  }
}

Decision Dispatcher::decide(Context& ctx, const Graph& graph, const dfgnn_op_t& op, PassKind pass, int32_t max_vec) {
  const std::string op_part = op_part_of(op, pass, max_vec);
  const std::string key = fmt::format("{}:{}", graph.id(), op_part);
  const auto cached = [](Decision d) {
    d.level = DispatchLevel::Cache;
    return d;
  };
  {
    std::lock_guard lock(mutex_);
    if (auto it = cache_.find(key); it != cache_.end()) return cached(it->second);
  }
  const Span span("dispatch decision");
  // Graphs of one fingerprint bucket (a sampler's mini-batches) share an answer: a new graph whose
  // bucket was answered before costs no database query. The answer is re-checked for this graph;
  // a graph with a row tuned for its own fingerprint gets that row instead.
  const PassProblem problem = pass_problem(graph, op, pass, max_vec);
  const std::string bucket = fmt::format("{}:{}", fingerprint_bucket_key(*problem.fingerprint), op_part);
  const std::string hash = db::fingerprint_hash(serialize_fingerprint(*problem.fingerprint));  // once per graph
  Answering rows = answering_rows(hash, op_part, op_key(op, pass, max_vec));
  if (!rows.own_row) {
    std::lock_guard lock(mutex_);
    if (auto b = bucket_cache_.find(bucket); b != bucket_cache_.end()) {
      const Solver* solver = find_solver(b->second.schedule.solver);
      if (solver != nullptr && solver->invalid_reason(problem, b->second.schedule).empty()) {
        Decision d = b->second;
        d.bucket = true;
        return cached(remember(key, d)->second);
      }
    }
  }
  const uint64_t generation = generation_.load(std::memory_order_acquire);
  std::optional<Decision> found;
  if (environment_known()) {
    try {
      found = from_database(problem, hash, std::move(rows));
    } catch (const std::exception& e) {
      log().warn("tuning database lookup failed, using the default rule: {}", e.what());
    }
    if (!found && mode_ == TuneMode::OnMiss) {
      if (auto hook = tuning_hook()) {
        if (auto tuned = hook->tune(ctx, graph, op, pass, max_vec)) {
          found = Decision{};
          found->schedule = *tuned;
          found->level = found->origin = DispatchLevel::Tuned;
          found->layer = db::layer_name(db::LayerKind::User);  // the tuner stores its winner there
        }
      }
    }
  }
  Decision d = found ? std::move(*found) : Decision{};
  d.model = op.model;
  if (!found) {
    DefaultChoice choice = default_choice(problem);
    d.schedule = choice.schedule;
    d.level = d.origin = DispatchLevel::Default;
    d.rule = std::move(choice.rule);
  }
  std::lock_guard lock(mutex_);
  // A database change or tuning while deciding retires this answer: it is returned, not remembered.
  // (A tuned answer is kept: tuning itself started the new generation.)
  if (generation_.load(std::memory_order_acquire) == generation || d.origin == DispatchLevel::Tuned) {
    remember(key, d);
    bucket_cache_.emplace(bucket, d);
  }
  return d;
}

std::unordered_map<std::string, Decision>::iterator Dispatcher::remember(const std::string& key, const Decision& d) {
  // Graph ids are never reused, so a sampler's stream of batches would grow this without bound:
  // start over past a limit (the bucket cache answers the next lookups without a query).
  constexpr size_t kMaxGraphDecisions = 4096;
  if (cache_.size() >= kMaxGraphDecisions) cache_.clear();
  return cache_.emplace(key, d).first;
}

}  // namespace dfgnn
