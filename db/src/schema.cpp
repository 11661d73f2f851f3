#include "schema.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <map>
#include <mutex>
#include <tuple>

namespace dfgnn::db::detail {

namespace {

// Schema version 1 (version 2 renames one column: see below). Problem key columns of `results` mirror TuningResult; the winner columns are
// derived from the runs (recomputed on every write), so they may be NULL (no eligible candidate).
void create_v1(Connection& conn) {
  conn.exec(R"sql(
CREATE TABLE environments (
  id INTEGER PRIMARY KEY,
  env_class TEXT NOT NULL,
  gpu_name TEXT NOT NULL,
  compute_capability INTEGER NOT NULL,
  sm_count INTEGER NOT NULL,
  driver_version INTEGER NOT NULL,
  nvrtc_version INTEGER NOT NULL,
  library_version TEXT NOT NULL,
  template_hash TEXT NOT NULL,
  UNIQUE (gpu_name, compute_capability, sm_count, driver_version, nvrtc_version, library_version, template_hash)
);
CREATE TABLE fingerprints (
  id INTEGER PRIMARY KEY,
  hash TEXT NOT NULL UNIQUE,
  bucket_key TEXT NOT NULL,
  text TEXT NOT NULL
);
CREATE TABLE results (
  id INTEGER PRIMARY KEY,
  env_class TEXT NOT NULL,
  template_hash TEXT NOT NULL,
  library_version TEXT NOT NULL,
  model INTEGER NOT NULL,
  dtype INTEGER NOT NULL,
  heads INTEGER NOT NULL,
  dim INTEGER NOT NULL,
  direction INTEGER NOT NULL,
  variant INTEGER NOT NULL,
  fingerprint_id INTEGER NOT NULL REFERENCES fingerprints(id),
  solver_id INTEGER,
  schedule TEXT,
  count INTEGER,
  median_ms REAL,
  mean_ms REAL,
  variance REAL,
  min_ms REAL,
  default_schedule TEXT,
  default_median_ms REAL,
  runner_up_schedule TEXT,
  runner_up_median_ms REAL,
  runs INTEGER NOT NULL DEFAULT 0,
  host TEXT NOT NULL DEFAULT '',
  unix_time INTEGER NOT NULL DEFAULT 0,
  tool_version TEXT NOT NULL DEFAULT '',
  environment_id INTEGER REFERENCES environments(id),
  UNIQUE (env_class, model, dtype, heads, dim, direction, variant, fingerprint_id, template_hash, library_version)
);
CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  uuid TEXT NOT NULL UNIQUE,
  result_id INTEGER NOT NULL REFERENCES results(id) ON DELETE CASCADE,
  environment_id INTEGER NOT NULL REFERENCES environments(id),
  default_schedule TEXT NOT NULL,
  host TEXT NOT NULL,
  unix_time INTEGER NOT NULL,
  tool_version TEXT NOT NULL
);
CREATE INDEX runs_by_result ON runs(result_id);
CREATE TABLE candidate_stats (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  schedule TEXT NOT NULL,
  solver_id INTEGER NOT NULL,
  count INTEGER NOT NULL,
  mean_ms REAL NOT NULL,
  m2 REAL NOT NULL,
  min_ms REAL NOT NULL,
  median_ms REAL NOT NULL,
  PRIMARY KEY (run_id, schedule)
) WITHOUT ROWID;
CREATE TABLE modules (
  key TEXT PRIMARY KEY,
  image BLOB NOT NULL,
  lowered_names TEXT NOT NULL,
  arch INTEGER NOT NULL,
  nvrtc_version INTEGER NOT NULL,
  template_hash TEXT NOT NULL,
  created INTEGER NOT NULL
);
)sql");
}

// Version 2: results.variant is named for what it holds, the caller's packed key bits (OpKey::key_bits).
// SQLite rewrites the table's definition (and its UNIQUE constraint) in place; rows are untouched.
void rename_variant_to_key_bits(Connection& conn) { conn.exec("ALTER TABLE results RENAME COLUMN variant TO key_bits"); }

const char* const kTables[] = {"environments", "fingerprints", "results", "runs", "candidate_stats", "modules"};

}  // namespace

const std::vector<Migration>& builtin_migrations() {
  static const std::vector<Migration> steps = {
      {0, "create schema v1", &create_v1},
      {1, "v2: results.variant renamed key_bits", &rename_variant_to_key_bits},
  };
  return steps;
}

int target_version(const std::vector<Migration>& steps) { return steps.empty() ? 0 : steps.back().from + 1; }

int read_user_version(Connection& conn) {
  Query q(conn, "PRAGMA user_version");
  return q.step() ? static_cast<int>(q.i64("user_version")) : 0;
}

int read_application_id(Connection& conn) {
  Query q(conn, "PRAGMA application_id");
  return q.step() ? static_cast<int>(q.i64("application_id")) : 0;
}

std::string joined(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

int64_t count_schema_objects(Connection& conn) {
  Query q(conn, "SELECT count(*) AS n FROM sqlite_master");
  return q.step() ? q.i64("n") : 0;
}

void check_version(Connection& conn, int version, int supported) {
  const int app = read_application_id(conn);
  if (app != 0 && app != kApplicationId)
    throw_db(conn.path(), fmt::format("not a dfgnn tuning database (SQLite application id {:#x})", app),
             ErrorKind::Foreign);
  if (version > supported)
    throw_db(conn.path(), fmt::format("schema version {} is newer than this dfgnn supports ({})", version, supported),
             ErrorKind::NewerSchema);
  if (version < 0)
    throw_db(conn.path(), fmt::format("not a dfgnn tuning database (schema version {}; dfgnn's count up from 1)", version),
             ErrorKind::Foreign);
  // Not only tables: a view alone would survive the migration and fail the schema check after it.
  if (version == 0 && count_schema_objects(conn) > 0)
    throw_db(conn.path(), "not a dfgnn tuning database (it has tables or other schema objects but no dfgnn schema version)",
             ErrorKind::Foreign);
}

namespace {

// Applies the steps from `version` on and returns the version reached; the caller owns the transaction.
int apply_steps(Connection& conn, const std::vector<Migration>& steps, int version) {
  int reached = version;
  for (const Migration& step : steps) {
    if (step.from < version) continue;
    if (step.from != reached) throw_db(conn.path(), fmt::format("no migration from schema version {}", reached));
    try {
      step.apply(conn);
    } catch (const std::exception& e) {
      const auto* db_error = dynamic_cast<const DbError*>(&e);
      throw DbError(db_error != nullptr ? db_error->kind() : ErrorKind::Other,
                    fmt::format("tuning database {}: migration \"{}\" (version {} -> {}) failed: {}", conn.path(),
                                step.description, step.from, step.from + 1, e.what()),
                    db_error != nullptr ? db_error->sqlite_code() : 0);
    }
    reached = step.from + 1;
  }
  return reached;
}

}  // namespace

int migrate(Connection& conn, const std::vector<Migration>& steps, int write_attempts) {
  const int target = target_version(steps);
  int reached = 0;
  write_transaction(conn, write_attempts, [&] {
    const int version = read_user_version(conn);
    check_version(conn, version, target);
    reached = apply_steps(conn, steps, version);
    // Judged before the commit (also when another process migrated first), so a migration that does
    // not end in dfgnn's schema writes nothing.
    const std::vector<std::string> diffs = schema_differences(conn, steps);
    if (!diffs.empty())
      throw_db(conn.path(),
               fmt::format("the migrated schema differs from dfgnn's ({}); nothing was written", joined(diffs)),
               ErrorKind::Schema);
    if (reached != version) {
      // PRAGMA takes no bound parameters; the values are integers formatted here.
      conn.exec(fmt::format("PRAGMA user_version = {}", reached).c_str());
      conn.exec(fmt::format("PRAGMA application_id = {}", kApplicationId).c_str());
    }
  });
  return reached;
}

void check_tables(Connection& conn) {
  for (const char* table : kTables) {
    Query q(conn, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1");
    q.bind(1, table);
    if (!q.step()) throw_db(conn.path(), fmt::format("table \"{}\" is missing (damaged or foreign file)", table));
  }
}

namespace {

// (type, name) -> (table, sql) of every object in sqlite_master.
using SchemaObjects = std::map<std::pair<std::string, std::string>, std::pair<std::string, std::string>>;

SchemaObjects read_objects(Connection& conn) {
  SchemaObjects out;
  // Values that are not text (a blob 'table' reads as the text "table") are marked with their storage
  // class, so they never match dfgnn's objects (SQLite itself and check_tables would not see them).
  Query q(conn,
          "SELECT type || CASE typeof(type) WHEN 'text' THEN '' ELSE ' (' || typeof(type) || ')' END AS kind, "
          "name || CASE typeof(name) WHEN 'text' THEN '' ELSE ' (' || typeof(name) || ')' END AS object, "
          "tbl_name AS on_table, sql AS definition FROM sqlite_master");
  while (q.step()) out[{q.text("kind"), q.text("object")}] = {q.text("on_table"), q.text("definition")};
  return out;
}

// The objects the steps create in an empty database (computed once per list of steps).
const SchemaObjects& expected_objects(const std::vector<Migration>& steps) {
  static std::mutex mutex;
  using Key = std::vector<std::tuple<int, std::string, void (*)(Connection&)>>;
  static std::map<Key, SchemaObjects> cache;
  Key key;
  for (const Migration& m : steps) key.emplace_back(m.from, m.description, m.apply);
  std::lock_guard lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  sqlite3* handle = nullptr;
  if (sqlite3_open_v2(":memory:", &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
    sqlite3_close_v2(handle);
    throw_db(":memory:", "cannot open an in-memory database to build the expected schema");
  }
  Connection mem(handle, "(expected schema)");
  apply_steps(mem, steps, 0);
  return cache.emplace(std::move(key), read_objects(mem)).first->second;
}

// XXH64 (the hash of the database's fingerprints and the kernel source) of every object's fields in
// the map's order, each field ended by a zero byte.
uint64_t hash_objects(const SchemaObjects& objects) {
  std::string text;
  for (const auto& [key, value] : objects)
    for (const std::string* field : {&key.first, &key.second, &value.first, &value.second}) {
      text += *field;
      text += '\0';
    }
  return XXH64(text.data(), text.size(), 0);
}

}  // namespace

uint64_t expected_schema_hash(const std::vector<Migration>& steps) { return hash_objects(expected_objects(steps)); }

std::vector<std::string> schema_differences(Connection& conn, const std::vector<Migration>& steps) {
  const SchemaObjects found = read_objects(conn);
  // A file of the built-in schema is recognised without building the expected schema in memory,
  // which costs milliseconds in every process that opens a user database.
  if (&steps == &builtin_migrations() && hash_objects(found) == kBuiltinSchemaHash) return {};
  const SchemaObjects& expected = expected_objects(steps);
  std::vector<std::string> out;
  for (const auto& [key, value] : found) {
    const auto& [type, name] = key;
    auto it = expected.find(key);
    if (it == expected.end())
      out.push_back(fmt::format("unknown {} \"{}\" on table \"{}\": dfgnn does not create it (injected or foreign)",
                                type, name, value.first));
    else if (it->second != value)
      out.push_back(fmt::format("{} \"{}\" differs from dfgnn's definition", type, name));
  }
  for (const auto& [key, value] : expected)
    if (found.count(key) == 0) out.push_back(fmt::format("{} \"{}\" is missing", key.first, key.second));
  return out;
}

}  // namespace dfgnn::db::detail
