// A mutated database file, opened the ways dfgnn opens one: read-only immutable (a site
// database, as dispatch and `dfgnn-db verify --site` do) and writable (a user database), then
// verified, listed and queried with the runtime's own row check (row_problem).
// Properties: every failure is a database error (db::DbError, or a dfgnn::Error from the runtime's
// row check) with DATABASE_ERROR (or INVALID_ARGUMENT) and a message, never another exception or a crash; a read-only open never changes the file; a
// writable open that fails leaves the file unchanged; a database that verify() calls healthy
// lists no row as invalid, and a result it returns from find_exact passes row_problem.
#include "fuzz_util.hpp"

#include "db_error.hpp"
#include "dispatch.hpp"
#include "error.hpp"
#include "tuning_db.hpp"

#include <filesystem>
#include <stdlib.h>

namespace db = dfgnn::db;

namespace {

void remove_all(const std::string& path) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(path + suffix, ec);
}

// Runs f; a db::DbError or dfgnn::Error must be a database error with a message, anything else is a defect.
template <typename F>
bool survives(F&& f) {
  try {
    f();
    return true;
  } catch (const db::DbError& e) {
    FUZZ_CHECK(e.what()[0] != '\0', "empty message");  // its type makes it a database error (db_status)
    return false;
  } catch (const dfgnn::Error& e) {
    FUZZ_CHECK(e.status() == DFGNN_STATUS_DATABASE_ERROR || e.status() == DFGNN_STATUS_INVALID_ARGUMENT, e.what());
    FUZZ_CHECK(e.what()[0] != '\0', "empty message");
    return false;
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, std::string("not a database error: ") + e.what());
  }
}

void exercise(db::TuningDb& d) {
  std::vector<std::string> problems;
  if (!survives([&] { problems = d.verify(); })) return;
  std::vector<db::ListedResult> rows;
  if (!survives([&] { rows = d.list(); })) return;
  if (problems.empty())
    for (const auto& row : rows) FUZZ_CHECK(row.problem.empty(), "verify passed but list rejects: " + row.problem);
  survives([&] { d.stats(); });
  for (const auto& row : rows) {
    if (!row.problem.empty()) continue;
    std::optional<db::TuningResult> found;
    db::EnvironmentInfo env = row.result.environment;
    env.template_hash = row.result.template_hash;
    env.library_version = row.result.library_version;
    if (!survives([&] { found = d.find_exact(env, row.result.op, row.result.fingerprint_hash); })) continue;
    if (found) FUZZ_CHECK(dfgnn::row_problem(*found).empty(), "find_exact returned an invalid row");
    survives([&] { d.candidates_for(env, row.result.op); });
    survives([&] { d.pooled_candidates(row.result.id); });
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("DFGNN_LOG_LEVEL", "off", 0);  // invalid rows are logged: keep the fuzzer's output readable
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::temp_path(".db");
  remove_all(path);
  fuzz::write_file(path, data, size);
  const std::vector<char> original(data, data + size);
  db::TuningDb::Options options;
  options.validator = dfgnn::row_problem;
  options.busy_timeout_ms = 0;
  options.write_attempts = 1;

  {
    std::unique_ptr<db::TuningDb> site;
    if (survives([&] { site = db::TuningDb::open_site(path, options); })) exercise(*site);
  }
  FUZZ_CHECK(fuzz::read_file(path) == original, "a read-only open changed the file");

  std::unique_ptr<db::TuningDb> user;
  if (survives([&] { user = db::TuningDb::open_user(path, options); })) {
    exercise(*user);
  } else {
    FUZZ_CHECK(fuzz::read_file(path) == original, "a failed writable open changed the file");
  }
  user.reset();
  remove_all(path);
  return 0;
}
