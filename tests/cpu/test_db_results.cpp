// The tuning database's results (db/src/results.cpp): environment classes, exact lookups, pooled
// candidate statistics and the winner, malformed runs, the nearest level's candidates, rows decoded
// by column name (and Query's by-name access, sqlite_util), the row validator, tampered and hostile
// rows.
#include "db_test_util.hpp"

namespace {

using namespace dfgnn::test::db_test;

TEST(TuningDbBasic, EnvironmentClassKeepsGpusApart) {
  EXPECT_EQ(dfgnn::db::environment_class(h200()), "NVIDIA H200|sm_90|132");
  EnvironmentInfo other = h200();
  other.driver_version = 13000;
  other.nvrtc_version = 13000;
  EXPECT_EQ(dfgnn::db::environment_class(other), dfgnn::db::environment_class(h200()));
  other.sm_count = 114;  // a cut-down part of the same name
  EXPECT_NE(dfgnn::db::environment_class(other), dfgnn::db::environment_class(h200()));
  EXPECT_NE(dfgnn::db::environment_class(a100()), dfgnn::db::environment_class(h200()));
}

TEST(TuningDbBasic, BuildResultsCountsOneClassAndBuildStamp) {
  TempDir dir;
  auto db = TuningDb::open_user(dir / "tuning.db");
  const std::string here = dfgnn::db::environment_class(h200());
  const auto holds = [&](const std::string& c, const std::string& version, const std::string& hash) {
    return db->build_results(c, version, hash, 1) > 0;
  };
  EXPECT_FALSE(holds(here, h200().library_version, h200().template_hash));  // empty
  ASSERT_TRUE(db->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1.00)}, "run-1", 1700000000)));
  EXPECT_TRUE(holds(here, h200().library_version, h200().template_hash));
  EXPECT_FALSE(holds(here, h200().library_version, "another-kernel-source"));
  EXPECT_FALSE(holds(here, "0.0.1", h200().template_hash));
  EXPECT_FALSE(holds(dfgnn::db::environment_class(a100()), h200().library_version, h200().template_hash));
  // counted up to the limit; an empty version or hash matches any
  ASSERT_TRUE(db->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 1.00)}, "run-2", 1700000001)));
  EXPECT_EQ(db->build_results(here, h200().library_version, h200().template_hash, -1), 2);
  EXPECT_EQ(db->build_results(here, h200().library_version, h200().template_hash, 1), 1);
  EXPECT_EQ(db->build_results(here, "", "", -1), 2);
  // build_stamps agrees (it lists what build_results finds)
  const auto stamps = db->build_stamps();
  ASSERT_EQ(stamps.size(), 1u);
  EXPECT_EQ(stamps[0].env_class, here);
  EXPECT_EQ(stamps[0].template_hash, h200().template_hash);
  EXPECT_EQ(stamps[0].results, 2);
}

TEST(TuningDbBasic, PutThenFindExact) {
  TempDir dir;
  auto db = TuningDb::open_user(dir / "sub/dir/tuning.db");  // creates directories
  ASSERT_EQ(db->schema_version(), dfgnn::db::kSchemaVersion);
  auto put = db->put_result(make_run(h200(), op_gat(), 1,
                                     {cand(sched(32), 1.00), cand(sched(16), 0.80), cand(sched(8), 0.90)}, "run-1",
                                     1700000000));
  ASSERT_TRUE(put.has_value());
  EXPECT_EQ(put->schedule, sched(16));
  EXPECT_EQ(put->solver_id, 1);
  EXPECT_EQ(put->stats.count, 10);
  EXPECT_DOUBLE_EQ(put->stats.mean_ms, 0.80);
  EXPECT_DOUBLE_EQ(put->stats.median_ms, 0.80 * 0.99);
  EXPECT_NEAR(put->stats.variance, 0.0001, 1e-12);
  EXPECT_EQ(put->default_schedule, sched(32));
  EXPECT_DOUBLE_EQ(put->default_median_ms, 0.99);
  EXPECT_EQ(put->runner_up_schedule, sched(8));
  EXPECT_DOUBLE_EQ(put->runner_up_median_ms, 0.90 * 0.99);
  EXPECT_EQ(put->host, "host-test");
  EXPECT_EQ(put->unix_time, 1700000000);
  EXPECT_EQ(put->tool_version, "dfgnn-test");
  EXPECT_EQ(put->environment, h200());
  EXPECT_EQ(put->runs, 1);
  EXPECT_EQ(put->env_class, "NVIDIA H200|sm_90|132");
  EXPECT_EQ(put->fingerprint_hash, fp_hash(1));
  EXPECT_EQ(put->bucket_key, make_fp(1).bucket_key);
  EXPECT_EQ(put->source, (dir / "sub/dir/tuning.db").string());

  auto hit = db->find_exact(h200(), op_gat(), fp_hash(1));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->schedule, sched(16));
  EXPECT_EQ(hit->fingerprint_text, make_fp(1).text);  // the caller's text, returned as given
  EXPECT_EQ(dfgnn::db::fingerprint_hash(hit->fingerprint_text), hit->fingerprint_hash);

  // Misses: another fingerprint, op, direction, GPU class, SM count.
  EXPECT_FALSE(db->find_exact(h200(), op_gat(), fp_hash(2)));
  EXPECT_FALSE(db->find_exact(h200(), OpKey{0, 0, 4, 32, 0, 0}, fp_hash(1)));
  EXPECT_FALSE(db->find_exact(h200(), op_gat(1), fp_hash(1)));
  EXPECT_FALSE(db->find_exact(h200(), OpKey{0, 0, 4, 64, 0, 1}, fp_hash(1)));
  EXPECT_FALSE(db->find_exact(a100(), op_gat(), fp_hash(1)));
  EnvironmentInfo cut = h200();
  cut.sm_count = 114;
  EXPECT_FALSE(db->find_exact(cut, op_gat(), fp_hash(1)));
  // Stale build: a different template hash or library version is a miss...
  EnvironmentInfo stale = h200();
  stale.template_hash = "t-hash-2";
  EXPECT_FALSE(db->find_exact(stale, op_gat(), fp_hash(1)));
  stale = h200();
  stale.library_version = "0.2.0";
  EXPECT_FALSE(db->find_exact(stale, op_gat(), fp_hash(1)));
  // ...while driver / NVRTC versions are not part of the key, and tools may leave the stamp empty.
  EnvironmentInfo newer_driver = h200();
  newer_driver.driver_version = 13000;
  EXPECT_TRUE(db->find_exact(newer_driver, op_gat(), fp_hash(1)));
  EnvironmentInfo any = h200();
  any.template_hash.clear();
  any.library_version.clear();
  EXPECT_TRUE(db->find_exact(any, op_gat(), fp_hash(1)));

  // Results of the new build are kept apart from the old build's.
  stale = h200();
  stale.template_hash = "t-hash-2";
  ASSERT_TRUE(db->put_result(make_run(stale, op_gat(), 1, {cand(sched(4), 0.5)})));
  EXPECT_EQ(db->find_exact(stale, op_gat(), fp_hash(1))->schedule, sched(4));
  EXPECT_EQ(db->find_exact(h200(), op_gat(), fp_hash(1))->schedule, sched(16));
  EXPECT_TRUE(db->verify().empty());
}

TEST(TuningDbBasic, DefaultKeptWhenStatisticallyTied) {
  TempDir dir;
  auto db = TuningDb::open_user(dir / "t.db");
  // Within 1 % of the best: the default (lanes=32) stays.
  auto r = db->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1.005), cand(sched(16), 1.000)}));
  EXPECT_EQ(r->schedule, sched(32));
  EXPECT_EQ(r->runner_up_schedule, sched(16));
  // Within two standard errors (noisy measurements): tied, default stays.
  r = db->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 1.05, 4, 0.2), cand(sched(16), 1.0, 4, 0.2)}));
  EXPECT_EQ(r->schedule, sched(32));
  // Clearly faster: it wins.
  r = db->put_result(make_run(h200(), op_gat(), 3, {cand(sched(32), 1.0), cand(sched(16), 0.7)}));
  EXPECT_EQ(r->schedule, sched(16));
  // Equal means, neither is the default: the smaller schedule text wins.
  r = db->put_result(make_run(h200(), op_gat(), 4, {cand(sched(8), 0.7), cand(sched(16), 0.7)}));
  EXPECT_EQ(r->schedule, std::min(sched(8), sched(16)));
  // Policy without default preference.
  TuningDb::Options o;
  o.policy.tie = {0.0, 0.0, 0.0};
  auto strict = TuningDb::open_user(dir / "strict.db", o);
  r = strict->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1.005), cand(sched(16), 1.000)}));
  EXPECT_EQ(r->schedule, sched(16));
  // min_count: candidates with too few samples are not eligible.
  TuningDb::Options m;
  m.policy.min_count = 5;
  auto counted = TuningDb::open_user(dir / "count.db", m);
  r = counted->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1.0), cand(sched(16), 0.1, 2)}));
  EXPECT_EQ(r->schedule, sched(32));
}

TEST(TuningDbBasic, PoolsRunsExactlyAndIgnoresRepeatedRuns) {
  TempDir dir;
  auto db = TuningDb::open_user(dir / "t.db");
  const std::vector<double> s1 = {1.0, 1.2, 0.9, 1.1}, s2 = {1.3, 1.25, 1.4, 1.2, 1.35, 1.3};
  const std::vector<double> t1 = {1.5, 1.6}, t2 = {1.0, 1.05, 0.95};
  using dfgnn::db::summarize_samples;
  ASSERT_TRUE(db->put_result(make_run(h200(), op_gat(), 1,
                                      {summarize_samples(sched(32), 1, s1), summarize_samples(sched(16), 1, t1)},
                                      "run-a", 100)));
  auto r = db->put_result(make_run(h200(), op_gat(), 1,
                                   {summarize_samples(sched(32), 1, s2), summarize_samples(sched(16), 1, t2)},
                                   "run-b", 200, "other-host"));
  ASSERT_TRUE(r);
  std::vector<double> all = s1;
  all.insert(all.end(), s2.begin(), s2.end());
  const CandidateStat expect = summarize_samples(sched(32), 1, all);
  // Pooled lanes=32: mean 1.2, lanes=16: mean (3.1 + 3.0) / 5 = 1.22 -> lanes=32 (default, and fastest).
  EXPECT_EQ(r->schedule, sched(32));
  EXPECT_EQ(r->runs, 2);
  EXPECT_EQ(r->stats.count, expect.count);
  EXPECT_NEAR(r->stats.mean_ms, expect.mean_ms, 1e-12);
  EXPECT_NEAR(r->stats.variance, expect.variance(), 1e-12);
  EXPECT_DOUBLE_EQ(r->stats.min_ms, 0.9);
  // The location the winner policy reads: the runs' medians weighted by their counts.
  EXPECT_NEAR(r->stats.median_ms,
              (4 * summarize_samples("", 1, s1).median_ms + 6 * summarize_samples("", 1, s2).median_ms) / 10, 1e-12);
  EXPECT_EQ(r->host, "other-host");                                              // the latest run's
  EXPECT_EQ(r->unix_time, 200);
  const auto pooled = db->pooled_candidates(r->id);
  ASSERT_EQ(pooled.size(), 2u);
  EXPECT_EQ(pooled[0].schedule, sched(32));
  EXPECT_NEAR(pooled[0].m2, expect.m2, 1e-12);
  EXPECT_NEAR(pooled[1].mean_ms, 6.1 / 5, 1e-12);

  // Storing the same run id again changes nothing.
  const auto before = snapshot(*db);
  auto again = db->put_result(make_run(h200(), op_gat(), 1, {cand(sched(4), 0.01)}, "run-b", 300));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->runs, 2);
  EXPECT_EQ(snapshot(*db), before);
  // A run id may not be reused for another problem.
  EXPECT_EQ(expect_error([&] { db->put_result(make_run(h200(), op_gat(), 2, {cand(sched(4), 1)}, "run-b")); }).status(),
            DFGNN_STATUS_INVALID_ARGUMENT);
}

TEST(TuningDbBasic, RejectsMalformedRuns) {
  TempDir dir;
  auto db = TuningDb::open_user(dir / "t.db");
  auto status_of = [&](TuningRun run) {
    return expect_error([&] { db->put_result(run); }).status();
  };
  EXPECT_EQ(status_of(make_run(h200(), op_gat(), 1, {})), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(status_of(make_run(h200(), op_gat(), 1, {cand(sched(32), 1), cand(sched(32), 2)})),
            DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(status_of(make_run(h200(), op_gat(), 1, {cand(sched(32), 1, 0)})), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(status_of(make_run(h200(), op_gat(), 1, {cand(sched(32), std::nan(""))})), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(status_of(make_run(h200(), op_gat(), 1, {cand(sched(32), -1)})), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(status_of(make_run(h200(), op_gat(), 1, {cand("", 1)})), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(status_of(make_run(h200(), OpKey{0, 0, 0, 64, 0, 0}, 1, {cand(sched(32), 1)})),
            DFGNN_STATUS_INVALID_ARGUMENT);
  EnvironmentInfo no_stamp = h200();
  no_stamp.template_hash.clear();
  EXPECT_EQ(status_of(make_run(no_stamp, op_gat(), 1, {cand(sched(32), 1)})), DFGNN_STATUS_INVALID_ARGUMENT);
  // The fingerprint is opaque text here, but there must be one, printable, with a bucket key.
  TuningRun bad_fp = make_run(h200(), op_gat(), 1, {cand(sched(32), 1)});
  bad_fp.fingerprint.text.clear();
  EXPECT_EQ(status_of(bad_fp), DFGNN_STATUS_INVALID_ARGUMENT);
  bad_fp = make_run(h200(), op_gat(), 1, {cand(sched(32), 1)});
  bad_fp.fingerprint.bucket_key.clear();
  EXPECT_EQ(status_of(bad_fp), DFGNN_STATUS_INVALID_ARGUMENT);
  bad_fp = make_run(h200(), op_gat(), 1, {cand(sched(32), 1)});
  bad_fp.fingerprint.text += '\n';
  EXPECT_EQ(status_of(bad_fp), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(db->stats().runs, 0);
  // A site (read-only) database refuses writes.
  db->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1)}));
  db->export_to(dir / "site.db");
  // The database's own -wal holds writes not yet checkpointed: a snapshot renamed over it loses them.
  for (const char* sidecar : {"t.db-wal", "t.db-shm", "t.db-journal"}) {
    const bool existed = fs::exists(dir / sidecar);
    const std::string before = existed ? read_bytes(dir / sidecar) : "";
    const auto e = expect_error([&] { db->export_to(dir / sidecar); });
    EXPECT_EQ(dfgnn::db_status(e), DFGNN_STATUS_INVALID_ARGUMENT) << e.what();
    EXPECT_TRUE(contains(e.what(), "this database's")) << e.what();
    EXPECT_EQ(fs::exists(dir / sidecar), existed);
    if (existed) EXPECT_EQ(read_bytes(dir / sidecar), before);
  }
  EXPECT_EQ(db->stats().runs, 1);
  auto site = TuningDb::open_site(dir / "site.db");
  EXPECT_TRUE(site->read_only());
  EXPECT_EQ(expect_error([&] { site->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 1)})); }).status(),
            DFGNN_STATUS_DATABASE_ERROR);
}

TEST(TuningDbBasic, CandidatesForNearestNeighbourSearch) {
  TempDir dir;
  auto db = TuningDb::open_user(dir / "t.db");
  for (int k = 0; k < 4; ++k) db->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(8), 0.5)}));
  db->put_result(make_run(a100(), op_gat(), 5, {cand(sched(32), 1)}));        // other GPU
  db->put_result(make_run(h200(), op_gat(1), 6, {cand(sched(32), 1)}));       // other direction
  const auto all = db->candidates_for(h200(), op_gat());
  ASSERT_EQ(all.size(), 4u);
  std::set<std::string> hashes;
  std::map<std::string, dfgnn::db::FingerprintText> stored;  // hash -> what was handed over
  for (int k = 0; k < 4; ++k) stored[fp_hash(k)] = make_fp(k);
  for (const TuningResult& r : all) {
    hashes.insert(r.fingerprint_hash);
    ASSERT_EQ(stored.count(r.fingerprint_hash), 1u) << r.fingerprint_hash;
    EXPECT_EQ(r.fingerprint_text, stored[r.fingerprint_hash].text);  // returned as given, for the caller's distance
    EXPECT_EQ(r.bucket_key, stored[r.fingerprint_hash].bucket_key);
    EXPECT_EQ(r.schedule, sched(8));
  }
  EXPECT_EQ(hashes.size(), 4u);
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end(), [](const TuningResult& a, const TuningResult& b) {
    return a.fingerprint_hash < b.fingerprint_hash;
  }));
  const std::string bucket = make_fp(2).bucket_key;
  const auto in_bucket = db->candidates_for(h200(), op_gat(), bucket);
  ASSERT_GE(in_bucket.size(), 1u);
  for (const TuningResult& r : in_bucket) EXPECT_EQ(r.bucket_key, bucket);
  EXPECT_EQ(db->candidates_for(a100(), op_gat()).size(), 1u);
}

// Rows are decoded by column name: every field written through the public API comes back in its
// own field through every read path (put_result, find_exact, candidates_for, list,
// pooled_candidates, a merge, get_module). All values differ from each other, so a decoder that
// reads one column into another field fails here.
TEST(TuningDbColumns, EveryFieldRoundTripsThroughEveryReadPath) {
  TempDir dir;
  auto db = TuningDb::open_user(dir / "t.db");
  // Earlier rows, so that row ids, environment ids and counts all differ.
  ASSERT_TRUE(db->put_result(make_run(a100(), op_gat(), 1, {cand(sched(32), 1.0)})));
  ASSERT_TRUE(db->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1.0)})));
  ASSERT_TRUE(db->put_result(make_run(a100(), op_gat(1), 1, {cand(sched(32), 1.0)})));

  const EnvironmentInfo env{"GPU-X", 89, 77, 12345, 12061, "lib-9.8.7", "tmpl-abc"};
  const OpKey op{6, 9, 12, 40, 5, 13};
  auto stat = [](const char* schedule, int32_t solver, int64_t count, double mean, double m2, double min,
                 double median) { return CandidateStat{schedule, solver, count, mean, m2, min, median}; };
  const CandidateStat a = stat("s-a", 3, 17, 2.5, 0.06, 2.1, 2.4);   // the default
  const CandidateStat b = stat("s-b", 7, 11, 1.7, 0.2, 1.2, 1.5);    // the winner
  const CandidateStat c = stat("s-c", 4, 23, 2.0, 0.04, 1.8, 1.9);   // the runner-up
  const CandidateStat d = stat("s-d", 8, 29, 3.5, 0.08, 3.25, 3.3);  // only in the newer run
  TuningRun older;
  older.environment = env;
  older.op = op;
  older.fingerprint = make_fp(3);
  older.default_schedule = "s-x";  // the newer run's default counts
  older.candidates = {c, a, b};
  older.host = "host-p";
  older.unix_time = 1234000;
  older.tool_version = "tool-y";
  older.run_id = "run-older";
  TuningRun newer = older;
  newer.default_schedule = "s-a";
  newer.candidates = {d};
  newer.host = "host-q";
  newer.unix_time = 1234567;
  newer.tool_version = "tool-z";
  newer.run_id = "run-newer";
  ASSERT_TRUE(db->put_result(older));
  const std::optional<TuningResult> put = db->put_result(newer);
  ASSERT_TRUE(put);

  // The row ids, independently from the file.
  const fs::path file = dir / "t.db";
  const int64_t id = raw_int(file, "SELECT max(id) FROM results");
  const int64_t env_id = raw_int(file, "SELECT id FROM environments WHERE gpu_name = 'GPU-X'");
  ASSERT_EQ(id, 4);
  ASSERT_EQ(env_id, 3);

  auto expect_result = [&](const TuningResult& r, bool same_file, const std::string& where) {
    SCOPED_TRACE(where);
    if (same_file) {
      EXPECT_EQ(r.id, id);
      EXPECT_EQ(r.environment_id, env_id);
    }
    EXPECT_EQ(r.env_class, "GPU-X|sm_89|77");
    EXPECT_EQ(r.template_hash, "tmpl-abc");
    EXPECT_EQ(r.library_version, "lib-9.8.7");
    EXPECT_EQ(r.op, op);
    EXPECT_EQ(r.fingerprint_text, make_fp(3).text);
    EXPECT_EQ(r.fingerprint_hash, fp_hash(3));
    EXPECT_EQ(r.bucket_key, make_fp(3).bucket_key);
    EXPECT_EQ(r.solver_id, 7);
    EXPECT_EQ(r.schedule, "s-b");
    EXPECT_EQ(r.stats.count, 11);
    EXPECT_EQ(r.stats.median_ms, 1.5);
    EXPECT_EQ(r.stats.mean_ms, 1.7);
    EXPECT_DOUBLE_EQ(r.stats.variance, 0.2 / 10);
    EXPECT_EQ(r.stats.min_ms, 1.2);
    EXPECT_EQ(r.default_schedule, "s-a");
    EXPECT_EQ(r.default_median_ms, 2.4);
    EXPECT_EQ(r.runner_up_schedule, "s-c");
    EXPECT_EQ(r.runner_up_median_ms, 1.9);
    EXPECT_EQ(r.host, "host-q");
    EXPECT_EQ(r.unix_time, 1234567);
    EXPECT_EQ(r.tool_version, "tool-z");
    EXPECT_EQ(r.environment, env);
    EXPECT_EQ(r.runs, 2);
  };
  expect_result(*put, true, "put_result");
  EXPECT_EQ(put->source, file.string());
  const std::optional<TuningResult> hit = db->find_exact(env, op, fp_hash(3));
  ASSERT_TRUE(hit);
  expect_result(*hit, true, "find_exact");
  const std::vector<TuningResult> near = db->candidates_for(env, op);
  ASSERT_EQ(near.size(), 1u);
  expect_result(near[0], true, "candidates_for");
  int listed = 0;
  for (const auto& l : db->list("GPU-X|sm_89|77")) {
    EXPECT_EQ(l.problem, "");
    expect_result(l.result, true, "list");
    ++listed;
  }
  EXPECT_EQ(listed, 1);

  auto expect_pooled = [&](const std::vector<CandidateStat>& got, const std::string& where) {
    SCOPED_TRACE(where);
    const std::vector<CandidateStat> want = {b, c, a, d};  // by mean; one run each, so as stored
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].schedule, want[i].schedule);
      EXPECT_EQ(got[i].solver_id, want[i].solver_id);
      EXPECT_EQ(got[i].count, want[i].count);
      EXPECT_EQ(got[i].mean_ms, want[i].mean_ms);
      EXPECT_EQ(got[i].m2, want[i].m2);
      EXPECT_EQ(got[i].min_ms, want[i].min_ms);
      EXPECT_EQ(got[i].median_ms, want[i].median_ms);
    }
  };
  expect_pooled(db->pooled_candidates(id), "pooled_candidates");

  ModuleRecord m;
  m.key = "feedface";
  m.image = {'\x7f', 'E', 'L', 'F', '\0', '\x01'};
  m.names = {"dfgnn::k<3>", "dfgnn::k<4>"};
  m.lowered = {"_Z1kILi3EEvv", "_Z1kILi4EEvv"};
  m.arch = 89;
  m.nvrtc_version = 12061;
  m.template_hash = "tmpl-abc";
  m.created = 1111111;
  db->put_module(m);
  auto expect_module = [&](const std::optional<ModuleRecord>& got, const std::string& where) {
    SCOPED_TRACE(where);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->key, m.key);
    EXPECT_EQ(got->image, m.image);
    EXPECT_EQ(got->names, m.names);
    EXPECT_EQ(got->lowered, m.lowered);
    EXPECT_EQ(got->arch, 89);
    EXPECT_EQ(got->nvrtc_version, 12061);
    EXPECT_EQ(got->template_hash, "tmpl-abc");
    EXPECT_EQ(got->created, 1111111);
  };
  expect_module(db->get_module(m.key), "get_module");
  EXPECT_TRUE(db->verify().empty());

  // A merge reads the source's runs, environments, fingerprints, candidates and modules by name too.
  auto merged = TuningDb::open_user(dir / "merged.db");
  const dfgnn::db::MergeReport report = merged->merge_from(file);
  EXPECT_EQ(report.runs_added, 5);
  EXPECT_EQ(report.runs_rejected + report.candidates_rejected + report.modules_rejected, 0);
  EXPECT_EQ(report.modules_added, 1);
  const std::optional<TuningResult> again = merged->find_exact(env, op, fp_hash(3));
  ASSERT_TRUE(again);
  expect_result(*again, false, "after merge_from");
  expect_pooled(merged->pooled_candidates(again->id), "pooled after merge_from");
  expect_module(merged->get_module(m.key), "get_module after merge_from");
  EXPECT_TRUE(merged->verify().empty());
}

// The statement wrapper under the decoders: columns are found by name in any order; a name the
// query lacks and a name it has twice are errors naming the query and the column.
// The printable check reads clean ASCII eight bytes at a time: every kind of bad byte, at every
// position of a 40-byte text (so in each word and in the tail), is found and named at its byte.
TEST(TuningDbText, UnprintableFindsEachBadByteAtItsPosition) {
  using dfgnn::db::detail::unprintable;
  const std::string clean = "subwarp:lanes=16,groups=8,team=1,vec=4,m";  // 40 bytes
  ASSERT_EQ(clean.size(), 40u);
  EXPECT_EQ(unprintable(clean), "");
  EXPECT_EQ(unprintable(""), "");
  EXPECT_EQ(unprintable("~ !"), "");  // 0x7e and 0x20, the printable ends
  EXPECT_EQ(unprintable(clean + "\xc3\xa9" + clean), "");  // valid UTF-8 (e acute) is text
  for (size_t at = 0; at < clean.size(); ++at) {
    std::string t = clean;
    t[at] = '\x1b';
    EXPECT_EQ(unprintable(t), fmt::format("control character 0x1b at byte {}", at));
    t[at] = '\x7f';
    EXPECT_EQ(unprintable(t), fmt::format("control character 0x7f at byte {}", at));
    t[at] = '\x1f';
    EXPECT_EQ(unprintable(t), fmt::format("control character 0x1f at byte {}", at));
    t[at] = '\xff';
    EXPECT_EQ(unprintable(t), fmt::format("malformed UTF-8 at byte {}", at));
    t = clean;
    t.replace(at, 2, "\xc2\x85");  // U+0085, a C1 control
    t.resize(clean.size());
    if (at + 2 <= clean.size())
      EXPECT_EQ(unprintable(t), fmt::format("C1 control character U+0085 at byte {}", at));
  }
}

TEST(TuningDbColumns, QueryReadsByNameAndRejectsUnknownOrAmbiguousColumns) {
  using dfgnn::db::detail::Connection;
  using dfgnn::db::detail::Query;
  using dfgnn::db::detail::RowReader;
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open_v2(":memory:", &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr), SQLITE_OK);
  Connection conn(handle, "(test)");
  conn.exec("CREATE TABLE t (x INTEGER, y TEXT, z REAL); INSERT INTO t VALUES (7, 'seven', 0.5)");
  // The same row through two select lists in opposite orders.
  static const std::string forward = "SELECT " + dfgnn::db::detail::select_list("a", "t", {"x", "y", "z"}) + " FROM t a";
  static const std::string backward = "SELECT " + dfgnn::db::detail::select_list("a", "t", {"z", "y", "x"}) + " FROM t a";
  for (const std::string* sql : {&forward, &backward}) {
    Query q(conn, sql->c_str());
    ASSERT_TRUE(q.step());
    RowReader in(q);
    EXPECT_EQ(in.integer("t.x"), 7) << *sql;
    EXPECT_EQ(in.text("t.y"), "seven") << *sql;
    EXPECT_EQ(in.real("t.z"), 0.5) << *sql;
    EXPECT_EQ(in.problem(), "") << *sql;
    // A value of the wrong storage class is the row's problem, named by its column.
    EXPECT_EQ(in.integer("t.y"), 0);
    EXPECT_EQ(in.problem(), "column t.y: holds a TEXT value, not an integer");
    // A column the query does not select is a defect, reported as such.
    const auto unknown = expect_error([&] { in.integer("t.w"); });
    EXPECT_TRUE(contains(unknown.what(), "has no column \"t.w\"")) << unknown.what();
    EXPECT_TRUE(contains(unknown.what(), "t.x, t.y, t.z")) << unknown.what();
    EXPECT_TRUE(contains(expect_error([&] { q.text("x"); }).what(), "has no column \"x\""));
  }
  // Two columns of one name (a join without AS names) cannot be read by name: refused when prepared.
  const auto twice = expect_error([&] { Query q(conn, "SELECT a.x, b.x FROM t a, t b"); });
  EXPECT_TRUE(contains(twice.what(), "two columns named \"x\"")) << twice.what();
}

TEST(TuningDbHostile, ValidatorRejectsUnknownSolversAndOutOfRangeParameters) {
  TempDir dir;
  {
    // Written by a build that knew nothing of these rules (no validator).
    auto shared = TuningDb::open_user(dir / "shared.db");
    shared->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1.0), cand(sched(16), 1.2)}));
    shared->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32, "evil"), 0.5), cand(sched(16, "evil"), 0.6)}));
    shared->put_result(make_run(h200(), op_gat(), 3, {cand(sched(999), 0.4)}));
    shared->put_result(make_run(h200(), op_gat(), 4, {cand(sched(7), 0.3), cand(sched(16), 0.9)}));
    shared->export_to(dir / "site.db");
  }
  auto site = TuningDb::open_site(dir / "site.db", with_validator());
  EXPECT_EQ(site->find_exact(h200(), op_gat(), fp_hash(1))->schedule, sched(32));
  EXPECT_FALSE(site->find_exact(h200(), op_gat(), fp_hash(2)));  // unknown solver
  EXPECT_FALSE(site->find_exact(h200(), op_gat(), fp_hash(3)));  // out of range
  EXPECT_FALSE(site->find_exact(h200(), op_gat(), fp_hash(4)));  // stored winner out of range
  const auto candidates = site->candidates_for(h200(), op_gat());
  ASSERT_EQ(candidates.size(), 1u);
  EXPECT_EQ(candidates[0].schedule, sched(32));
  const auto problems = site->verify();
  // Three rejected rows, three stored winners that this validator would not have chosen, and the
  // four candidate rows it rejects (evil x2, lanes=999, lanes=7).
  EXPECT_EQ(problems.size(), 10u) << ::testing::PrintToString(problems);
  for (const auto& l : site->list()) EXPECT_EQ(l.problem.empty(), l.result.schedule == sched(32)) << l.problem;

  // A database with the validator never chooses such a schedule: merging drops them.
  auto user = TuningDb::open_user(dir / "user.db", with_validator());
  const auto report = user->merge_from(dir / "site.db");
  EXPECT_EQ(report.runs_added, 2);     // problems 1 and 4
  EXPECT_EQ(report.runs_rejected, 2);  // problems 2 and 3: nothing usable
  EXPECT_EQ(report.candidates_rejected, 4);
  EXPECT_EQ(user->find_exact(h200(), op_gat(), fp_hash(4))->schedule, sched(16));
  EXPECT_FALSE(user->find_exact(h200(), op_gat(), fp_hash(2)));
  EXPECT_TRUE(user->verify().empty());
  // Same at write time.
  EXPECT_FALSE(user->put_result(make_run(h200(), op_gat(), 5, {cand(sched(32, "evil"), 0.1)})));
  EXPECT_EQ(user->put_result(make_run(h200(), op_gat(), 6, {cand(sched(3), 0.1), cand(sched(4), 2)}))->schedule,
            sched(4));
}

TEST(TuningDbHostile, TamperedRowsAreMissesNeverCrashes) {
  TempDir dir;
  const fs::path p = dir / "t.db";
  {
    auto db = TuningDb::open_user(p, with_validator());
    for (int k = 0; k < 8; ++k) db->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(8), 0.5)}));
  }
  auto id_of = [&](int k) {
    return std::to_string(raw_int(p, "SELECT r.id FROM results r JOIN fingerprints f ON f.id = r.fingerprint_id "
                                     "WHERE f.hash = '" + fp_hash(k) + "'"));
  };
  raw_exec(p, "UPDATE results SET schedule = 'evil:lanes=32' WHERE id = " + id_of(0));
  raw_exec(p, "UPDATE results SET schedule = 'subwarp:lanes=1000000' WHERE id = " + id_of(1));
  raw_exec(p, "UPDATE results SET mean_ms = -1 WHERE id = " + id_of(2));
  raw_exec(p, "UPDATE results SET count = 0 WHERE id = " + id_of(3));
  raw_exec(p, "UPDATE results SET env_class = 'NVIDIA H200|sm_90|132', environment_id = "
              "(SELECT id FROM environments LIMIT 1) WHERE id = " + id_of(4));  // consistent: still valid
  // An A100 environment attached to an H200 result: a foreign-arch row.
  raw_exec(p, "INSERT INTO environments (env_class, gpu_name, compute_capability, sm_count, driver_version, "
              "nvrtc_version, library_version, template_hash) VALUES ('NVIDIA A100|sm_80|108', 'NVIDIA A100', 80, "
              "108, 1, 1, '0.1.0', 't-hash-1')");
  raw_exec(p, "UPDATE results SET environment_id = (SELECT max(id) FROM environments) WHERE id = " + id_of(5));
  raw_exec(p, "UPDATE results SET template_hash = 'other' WHERE id = " + id_of(6));
  raw_exec(p, "UPDATE fingerprints SET text = replace(text, '\"gini\"', '\"gin\"') WHERE hash = '" +
                  fp_hash(7) + "'");
  auto db = TuningDb::open_user(p, with_validator());
  for (int k : {0, 1, 2, 3, 5, 6, 7}) EXPECT_FALSE(db->find_exact(h200(), op_gat(), fp_hash(k))) << k;
  EXPECT_TRUE(db->find_exact(h200(), op_gat(), fp_hash(4)));
  EXPECT_EQ(db->candidates_for(h200(), op_gat()).size(), 1u);
  const auto problems = db->verify();
  EXPECT_GE(problems.size(), 7u) << ::testing::PrintToString(problems);
  // The next write to a tampered problem recomputes it from its runs.
  db->put_result(make_run(h200(), op_gat(), 0, {cand(sched(16), 0.7)}));
  EXPECT_EQ(db->find_exact(h200(), op_gat(), fp_hash(0))->schedule, sched(8));
}

TEST(TuningDbHostile, WritesRefuseControlCharactersAndImplausibleStatistics) {
  TempDir dir;
  auto db = TuningDb::open_user(dir / "t.db");
  auto invalid = [&](TuningRun run, const std::string& why) {
    const auto e = expect_error([&] { db->put_result(run); });
    EXPECT_EQ(dfgnn::db_status(e), DFGNN_STATUS_INVALID_ARGUMENT) << why;
    EXPECT_TRUE(contains(e.what(), why)) << e.what();
  };
  invalid(make_run(h200(), op_gat(), 1, {cand(sched(32), 1)}, {}, 0, "a\x1b[2Jb"), "host: control character 0x1b");
  invalid(make_run(h200(), op_gat(), 1, {cand(sched(32), 1)}, {}, 0, "a\nb"), "host: control character 0x0a");
  invalid(make_run(h200(), op_gat(), 1, {cand(sched(32), 1)}, {}, 0, "a\xc2\x9b" "b"), "C1 control character U+009B");
  invalid(make_run(h200(), op_gat(), 1, {cand(sched(32), 1e-300)}), "mean 1e-300 ms is not a plausible time");
  invalid(make_run(h200(), op_gat(), 1, {cand(sched(32), 1e300)}), "is not a plausible time");
  CandidateStat negative_solver = cand(sched(32), 1);
  negative_solver.solver_id = -7;
  invalid(make_run(h200(), op_gat(), 1, {negative_solver}), "solver id -7");
  CandidateStat min_above_mean = cand(sched(32), 1);
  min_above_mean.min_ms = 2;
  invalid(make_run(h200(), op_gat(), 1, {min_above_mean}), "min 2 ms exceeds");
  EnvironmentInfo env = h200();
  env.gpu_name = "NVIDIA\x7f H200";
  invalid(make_run(env, op_gat(), 1, {cand(sched(32), 1)}), "gpu_name: control character 0x7f");
  EXPECT_EQ(db->stats().runs, 0);
  // Plain UTF-8 is fine.
  EXPECT_TRUE(db->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1)}, {}, 0, "nœud-α")));
}

}  // namespace
