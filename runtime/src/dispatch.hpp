// Dispatch: which schedule a pass runs when the caller does not force one.
//   in-process cache -> exact database hit -> nearest tuned fingerprint (same GPU class, within a
//   distance threshold) -> tuning on a miss (if enabled) -> the solvers' default rule.
// The databases are layered: user over site ($DFGNN_SITE_DB) over shipped (the package's own,
// db::LayeredDb::default_shipped_paths). A cached decision keeps its origin: which level first
// answered, from which layer, which neighbour or which rule.
// Every database row is validated (schedule parses, solver known, valid for this problem) before
// use; an unusable database is logged and dispatch falls back to the default rule.
#pragma once

#include <dfgnn/dfgnn.h>

#include "schedule.hpp"
#include "tuning_db.hpp"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace dfgnn {

class Graph;
struct Context;

enum class DispatchLevel { Cache, Exact, Nearest, Tuned, Default };
const char* level_name(DispatchLevel level);

struct Decision {
  Schedule schedule;
  DispatchLevel level = DispatchLevel::Default;   // which level answered this call (Cache: an earlier answer)
  DispatchLevel origin = DispatchLevel::Default;  // the level that first produced it, kept in the cache
  bool cached() const { return level == DispatchLevel::Cache; }
  // Where the origin's answer came from.
  std::string layer;      // Exact / Nearest: the database layer of the row ("user", "site", "shipped"); Tuned: "user"
  double distance = 0;    // Nearest: fingerprint distance to the nearest tuned graph (the row below)
  double radius = 0;      // Nearest: the radius it lies within (max_distance at the time)
  int neighbours = 0;     // Nearest: tuned graphs that voted
  std::string rule;       // Default: which rule answered (default_rule_name)
  std::optional<db::TuningResult> row;  // Exact / Nearest: the database row used
  bool bucket = false;  // Cache: the answer came from another graph of the same fingerprint bucket
  dfgnn_model_t model = DFGNN_MODEL_GAT;  // the op's model (the row may be another model's: models_alike)
  std::string tuned_on;  // Exact / Nearest: the GPU class of a row tuned on another GPU of this architecture
};

// The name explain gives the default rule's answer for a problem (the hook where a fitted rule
// names its leaf).
std::string default_rule_name(const PassProblem& problem);
// One line saying where a decision's answer came from, e.g. "exact hit of the shipped database
// /usr/share/dfgnn/tuning/sm90.db" (explain's "origin_detail").
std::string describe_origin(const Decision& d);

// Tuning on a dispatch miss: runtime owns this interface, the tuner implements and registers it
// (runtime never includes the tuner).
class TuningHook {
 public:
  virtual ~TuningHook() = default;
  // Tunes one pass, stores the result in the context's database, returns the winner (or nullopt
  // if tuning was not possible, e.g. no writable database).
  virtual std::optional<Schedule> tune(Context& ctx, const Graph& graph, const dfgnn_op_t& op, PassKind pass,
                                       int32_t max_vec) = 0;
};
void register_tuning_hook(std::shared_ptr<TuningHook> hook);
std::shared_ptr<TuningHook> tuning_hook();

enum class TuneMode { Off = 0, OnMiss = 1 };

// The database key of a pass.
db::OpKey op_key(const dfgnn_op_t& op, PassKind pass, int32_t max_vec);
// A fingerprint as the database keeps it (the database takes text and never parses it): its
// serialised form and bucket key. Its identity is db::fingerprint_hash(text).
db::FingerprintText db_fingerprint(const dfgnn_fingerprint_t& fp);
// Checks a database row against the problem it would serve: "" if usable, else the reason. Also
// judges its fingerprint text: it must parse, be in canonical form and match the row's bucket key.
std::string row_problem(const db::TuningResult& row);

class Dispatcher {
 public:
  Dispatcher();

  Decision decide(Context& ctx, const Graph& graph, const dfgnn_op_t& op, PassKind pass, int32_t max_vec);
  // What the database layers answer for this pass, as decide() would before tuning or the default
  // rule (an exact row or the nearest tuned graphs), bypassing the in-process caches; none when they
  // hold nothing that answers or the GPU is unknown. The tuner measures it early (tune_pass).
  std::optional<Decision> database_answer(const Graph& graph, const dfgnn_op_t& op, PassKind pass, int32_t max_vec);

  // Database layers: user_path nullopt = default location ($DFGNN_CACHE_DIR, XDG, ~/.cache),
  // "" = none; site_paths nullopt = $DFGNN_SITE_DB. Takes effect at the next lookup; clears the
  // in-process cache.
  void set_database(std::optional<std::filesystem::path> user_path,
                    std::optional<std::vector<std::filesystem::path>> site_paths);
  // The layered database (opened on first use), or null when none could be opened. Shared, so a
  // lookup in flight keeps it alive through a concurrent set_database.
  std::shared_ptr<db::LayeredDb> database();
  // This process's GPU and build (needs a device), as lookups need it: nvrtc_version is 0 unless
  // injected. Tests may inject one (the layers are then reopened, so that site and shipped
  // databases of another GPU or build are skipped).
  const db::EnvironmentInfo& environment();
  // The same with NVRTC's version (0 without NVRTC), as stored with tuning results.
  db::EnvironmentInfo environment_for_writes();
  void set_environment(db::EnvironmentInfo env);
  // An environment was injected or a device can report one (else only the default rule applies).
  bool environment_known();

  // Changing the mode or the distance forgets earlier decisions.
  void set_mode(TuneMode mode);
  TuneMode mode() const { return mode_; }
  double max_distance() const { return max_distance_; }
  void set_max_distance(double d);
  // Drops remembered decisions (after tuning, or a database change) and starts a new generation.
  void forget();
  // Counts forget()s: launch recipes built under an older generation are rebuilt.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  // Which rows answer an op (op_part): the op key, its own or where no layer holds a row of its model
  // on this op shape, the most alike model's that has rows (models_alike; not when tuning on a miss,
  // which tunes the op's own); and whether some layer holds a row of that key tuned for exactly the
  // fingerprint `hash` (such a graph never takes a bucket-mate's answer), with the row when it was read.
  struct Answering {
    db::OpKey key;
    bool own_row = false;
    std::optional<db::TuningResult> exact = std::nullopt;
  };
  Answering answering_rows(const std::string& hash, const std::string& op_part, const db::OpKey& own);
  // The database's answer for a problem whose fingerprint hashes to `hash`, from the rows `rows` names.
  std::optional<Decision> from_database(const PassProblem& problem, const std::string& hash, Answering rows);
  const db::EnvironmentInfo& environment_locked();

  void forget_locked();
  std::unordered_map<std::string, Decision>::iterator remember(const std::string& key, const Decision& d);

  std::mutex mutex_;
  std::atomic<uint64_t> generation_{0};
  std::unordered_map<std::string, Decision> cache_;         // by graph and op
  std::unordered_map<std::string, Decision> bucket_cache_;  // by fingerprint bucket and op
  struct OpRows {
    db::OpKey key;                          // whose rows answer
    std::unordered_set<std::string> hashes;  // the fingerprints with a row of it
  };
  std::unordered_map<std::string, OpRows> op_rows_;  // by op (op_part)
  std::optional<std::filesystem::path> user_path_;
  std::optional<std::vector<std::filesystem::path>> site_paths_;
  std::shared_ptr<db::LayeredDb> db_;
  bool db_opened_ = false;
  std::optional<db::EnvironmentInfo> env_;
  std::atomic<TuneMode> mode_{TuneMode::Off};
  std::atomic<double> max_distance_{2.0};  // set from the environment (dispatch.cpp)
};

}  // namespace dfgnn
