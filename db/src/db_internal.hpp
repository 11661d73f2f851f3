// What the tuning database's source files share. Internal to db/.
//   tuning_db.cpp    keys and ids, file checks, open and migrate
//   results.cpp      row checks, row decoding, pooling and the winner, upserts, put_result and the reads
//   modules.cpp      compiled module records
//   maintenance.cpp  merge, export, prune, verify, list, stats
//
// Rows are decoded by column name (Query, RowReader): a query selects a table's columns with
// select_list() or a *_columns() function below, naming each "table.column", and the decoder of
// that table reads those names, whatever else the query selects and in whatever order.
#pragma once

#include "schema.hpp"
#include "sqlite_util.hpp"
#include "tuning_db.hpp"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace dfgnn::db {

struct TuningDb::Impl {
  // Throws DbError when db was opened read-only (writes go to the user database).
  static void require_writable(const TuningDb& db);
};

namespace detail {

// ------------------------------------------------------------------ tuning_db.cpp

int64_t now_unix();
std::string host_name();
// 128 random bits as 32 hex digits (random_device mixed with time and pid, so forked children differ).
std::string new_run_id();

sqlite3* open_handle(const std::string& name, int flags, const std::string& display);
const std::vector<Migration>& steps_of(const TuningDb::Options& options);
// Refuses (kind Schema) a file whose schema objects differ from dfgnn's: an injected trigger would
// run on our writes, and a snapshot would carry it on. `doing` says what was refused.
void require_expected_schema(Connection& conn, const std::vector<Migration>& steps, const char* doing);

// ------------------------------------------------------------------ results.cpp: checks
// Each returns "" or the problem.

// Text given to be stored that is unfit (see unprintable()), naming the field.
std::string check_text(const char* field, const std::string& text);
std::string op_text(const OpKey& op);
// A stored fingerprint as far as the database can judge it: a text that hashes to the stored hash.
// What the text says is the validator's to judge.
std::string check_fingerprint(const std::string& text, const std::string& hash);
// One candidate's statistics of one run: what put_result accepts, merge imports, pooling uses and
// verify expects of every candidate row.
std::string check_candidate(const CandidateStat& c);
std::string check_environment(const EnvironmentInfo& e);
// The validator's verdict; an exception it throws is a verdict too.
std::string call_validator(const RowValidator& validator, const TuningResult& r);

// ------------------------------------------------------------------ results.cpp: decoding

// Select lists and their decoders. Each *_columns(alias) selects what the decoder beside it reads.
std::string environment_columns(const char* alias);  // environments.id, env_class and EnvironmentInfo's fields
EnvironmentInfo read_environment(RowReader& in);     // environments.gpu_name ... template_hash
std::string candidate_columns(const char* alias);    // candidate_stats.schedule ... median_ms
CandidateStat read_candidate(RowReader& in);
OpKey read_op_key(RowReader& in);  // results.model, dtype, heads, dim, direction, key_bits

// "SELECT <every column of a result row, its fingerprint and environment> FROM results r LEFT JOIN
// fingerprints f ... LEFT JOIN environments e ... " (LEFT JOINs so broken references can be
// reported); the caller appends WHERE / ORDER BY and keeps the text in a function-local static
// (statements are cached by the address of their text).
const std::string& result_select();
// Decodes the current row of a result_select() query and checks it; returns "" or the reason it
// must not be used. Dispatch (find_exact, candidates_for) and verify both judge a result row here,
// so no row that verify rejects is ever used.
std::string decode_result(const Query& q, const std::string& source, const RowValidator& validator,
                          TuningResult& r);
// "[class | op | fingerprint | template | library]" for messages.
std::string describe(const TuningResult& r);
ScheduleStats to_stats(const CandidateStat& c);

// ------------------------------------------------------------------ results.cpp: pooling and the winner

struct RunInfo {
  std::string uuid;
  int64_t unix_time = 0;
  std::string host, tool_version, default_schedule;
  int64_t environment_id = 0;
};

// A problem's result as derived from its runs (see WinnerPolicy).
struct Winner {
  bool has_runs = false;
  RunInfo latest;  // the most recent run (by time, then run id)
  int64_t runs = 0;
  std::optional<CandidateStat> winner, runner_up;
  double default_median_ms = std::numeric_limits<double>::quiet_NaN();  // NaN: the default was not measured
};

// The problem key of a result row as a TuningResult (for the validator), or "" + reason.
std::string result_key_view(Connection& conn, int64_t result_id, TuningResult& view);
Winner compute_winner(Connection& conn, int64_t result_id, const RowValidator& validator, const WinnerPolicy& policy);
// Writes the derived columns of a result from its runs; deletes it when it has none. Returns false
// if it was deleted.
bool store_winner(Connection& conn, int64_t result_id, const Winner& w);

// ------------------------------------------------------------------ results.cpp: upserts (row ids)

int64_t upsert_environment(Connection& conn, const EnvironmentInfo& e);
// Throws when the hash is stored with a different text (a collision or a tampered row).
int64_t upsert_fingerprint(Connection& conn, const std::string& hash, const std::string& bucket,
                           const std::string& text);
struct ProblemKey {
  std::string env_class, template_hash, library_version;
  OpKey op;
  int64_t fingerprint_id = 0;
};
int64_t upsert_result(Connection& conn, const ProblemKey& k);
// Inserts a run unless its id is present. Returns the new run row id, or 0 if it was present (for
// the same problem; a run id reused for another problem is an InvalidArgument error).
int64_t insert_run(Connection& conn, int64_t result_id, int64_t environment_id, const RunInfo& run);
void insert_candidate(Connection& conn, int64_t run_id, const CandidateStat& c);

// ------------------------------------------------------------------ modules.cpp

// "SELECT <every column of modules> FROM modules m " (append WHERE / ORDER BY, as for result_select).
const std::string& module_select();
// Decodes and checks the current row of a module_select() query: "" or the problem.
std::string decode_module(const Query& q, ModuleRecord& m);
// Inserts m unless its key is present; adds the rows inserted (0 or 1) to `added`.
void insert_module(Connection& conn, const ModuleRecord& m, int64_t& added);

}  // namespace detail
}  // namespace dfgnn::db
