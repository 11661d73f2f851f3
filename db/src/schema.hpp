// Schema of the tuning database and its migrations. Internal to db/.
//
// PRAGMA user_version holds the schema version, PRAGMA application_id marks the file as dfgnn's.
// A file is brought to the latest version by applying, in one write transaction, every step whose
// `from` is >= the file's version, in order. Adding schema v2 = appending one Migration{1, ...}
// to builtin_migrations() and raising kSchemaVersion.
#pragma once

#include "sqlite_util.hpp"

#include <string>
#include <vector>

namespace dfgnn::db::detail {

// "dfgn" as a 32-bit big-endian integer.
inline constexpr int32_t kApplicationId = 0x6466676E;

struct Migration {
  int from;                   // upgrades version `from` to `from + 1`
  const char* description;
  void (*apply)(Connection&);
};

// 0 -> 1 creates the tables (an empty file has version 0); 1 -> 2 renames results.variant key_bits.
const std::vector<Migration>& builtin_migrations();
// The version reached by applying all of steps to an empty file.
int target_version(const std::vector<Migration>& steps);

int read_user_version(Connection& conn);
int read_application_id(Connection& conn);
// The parts separated by "; " (a list of schema differences in one message).
std::string joined(const std::vector<std::string>& parts);
// Number of schema objects (tables, indexes, views, triggers) in the file: 0 for an empty or new file.
int64_t count_schema_objects(Connection& conn);

// Refuses a file that is not dfgnn's (foreign application id, a negative version, or schema objects
// without a version) or whose version is newer than `supported` ("schema version N is newer than
// this dfgnn supports (M)"). Throws DATABASE_ERROR naming the path.
void check_version(Connection& conn, int version, int supported);
// Applies the steps from the file's version to the last one in one BEGIN IMMEDIATE transaction
// (re-reading the version inside it, so concurrent openers migrate once), and checks the result
// against dfgnn's schema before the commit. Returns the version.
int migrate(Connection& conn, const std::vector<Migration>& steps, int write_attempts);
// Throws DATABASE_ERROR if a table of the current schema is missing.
void check_tables(Connection& conn);
// How the file's schema objects (tables, indexes, triggers, views) differ from those the steps
// create in an empty file, compared by type, name, table and SQL text: an unknown object (an
// injected trigger), a missing one or a changed definition. Empty when they match.
std::vector<std::string> schema_differences(Connection& conn, const std::vector<Migration>& steps);

// The hash of the objects the steps create in an empty database, and its value for
// builtin_migrations(), which schema_differences compares a file's objects with first.
// TuningDbSchema.BuiltinSchemaHashIsTheMigrations recomputes it: a changed migration changes it.
uint64_t expected_schema_hash(const std::vector<Migration>& steps);
inline constexpr uint64_t kBuiltinSchemaHash = 0x5cf7b581abd8fbe8ULL;

}  // namespace dfgnn::db::detail
