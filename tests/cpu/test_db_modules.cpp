// Compiled module records in the tuning database (db/src/modules.cpp).
#include "db_test_util.hpp"

namespace {

using namespace dfgnn::test::db_test;

TEST(TuningDbBasic, ModulesAreContentAddressed) {
  TempDir dir;
  auto db = TuningDb::open_user(dir / "t.db");
  ModuleRecord m;
  m.key = "0123456789abcdef";
  m.image = std::vector<char>(70000);
  for (size_t i = 0; i < m.image.size(); ++i) m.image[i] = static_cast<char>(i * 7);
  m.names = {"dfgnn::fwd<1>", "dfgnn::bwd<2>"};
  m.lowered = {"_Z3fwdILi1EEvv", "_Z3bwdILi2EEvv"};
  m.arch = 90;
  m.nvrtc_version = 12080;
  m.template_hash = "t-hash-1";
  db->put_module(m);
  auto got = db->get_module(m.key);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->image, m.image);
  EXPECT_EQ(got->names, m.names);
  EXPECT_EQ(got->lowered, m.lowered);
  EXPECT_EQ(got->arch, 90);
  EXPECT_GT(got->created, 0);
  EXPECT_TRUE(db->get_module(m.key, "t-hash-1", 12080, 90));
  EXPECT_FALSE(db->get_module(m.key, "t-hash-2"));  // stale template
  EXPECT_FALSE(db->get_module(m.key, {}, 13000));   // another NVRTC
  EXPECT_FALSE(db->get_module(m.key, {}, 0, 80));   // another arch
  EXPECT_FALSE(db->get_module("missing"));
  ModuleRecord other = m;
  other.image = {'x'};
  db->put_module(other);  // same key: the first one stays
  EXPECT_EQ(db->get_module(m.key)->image, m.image);
  ModuleRecord bad = m;
  bad.lowered.pop_back();
  EXPECT_EQ(expect_error([&] { db->put_module(bad); }).status(), DFGNN_STATUS_INVALID_ARGUMENT);
  // A malformed stored row is a miss.
  db.reset();
  raw_exec(dir / "t.db", "UPDATE modules SET lowered_names = '{not json'");
  db = TuningDb::open_user(dir / "t.db");
  EXPECT_FALSE(db->get_module(m.key));
  EXPECT_FALSE(db->verify().empty());
}

}  // namespace
