// The tuning database's schema (db/src/schema.*, opened by tuning_db.cpp): the advertised version,
// newer, negative, empty and foreign files, and the migrations between versions.
#include "db_test_util.hpp"

namespace {

using namespace dfgnn::test::db_test;

void add_note_column(dfgnn::db::detail::Connection& c) {
  c.exec("ALTER TABLE results ADD COLUMN note TEXT DEFAULT 'migrated'; CREATE TABLE extra (x INTEGER)");
}
void failing_step(dfgnn::db::detail::Connection& c) {
  c.exec("ALTER TABLE results ADD COLUMN doomed TEXT");
  throw dfgnn::db::DbError(dfgnn::db::ErrorKind::Other, "step failed on purpose");
}

TEST(TuningDbSchema, BuiltInStepsReachTheAdvertisedVersion) {
  EXPECT_EQ(dfgnn::db::detail::target_version(dfgnn::db::detail::builtin_migrations()), dfgnn::db::kSchemaVersion);
}

TEST(TuningDbSchema, BuiltinSchemaHashIsTheMigrations) {
  const uint64_t h = dfgnn::db::detail::expected_schema_hash(dfgnn::db::detail::builtin_migrations());
  EXPECT_EQ(h, dfgnn::db::detail::kBuiltinSchemaHash)
      << fmt::format("a migration changed: set kBuiltinSchemaHash (db/src/schema.hpp) to 0x{:016x}ULL", h);
}

TEST(TuningDbSchema, ObjectAddedToCurrentSchemaIsStillReportedAndLeftUntouched) {
  // The hash answers only for an exact match: anything else is compared object by object.
  TempDir dir;
  const fs::path p = dir / "t.db";
  { TuningDb::open_user(p)->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1)})); }
  raw_exec(p, "CREATE INDEX extra_idx ON results (heads)");
  const std::string bytes = read_bytes(p);
  const auto e = expect_error([&] { TuningDb::open_user(p); });
  EXPECT_TRUE(contains(e.what(), "unknown index \"extra_idx\"")) << e.what();
  EXPECT_EQ(read_bytes(p), bytes);
  raw_exec(p, "DROP INDEX extra_idx");
  EXPECT_NO_THROW(TuningDb::open_user(p));
}

TEST(TuningDbSchema, NewerVersionIsRefusedAndLeftUntouched) {
  TempDir dir;
  const fs::path p = dir / "t.db";
  { TuningDb::open_user(p)->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1)})); }
  raw_exec(p, "PRAGMA user_version = 7");
  const std::string bytes = read_bytes(p);
  const auto e = expect_error([&] { TuningDb::open_user(p); });
  EXPECT_EQ(dfgnn::db_status(e), DFGNN_STATUS_DATABASE_ERROR);
  EXPECT_TRUE(contains(e.what(), fmt::format("schema version 7 is newer than this dfgnn supports ({})",
                                            dfgnn::db::kSchemaVersion)))
      << e.what();
  EXPECT_TRUE(contains(e.what(), p.string())) << e.what();
  EXPECT_TRUE(contains(expect_error([&] { TuningDb::open_site(p); }).what(), "newer than this dfgnn supports"));
  EXPECT_EQ(read_bytes(p), bytes);
}

// Found by fuzz_db_open: the journal switch to WAL used to come before checks that then refused the
// file, and a version-0 file was judged by its tables alone.
TEST(TuningDbSchema, NegativeVersionOrViewWithoutVersionIsRefusedAndLeftUntouched) {
  TempDir dir;
  const fs::path negative = dir / "negative.db";
  { TuningDb::open_user(negative)->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1)})); }
  raw_exec(negative, "PRAGMA journal_mode = DELETE; PRAGMA user_version = -5");
  const std::string negative_bytes = read_bytes(negative);
  const auto e = expect_error([&] { TuningDb::open_user(negative); });
  EXPECT_EQ(dfgnn::db_status(e), DFGNN_STATUS_DATABASE_ERROR);
  EXPECT_TRUE(contains(e.what(), "schema version -5")) << e.what();
  EXPECT_TRUE(contains(expect_error([&] { TuningDb::open_site(negative); }).what(), "schema version -5"));
  EXPECT_EQ(read_bytes(negative), negative_bytes);

  // A view is no table, but the file is not an empty one either.
  const fs::path view = dir / "view.db";
  raw_exec(view, "CREATE VIEW answers AS SELECT 42 AS answer");
  const std::string view_bytes = read_bytes(view);
  EXPECT_TRUE(contains(expect_error([&] { TuningDb::open_user(view); }).what(), "other schema objects"));
  EXPECT_EQ(read_bytes(view), view_bytes);
}

TEST(TuningDbSchema, EmptyFileIsInitialisedForeignFileRefused) {
  TempDir dir;
  write_bytes(dir / "empty.db", "");
  auto db = TuningDb::open_user(dir / "empty.db");
  EXPECT_EQ(db->schema_version(), dfgnn::db::kSchemaVersion);
  EXPECT_EQ(raw_int(dir / "empty.db", "PRAGMA application_id"), dfgnn::db::detail::kApplicationId);
  // Another application's SQLite file: not ours, refused, untouched.
  raw_exec(dir / "foreign.db", "CREATE TABLE customers (name TEXT); INSERT INTO customers VALUES ('x')");
  const std::string bytes = read_bytes(dir / "foreign.db");
  EXPECT_TRUE(contains(expect_error([&] { TuningDb::open_user(dir / "foreign.db"); }).what(), "not a dfgnn"));
  EXPECT_EQ(read_bytes(dir / "foreign.db"), bytes);
  raw_exec(dir / "app.db", "PRAGMA application_id = 1234");
  EXPECT_TRUE(contains(expect_error([&] { TuningDb::open_user(dir / "app.db"); }).what(), "application id"));
  // A site database must exist and hold a schema.
  EXPECT_TRUE(contains(expect_error([&] { TuningDb::open_site(dir / "missing.db"); }).what(), "does not exist"));
}

TEST(TuningDbSchema, OlderVersionIsMigrated) {
  using dfgnn::db::detail::Migration;
  TempDir dir;
  const fs::path p = dir / "t.db";
  {
    auto v1 = TuningDb::open_user(p);
    v1->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1), cand(sched(16), 0.5)}));
    v1->export_to(dir / "site-v1.db");
  }
  // A future build with one more step (now -> next): the user file is migrated in place.
  constexpr int now = dfgnn::db::kSchemaVersion, next = now + 1;
  std::vector<Migration> v2_steps = dfgnn::db::detail::builtin_migrations();
  v2_steps.push_back(Migration{now, "test: add results.note", &add_note_column});
  TuningDb::Options o2;
  o2.migrations = &v2_steps;
  {
    auto v2 = TuningDb::open_user(p, o2);
    EXPECT_EQ(v2->schema_version(), next);
    auto hit = v2->find_exact(h200(), op_gat(), fp_hash(1));
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->schedule, sched(16));
    v2->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 1)}));
    EXPECT_TRUE(v2->verify().empty());
  }
  EXPECT_EQ(raw_int(p, "PRAGMA user_version"), next);
  EXPECT_EQ(raw_int(p, "SELECT count(*) FROM results WHERE note = 'migrated'"), 2);
  // This build now refuses the file.
  EXPECT_TRUE(contains(expect_error([&] { TuningDb::open_user(p); }).what(),
                       fmt::format("schema version {} is newer than this dfgnn supports ({})", next, now)));
  // A read-only older site file is migrated in memory; the file is not touched.
  const std::string site_bytes = read_bytes(dir / "site-v1.db");
  {
    auto site = TuningDb::open_site(dir / "site-v1.db", o2);
    EXPECT_EQ(site->schema_version(), next);
    EXPECT_TRUE(site->find_exact(h200(), op_gat(), fp_hash(1)));
  }
  EXPECT_EQ(read_bytes(dir / "site-v1.db"), site_bytes);
  // A failing step rolls the whole migration back.
  std::vector<Migration> broken = dfgnn::db::detail::builtin_migrations();
  broken.push_back(Migration{now, "test: broken", &failing_step});
  TuningDb::Options ob;
  ob.migrations = &broken;
  fs::copy_file(dir / "site-v1.db", dir / "v1.db");
  const auto e = expect_error([&] { TuningDb::open_user(dir / "v1.db", ob); });
  EXPECT_TRUE(contains(e.what(), fmt::format("migration \"test: broken\" (version {} -> {}) failed", now, next)))
      << e.what();
  EXPECT_EQ(raw_int(dir / "v1.db", "PRAGMA user_version"), now);
  EXPECT_EQ(raw_int(dir / "v1.db", "SELECT count(*) FROM pragma_table_info('results') WHERE name = 'doomed'"), 0);
  EXPECT_TRUE(TuningDb::open_user(dir / "v1.db")->find_exact(h200(), op_gat(), fp_hash(1)));
}

// Schema 1 named OpKey::key_bits's column `variant`: a version-1 file (user or site) is migrated to the
// column's new name with its rows, and answers as before.
TEST(TuningDbSchema, Version1VariantColumnBecomesKeyBits) {
  using dfgnn::db::detail::Migration;
  TempDir dir;
  const fs::path p = dir / "v1.db";
  OpKey op = op_gat();
  op.key_bits = 20;
  {
    auto db = TuningDb::open_user(p);
    db->put_result(make_run(h200(), op, 1, {cand(sched(32), 1), cand(sched(16), 0.5)}));
  }
  // Undo step 1 -> 2 by hand, and check the result is exactly what schema 1 creates.
  raw_exec(p, "ALTER TABLE results RENAME COLUMN key_bits TO variant; PRAGMA user_version = 1");
  const std::vector<Migration> v1_steps = {dfgnn::db::detail::builtin_migrations().front()};
  TuningDb::Options o1;
  o1.migrations = &v1_steps;
  TuningDb::open_user(dir / "fresh-v1.db", o1);
  const std::string objects = "SELECT group_concat(type || name || sql, ';') FROM "
                              "(SELECT * FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name)";
  ASSERT_EQ(raw_text(p, objects), raw_text(dir / "fresh-v1.db", objects));
  ASSERT_EQ(raw_int(p, "SELECT count(*) FROM results WHERE variant = 20"), 1);
  fs::copy_file(p, dir / "site-v1.db");
  const std::string site_bytes = read_bytes(dir / "site-v1.db");

  {
    auto db = TuningDb::open_user(p);
    EXPECT_EQ(db->schema_version(), 2);
    const auto hit = db->find_exact(h200(), op, fp_hash(1));
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->op, op);
    EXPECT_EQ(hit->schedule, sched(16));
    EXPECT_FALSE(db->find_exact(h200(), op_gat(), fp_hash(1)));  // other key bits: another problem
    EXPECT_TRUE(db->verify().empty());  // also: the migrated schema matches a new file's
  }
  EXPECT_EQ(raw_int(p, "PRAGMA user_version"), 2);
  EXPECT_EQ(raw_int(p, "SELECT count(*) FROM pragma_table_info('results') WHERE name = 'variant'"), 0);
  EXPECT_EQ(raw_int(p, "SELECT count(*) FROM results WHERE key_bits = 20"), 1);
  {
    auto site = TuningDb::open_site(dir / "site-v1.db");  // migrated in memory, the file untouched
    EXPECT_EQ(site->schema_version(), 2);
    const auto hit = site->find_exact(h200(), op, fp_hash(1));
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->schedule, sched(16));
  }
  EXPECT_EQ(read_bytes(dir / "site-v1.db"), site_bytes);
}

}  // namespace
