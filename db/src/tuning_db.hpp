// dfgnn's tuning database: what the tuner learned (per problem: the winning schedule, its
// statistics and the per-candidate measurements behind it) and the compiled modules, kept in
// SQLite files.
//
// Below the runtime: includes nothing of dfgnn's but its own headers (the build gives it no other
// include path) and calls no dfgnn function. Schedules and fingerprints are opaque text here
// ("subwarp:lanes=32,...", the runtime's fingerprint serialisation): the caller serialises and parses
// them, and decides through a RowValidator callback whether a row is valid for a problem.
//
// Model
// - A *problem* is (environment class, build stamp, op key, fingerprint):
//     environment class = GPU name + compute capability + SM count (see environment_class()), so
//                         a heterogeneous cluster never uses another GPU's winner;
//     build stamp       = template_hash + library_version of the EnvironmentInfo that measured it,
//                         so results of a different kernel source or library are never pooled
//                         with, nor returned for, the current build (a stale row is a miss);
//     op key            = OpKey (model, dtype, heads, dim, direction, key_bits);
//     fingerprint       = the graph's degree fingerprint as the caller's text, identified by
//                         fingerprint_hash() of that text.
// - A *run* is one tuning session of one problem (one put_result call): per candidate schedule
//   its measurement statistics (count, mean, M2 as in Welford's algorithm, min, median). Runs are
//   identified by a globally unique run id, so storing or merging the same run twice is a no-op.
// - The *result* of a problem is derived from all its runs (see WinnerPolicy): candidate
//   statistics are pooled exactly over the runs (Chan et al.'s parallel Welford update, summed in
//   run-id order so the result does not depend on insertion or merge order), and the winner is
//   recomputed. Hence merges are idempotent and order-independent.
//
// Files
// - A user database (open_user) is writable: WAL journal, busy timeout, every write one short
//   BEGIN IMMEDIATE transaction, retried on SQLITE_BUSY. Many processes on one node may share it.
// - A site database (open_site) is read-only and opened with SQLite's immutable flag: no locks,
//   no journal, safe on network filesystems. Ship a snapshot made by export_to(), never a live
//   user file (its un-checkpointed WAL would be ignored).
// - LayeredDb reads the user database first, then the site databases in priority order, then the
//   databases shipped with the package (LayeredDb::default_shipped_paths); writes go to the user
//   database only.
//
// Validation: every row is validated before it is returned (structure, environment class, build
// stamp, fingerprint hash against its text, statistics, then the caller's RowValidator, which
// also judges what the fingerprint text says). An invalid row is
// a miss, logged on the "dfgnn" spdlog logger; it never throws and is never returned.
//
// Errors: TuningDb methods throw DbError (db_error.hpp: a std::runtime_error with a kind(): disk
// full, read-only, damaged, not a database, foreign, newer schema, schema differs, busy...; the
// message names the path, SQLite's error and the kind), kind InvalidArgument for a malformed
// argument. The runtime reports them as DFGNN_STATUS_DATABASE_ERROR / INVALID_ARGUMENT. LayeredDb's
// read methods never throw: a failing layer is logged and skipped.
//
// Thread safety: a TuningDb / LayeredDb object may be used from several threads (calls are
// serialised by an internal mutex). Do not carry an open object across fork(): open a new one in
// the child.
#pragma once

#include "db_error.hpp"
#include "stats.hpp"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace dfgnn::db {

// Schema version written by this build (PRAGMA user_version). Older files are migrated (a user
// database in place, a site database in memory); newer ones are refused.
inline constexpr int kSchemaVersion = 2;

// ------------------------------------------------------------------------------------------
// Keys

// Where a result was measured. All fields are stored with every run.
struct EnvironmentInfo {
  std::string gpu_name;         // cudaDeviceProp::name, e.g. "NVIDIA H200"
  int32_t compute_capability = 0;  // major * 10 + minor, e.g. 90
  int32_t sm_count = 0;         // multiProcessorCount
  int32_t driver_version = 0;   // cudaDriverGetVersion, e.g. 12040 (0 if unknown)
  int32_t nvrtc_version = 0;    // major * 1000 + minor * 10 (0 if unknown)
  std::string library_version;  // dfgnnGetVersion()
  std::string template_hash;    // hash of the embedded kernel template source
  bool operator==(const EnvironmentInfo&) const = default;
};

// The GPU class results are shared within: "<gpu_name>|sm_<cc>|<sm_count>", e.g.
// "NVIDIA H200|sm_90|132". Driver/NVRTC versions are not part of it (they do not change which
// schedules are valid); template hash and library version are part of the problem key instead.
std::string environment_class(const EnvironmentInfo& env);

// What is computed, as far as the database cares. The fields are opaque integers to the
// database; by convention model/dtype are the dfgnn_model_t/dfgnn_dtype_t values, direction is
// the pass tuned (e.g. dfgnn::PassKind: 0 forward, 1 backward row side, 2 backward column side)
// and key_bits holds any further caller-defined facts packed into one integer that change the best
// schedule or its validity (the runtime's KeyBits: vector-width limit, edge features); 0 when unused.
// Column `key_bits` of table results (named `variant` in schema version 1).
struct OpKey {
  int32_t model = 0;
  int32_t dtype = 0;
  int32_t heads = 1;
  int32_t dim = 1;
  int32_t direction = 0;
  int32_t key_bits = 0;
  bool operator==(const OpKey&) const = default;
};

// A graph's fingerprint as the caller hands it over: its text form (the runtime's
// dfgnnFingerprintSerialize; stored and returned as given) and its coarse bucket key (the runtime's
// dfgnnFingerprintBucketKey), which candidates_for can filter by.
struct FingerprintText {
  std::string text;
  std::string bucket_key;
};
// Stable identity of a fingerprint: XXH64 (hex, 16 digits) of its text. The database checks every
// stored fingerprint against it, so a tampered text is a miss.
std::string fingerprint_hash(const std::string& text);

// ------------------------------------------------------------------------------------------
// Rows

// Measurement statistics of one candidate schedule, in milliseconds. As input (in a TuningRun):
// the statistics of that run. As output (pooled_candidates()): pooled over all runs, with
// median_ms the count-weighted mean of the runs' medians (one run: its median), the location the
// winner policy reads.
struct CandidateStat {
  std::string schedule;    // text form, e.g. "subwarp:lanes=32,groups=8,team=1,vec=4,mid=0,threshold=0,chunk=0"
  int32_t solver_id = 0;   // the solver's stable id
  int64_t count = 0;       // samples (>= 1)
  double mean_ms = 0;      // sample mean
  double m2 = 0;           // sum of squared deviations from the mean (Welford's M2), >= 0
  double min_ms = 0;
  double median_ms = 0;
  // Sample variance M2 / (count - 1); 0 for fewer than two samples.
  double variance() const { return count > 1 ? m2 / static_cast<double>(count - 1) : 0.0; }
  stats::Summary summary() const { return {count, mean_ms, m2, min_ms, median_ms}; }
};

// The temporary file an export to target by process pid writes before renaming it into place:
// "TARGET.tmp-HOST-PID-START-TAG" (HOST: this host's name, START: the process's start time,
// process_start_ticks(), so that a new process reusing the pid is told apart; TAG: random hex).
std::filesystem::path export_temp_path(const std::filesystem::path& target, int64_t pid, int64_t start_ticks,
                                       const std::string& tag);
// The suffix ("-wal", "-shm" or "-journal") of the SQLite file of `database` that `file` is (the
// same path once resolved), or "" for any other file. Merging from one, or exporting over one,
// would lose or damage the database's writes: both are refused.
std::string own_sidecar(const std::filesystem::path& database, const std::filesystem::path& file);
// When process pid started, in clock ticks since boot (/proc/PID/stat); 0 where unknown.
int64_t process_start_ticks(int64_t pid);

// Convenience for the tuner: the statistics of a list of samples (ms), as stats::summarize.
CandidateStat summarize_samples(std::string schedule, int32_t solver_id, const std::vector<double>& samples_ms);

// Input of put_result(): one tuning run of one problem.
struct TuningRun {
  EnvironmentInfo environment;
  OpKey op;
  FingerprintText fingerprint;   // non-empty, printable text and bucket key
  std::string default_schedule;  // the default rule's schedule for this problem ("" if unknown)
  std::vector<CandidateStat> candidates;  // measured candidates (failed ones left out), any order
  // Provenance. Empty / 0 fields are filled in: host = gethostname(), unix_time = now,
  // tool_version = environment.library_version, run_id = 32 random hex digits. Give a run_id
  // only to make a retried put idempotent; it must be unique across all databases.
  std::string host;
  int64_t unix_time = 0;
  std::string tool_version;
  std::string run_id;
};

// Pooled summary statistics of one schedule.
struct ScheduleStats {
  int64_t count = 0;
  double median_ms = 0;  // count-weighted mean of the runs' medians (one run: its median)
  double mean_ms = 0;    // pooled over all runs
  double variance = 0;   // pooled sample variance
  double min_ms = 0;
};

// The answer for a problem: the winner and what it was chosen against.
struct TuningResult {
  int64_t id = 0;  // row id in the database it came from (for pooled_candidates())
  // Problem key.
  std::string env_class;
  std::string template_hash;
  std::string library_version;
  OpKey op;
  std::string fingerprint_text;  // as stored (FingerprintText::text); the caller parses it
  std::string fingerprint_hash;
  std::string bucket_key;
  // Winner.
  int32_t solver_id = 0;
  std::string schedule;
  ScheduleStats stats;
  // The default rule's schedule and its median ("" / NaN if it was not measured); the best
  // schedule other than the winner ("" / NaN if there is none).
  std::string default_schedule;
  double default_median_ms = 0;
  std::string runner_up_schedule;
  double runner_up_median_ms = 0;
  // Provenance of the most recent run (by time, then run id), and how many runs were pooled.
  std::string host;
  int64_t unix_time = 0;
  std::string tool_version;
  int64_t environment_id = 0;  // row id of `environment` in the database it came from
  EnvironmentInfo environment;
  int64_t runs = 0;
  std::string source;  // path of the database that answered
  std::string layer;   // read through LayeredDb: the kind of that database, "user", "site" or "shipped"
};

// Validates a row for use: "" if the schedule may be used for the problem, else the reason
// (unknown solver, malformed text, parameter out of range for op/fingerprint...). It sees the
// winner in `schedule`/`solver_id`, with the problem key (op, fingerprint, environment) filled in.
// Called for every row read (find_exact, candidates_for, list, verify) and, in a database that has
// one, for every candidate when a winner is chosen (put_result, merge_from, prune), so an invalid
// schedule is never chosen there. Must be thread-safe; an exception counts as invalid.
using RowValidator = std::function<std::string(const TuningResult&)>;

// How the winner of a problem is chosen from its pooled candidate statistics.
// 1. Eligible: pooled count >= min_count, finite statistics, and accepted by the validator of the
//    writing database (if it has one).
// 2. The winner policy of stats/stats.hpp over the eligible candidates (median and pooled moments,
//    band `tie`): the lowest median wins (ties: schedule text), unless the default schedule is
//    eligible and tied with it, then the default. The tuner decides by the same function on the
//    same statistics, so a single run stores the winner the tuner reported. Set tie.tolerance =
//    tie.z = tie.noise_floor = 0 to disable the default preference.
// The default schedule is the one named by the most recent run.
struct WinnerPolicy {
  int64_t min_count = 1;
  stats::TiePolicy tie;
};

// A compiled module, content-addressed by a key the caller derives from everything that changes
// the binary (source hash, NVRTC version, options, arch, name expressions).
struct ModuleRecord {
  std::string key;                  // hex hash string
  std::vector<char> image;          // cubin
  std::vector<std::string> names;   // name expressions, in request order
  std::vector<std::string> lowered; // their lowered (mangled) names, same order
  int32_t arch = 0;                 // e.g. 90
  int32_t nvrtc_version = 0;
  std::string template_hash;
  int64_t created = 0;              // unix time; 0 = now (put_module)
  std::string layer, source;        // read through a LayeredDb: "user", "site" or "shipped", and its file
};

// Filters for prune(); the given ones must all match (AND). At least one must be given.
struct PruneFilter {
  std::optional<std::string> env_class;        // runs of results of this class
  std::optional<int64_t> older_than;           // runs (and modules) with unix time < this
  std::optional<std::string> library_version;  // runs of results with this library version
  std::optional<std::string> template_hash;    // runs of results (and modules) with this template hash
};
struct PruneReport {
  int64_t runs = 0;      // measurement runs deleted
  int64_t results = 0;   // problems left without any run, deleted
  int64_t modules = 0;   // modules deleted (only by older_than / template_hash, when no
                         // env_class or library_version filter is given)
};

struct MergeReport {
  int64_t runs_added = 0;
  int64_t runs_present = 0;   // already here (same run id): skipped
  int64_t runs_rejected = 0;  // malformed or inconsistent in the source: skipped, logged
  int64_t candidates_rejected = 0;  // candidate rows dropped by checks or the validator
  int64_t results_updated = 0;
  int64_t modules_added = 0;
  int64_t modules_rejected = 0;  // malformed module rows in the source: skipped, logged
  bool source_empty = false;     // the source had no schema (open_merge_source): nothing merged, logged
};

// What a database's results were tuned for: one (environment class, build stamp) and its count.
struct BuildStamp {
  std::string env_class;
  std::string library_version;
  std::string template_hash;
  int64_t results = 0;
};

struct DbStats {
  std::string path;
  int schema_version = 0;
  bool read_only = false;
  int64_t environments = 0, fingerprints = 0, results = 0, results_without_winner = 0, runs = 0,
          candidate_stats = 0, modules = 0, module_bytes = 0;
};

// A row as listed for a CLI: decoded as far as possible, with the reason it would be rejected.
struct ListedResult {
  TuningResult result;
  std::string problem;  // "" if the row is valid (would be returned by find_exact)
};

// ------------------------------------------------------------------------------------------

namespace detail {
struct Migration;  // schema.hpp
class Connection;  // sqlite_util.hpp
}  // namespace detail

class TuningDb {
 public:
  struct Options {
    RowValidator validator;       // applied to every row read and every winner chosen; may be empty
    WinnerPolicy policy;
    int busy_timeout_ms = 10000;  // SQLite busy timeout per lock attempt
    int write_attempts = 6;       // BEGIN IMMEDIATE attempts when the lock stays busy
    // Testing only: schema steps to use instead of the built-in ones (see schema.hpp).
    const std::vector<detail::Migration>* migrations = nullptr;
  };

  // The writable database at path: creates missing directories and the file, WAL journal,
  // migrates an older schema. A file with no schema at all (zero length, or the bare header that a
  // process killed during its first open leaves) is initialised like a new one. Throws
  // DATABASE_ERROR (naming the path and SQLite's message) for an unreadable, truncated, foreign or newer-schema file, which is left untouched.
  static std::unique_ptr<TuningDb> open_user(const std::filesystem::path& path, Options options);
  static std::unique_ptr<TuningDb> open_user(const std::filesystem::path& path) { return open_user(path, Options()); }
  // A read-only database, opened immutable (no locking; safe on network filesystems). An older
  // schema is migrated in a private in-memory copy. Same errors as open_user.
  static std::unique_ptr<TuningDb> open_site(const std::filesystem::path& path, Options options);
  static std::unique_ptr<TuningDb> open_site(const std::filesystem::path& path) { return open_site(path, Options()); }
  // A read-only database opened with locking (mode=ro), for reading a live user database of
  // another process consistently (merge_from uses it; falls back to immutable if that fails).
  static std::unique_ptr<TuningDb> open_read_only(const std::filesystem::path& path, Options options);
  // open_read_only for a merge source: an empty database (no schema at all: a zero-length file, or
  // the bare header that a process killed during its first open_user leaves) gives nullptr, as
  // there is nothing to merge; everything else as open_read_only (which refuses an empty file).
  static std::unique_ptr<TuningDb> open_merge_source(const std::filesystem::path& path, Options options);

  ~TuningDb();
  TuningDb(const TuningDb&) = delete;
  TuningDb& operator=(const TuningDb&) = delete;

  const std::filesystem::path& path() const { return path_; }
  bool read_only() const { return read_only_; }
  const Options& options() const { return options_; }

  // ---- results
  // Records one run and recomputes the problem's result (see WinnerPolicy). Returns the new
  // result, or nullopt if no candidate is eligible. Storing a run id that is already present
  // changes nothing. Throws INVALID_ARGUMENT for a malformed run (no candidates, empty or
  // duplicate schedule text, count < 1, non-finite or negative statistics), DATABASE_ERROR on a
  // read-only database or a failing file.
  std::optional<TuningResult> put_result(const TuningRun& run);

  // The validated result for (current environment's class and build stamp, op, fingerprint), or
  // nullopt. An empty template_hash / library_version in `current` matches any (for tools; the
  // most recent matching row wins); dispatch must give both.
  // The fingerprint is given by its fingerprint_hash().
  std::optional<TuningResult> find_exact(const EnvironmentInfo& current, const OpKey& op,
                                         const std::string& fingerprint_hash);
  // All validated results of the current environment class and build stamp for op (optionally
  // only those in one fingerprint bucket), each with its fingerprint text, ordered by fingerprint
  // hash: the caller parses the texts and picks the nearest (the runtime: fingerprint distance).
  std::vector<TuningResult> candidates_for(const EnvironmentInfo& current, const OpKey& op,
                                           const std::optional<std::string>& bucket_key = std::nullopt);
  // Pooled statistics of every candidate of a result (by TuningResult::id), best mean first.
  std::vector<CandidateStat> pooled_candidates(int64_t result_id);

  // ---- compiled modules
  // Stores a module; a key already present is kept (content-addressed). Throws INVALID_ARGUMENT
  // for an empty key or image, or names/lowered of different lengths.
  void put_module(const ModuleRecord& module);
  // The module for key, or nullopt (also for a malformed row, logged). When the expected
  // template_hash / nvrtc_version / arch are given (non-empty / non-zero) a mismatch is a miss.
  std::optional<ModuleRecord> get_module(const std::string& key, const std::string& template_hash = {},
                                         int32_t nvrtc_version = 0, int32_t arch = 0);
  // Every module, in key order (a malformed row is skipped and logged): the shipped-file tools'.
  std::vector<ModuleRecord> modules();

  // ---- maintenance (CLI)
  // Imports every run and module of the database file at path that is not here yet, then
  // recomputes the touched results. Idempotent and order-independent. Provenance is kept (run
  // ids, hosts, times, environments). Rows failing validation (including this database's
  // validator, per candidate) are skipped and counted. All or nothing: one snapshot of the source,
  // one write transaction here, so on any error (a full disk, a damaged source) nothing was
  // merged, and repeating the merge later is always safe. A source with no schema at all (what a
  // process killed during its first open_user leaves) merges nothing, with report.source_empty.
  MergeReport merge_from(const std::filesystem::path& path);
  // Writes a consistent, compacted snapshot to path (VACUUM INTO a temporary file in the same
  // directory, export_temp_path(), switched to rollback journal so it opens immutable, then renamed
  // over path). First removes the temporary files of earlier exports to path that were killed
  // (this host's, whose process no longer runs). Refuses (kind Schema) a database whose schema
  // objects differ from dfgnn's, so an injected trigger or view never reaches a site.
  void export_to(const std::filesystem::path& path);
  // Deletes matching runs, then results left without runs (and unused fingerprints and
  // environments), recomputes the rest. Throws INVALID_ARGUMENT for an empty filter.
  PruneReport prune(const PruneFilter& filter);
  // Stamps the results tuned with kernel source `from`, and their environments, as tuned with `to`,
  // in one transaction; returns the results changed. Only for a kernel change that left the machine
  // code of every tuned kernel as it was (dfgnn-db restamp checks that before calling this). Throws
  // INVALID_ARGUMENT for an empty or equal pair of hashes.
  int64_t restamp(const std::string& from, const std::string& to);
  // Every problem found: SQLite's integrity and foreign-key checks, then every row (results
  // validated as for find_exact but against their own stored key, runs, candidate statistics,
  // fingerprints, environments, modules), and results that disagree with their pooled runs.
  // Empty means healthy. Uses `validator` if given, else the database's.
  std::vector<std::string> verify(const RowValidator& validator = {});
  // SQLite's PRAGMA quick_check (every page read, no row checks): "" if the file reads whole, else
  // what is damaged. Never throws: a failing check is its finding.
  std::string quick_check();
  // All results (optionally of one environment class), valid or not, for listing.
  std::vector<ListedResult> list(const std::optional<std::string>& env_class = std::nullopt);
  DbStats stats();
  // Whether the file holds any result.
  bool has_results();
  // The environment classes of the results (streams the results index).
  std::vector<std::string> result_classes();
  // The (environment class, build stamp) pairs of the results, most results first.
  std::vector<BuildStamp> build_stamps();
  // The results of this class and build stamp (an empty version or hash: any), counted up to
  // `at_most` (-1: all): a seek on the results index, where build_stamps scans every result.
  int64_t build_results(const std::string& env_class, const std::string& library_version,
                        const std::string& template_hash, int64_t at_most);
  int schema_version() const { return schema_version_; }

 private:
  TuningDb(std::filesystem::path path, bool read_only, Options options);
  struct Impl;
  std::filesystem::path path_;
  bool read_only_ = false;
  int schema_version_ = 0;
  Options options_;
  std::mutex mutex_;
  std::unique_ptr<detail::Connection> conn_;
};

// ------------------------------------------------------------------------------------------

// The kinds of database a LayeredDb reads, in priority order.
enum class LayerKind { User, Site, Shipped };
const char* layer_name(LayerKind kind);  // "user", "site", "shipped"

// User database over site databases over the shipped databases (the package's own, read-only).
class LayeredDb {
 public:
  struct Options {
    // nullopt: default_user_path(); an empty path: no user database (read-only use).
    std::optional<std::filesystem::path> user_path;
    // nullopt: default_site_paths(); highest priority first.
    std::optional<std::vector<std::filesystem::path>> site_paths;
    // nullopt: default_shipped_paths(); the lowest layers, after every site database.
    std::optional<std::vector<std::filesystem::path>> shipped_paths;
    // Given: a site or shipped database none of whose results are of this environment's class and
    // build stamp (another GPU, another library version or kernel source) is skipped with one
    // logged line saying what it was tuned for, unless it holds results of this build for another
    // GPU of the same architecture (compute capability): then it answers with those, the class of
    // this GPU's SM count first, else the one with the most results (logged once at info).
    // Unknown (no GPU): every readable layer is kept.
    std::optional<EnvironmentInfo> environment;
    TuningDb::Options db;  // validator, policy, timeouts for every layer
  };

  // $DFGNN_CACHE_DIR/tuning.db, else $XDG_CACHE_HOME/dfgnn/tuning.db, else
  // $HOME/.cache/dfgnn/tuning.db; empty if none of these variables is set.
  static std::filesystem::path default_user_path();
  // $DFGNN_SITE_DB split at ':' (empty entries ignored); empty if unset.
  static std::vector<std::filesystem::path> default_site_paths();
  // The shipped databases. $DFGNN_SHIPPED_DB set: "off" (or "none", "0", "") for none, else
  // ':'-separated files or directories (a directory stands for its *.db files, by name). Unset:
  // the *.db files of shipped_directory(), by name.
  static std::vector<std::filesystem::path> default_shipped_paths();
  // Where the installed package keeps its shipped databases: the first existing directory of
  // shipped_directory_candidates(the file holding this code: libdfgnn.so, or a tool linked
  // statically), or empty.
  static std::filesystem::path shipped_directory();
  // Relative to the directory D of code_file: D/data/tuning (the Python package, where libdfgnn
  // sits in site-packages/dfgnn/), D/../data/tuning (its tools in dfgnn/bin/), then the CMake
  // install's <prefix>/share/dfgnn/tuning as seen from the library directory and from the bin
  // directory (relative paths from GNUInstallDirs, compiled in).
  static std::vector<std::filesystem::path> shipped_directory_candidates(const std::filesystem::path& code_file);

  // Opens every layer; never throws for a layer that cannot be opened: it is left out, logged
  // (warn; a shipped database once per process) and its error recorded in open_errors().
  explicit LayeredDb(Options options);
  LayeredDb() : LayeredDb(Options()) {}

  // The user database, for writing: created (with its directories) here if it does not exist yet.
  // Null when there is none or it cannot be used (the reason is what a write throws). Reads do not
  // create it: a process that only reads (shipped answers and modules) leaves no file behind, and
  // its first call skips the file's creation (about 3 ms on an H100 host).
  TuningDb* user() { return user_layer(true); }
  const std::vector<std::unique_ptr<TuningDb>>& sites() const { return sites_; }
  const std::vector<std::unique_ptr<TuningDb>>& shipped() const { return shipped_; }
  const std::vector<std::string>& open_errors() const { return open_errors_; }
  // The winner policy of Options::db: also the band by which a reader ties a row's candidates.
  const WinnerPolicy& policy() const { return policy_; }

  // Every layer that was asked for, in priority order, and whether it is read, as judged at
  // construction: a user database whose file does not exist yet is listed as used (it is read once
  // it exists, and created by the first write, whose error says why if it cannot be).
  struct LayerInfo {
    LayerKind kind = LayerKind::Site;
    std::filesystem::path path;
    bool used = false;
    std::string reason;  // why not used: open error, tuned for another GPU or build
    // Used for another GPU of this architecture: the class its results were tuned on (an H100
    // reads a file tuned on the H200), else empty.
    std::string tuned_on;
  };
  const std::vector<LayerInfo>& layers() const { return layers_; }

  // Reads: the user database first, then the sites in order, then the shipped databases; the
  // first valid answer wins. A layer that fails is logged and skipped; a read-only layer that fails
  // is dropped for the rest of this object's life (logged once). A layer whose pages are damaged
  // (SQLite's "database disk image is malformed", user layer included) is dropped for the rest of
  // the process: logged once, and skipped by every LayeredDb that opens the same file (same inode,
  // size and time) later. Rows come with `layer` set. Never throw.
  std::optional<TuningResult> find_exact(const EnvironmentInfo& current, const OpKey& op,
                                         const std::string& fingerprint_hash);
  // Union over layers; for a fingerprint present in several layers the higher layer's row wins.
  std::vector<TuningResult> candidates_for(const EnvironmentInfo& current, const OpKey& op,
                                           const std::optional<std::string>& bucket_key = std::nullopt);
  std::optional<ModuleRecord> get_module(const std::string& key, const std::string& template_hash = {},
                                         int32_t nvrtc_version = 0, int32_t arch = 0);
  // Pooled candidate statistics of a row read through this object (from its source layer); empty
  // when the layer is gone or fails (logged).
  std::vector<CandidateStat> pooled_candidates(const TuningResult& row);

  // Writes go to the user database; DATABASE_ERROR if there is none (the message says why).
  std::optional<TuningResult> put_result(const TuningRun& run);
  void put_module(const ModuleRecord& module);

 private:
  // Calls f(db, kind) for each readable layer in priority order until it returns true; with
  // `results`, read-only layers that hold no results (a shipped modules file) are passed over.
  template <typename F>
  void each_layer(const char* what, bool results, F&& f);
  void open_read_only_layer(const std::filesystem::path& path, LayerKind kind,
                            const std::optional<EnvironmentInfo>& environment, const TuningDb::Options& db);

  // The user layer, opened at construction when its file exists, else at the first write (or the
  // first read after another process created it): with create, or once the file exists.
  TuningDb* user_layer(bool create);
  TuningDb& writable_user();  // user_layer(true), else DATABASE_ERROR saying why there is none
  std::filesystem::path user_path_;  // empty: no user database
  TuningDb::Options user_options_;
  std::mutex user_mutex_;                  // guards the opening and the three below
  std::unique_ptr<TuningDb> user_owned_;
  std::string user_identity_;              // its file identity (see identity_), set before user_ is
  bool user_unusable_ = false;             // an open failed: no second try in this object
  std::string user_open_error_;            // that failure's message
  std::atomic<TuningDb*> user_{nullptr};   // published last: readers then see user_identity_
  std::vector<std::unique_ptr<TuningDb>> sites_;
  std::vector<std::unique_ptr<TuningDb>> shipped_;
  std::vector<LayerInfo> layers_;
  std::vector<std::string> open_errors_;
  WinnerPolicy policy_;
  std::string no_user_reason_;  // guarded by user_mutex_
  std::mutex failed_mutex_;
  std::vector<const TuningDb*> failed_;  // read-only layers dropped after a failing read, damaged ones
  // Each opened layer's file identity (device, inode, size, time), by which a damaged file is
  // skipped by every LayeredDb of the process.
  std::map<const TuningDb*, std::string> identity_;
  // A read-only layer with no results of this GPU's class, read for another GPU of its architecture:
  // the environment its lookups are made as.
  std::map<const TuningDb*, EnvironmentInfo> stand_in_;
  // Read-only layers without results (immutable files: they never gain any).
  std::set<const TuningDb*> results_free_;
  // What read-only layers answered, kept for the process: candidate rows per (layer, GPU class, op
  // key, bucket) and pooled statistics per (layer, row id). A first dispatch reads every row of its
  // op key and the statistics of each neighbour (about 2 ms of a fresh process's first call on an
  // H100); later graphs and passes of the same op key compare fingerprints in memory. The user
  // layer, which other processes write, is read afresh every time.
  // The layer, its GPU class, the op key's fields and the bucket ("" for none).
  using RowsKey = std::tuple<const TuningDb*, std::string, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t,
                             std::string>;
  std::mutex memo_mutex_;
  std::map<RowsKey, std::vector<TuningResult>> rows_memo_;
  std::map<std::pair<const TuningDb*, int64_t>, std::vector<CandidateStat>> pooled_memo_;
  // memo[key], read() the first time (outside the lock: layers are read in parallel).
  template <typename Map, typename Read>
  typename Map::mapped_type read_once(Map& memo, const typename Map::key_type& key, Read&& read);
  const EnvironmentInfo& as_seen_by(const TuningDb& db, const EnvironmentInfo& current) const;
};

}  // namespace dfgnn::db
