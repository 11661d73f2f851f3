// User database over read-only site databases.
#include "tuning_db.hpp"

#include "sqlite_util.hpp"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <map>

namespace dfgnn::db {

namespace fs = std::filesystem;

namespace {

template <typename... Args>
void log_warn(fmt::format_string<Args...> format, Args&&... args) {
  if (auto* l = detail::db_logger()) l->warn(format, std::forward<Args>(args)...);
}

std::string env_value(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

}  // namespace

fs::path LayeredDb::default_user_path() {
  if (std::string dir = env_value("DFGNN_CACHE_DIR"); !dir.empty()) return fs::path(dir) / "tuning.db";
  if (std::string dir = env_value("XDG_CACHE_HOME"); !dir.empty()) return fs::path(dir) / "dfgnn" / "tuning.db";
  if (std::string home = env_value("HOME"); !home.empty()) return fs::path(home) / ".cache" / "dfgnn" / "tuning.db";
  return {};
}

std::vector<fs::path> LayeredDb::default_site_paths() {
  std::vector<fs::path> out;
  const std::string list = env_value("DFGNN_SITE_DB");
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(':', start), list.size());
    if (end > start) out.emplace_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

LayeredDb::LayeredDb(Options options) {
  fs::path user_path;
  if (options.user_path) {
    user_path = *options.user_path;
    if (user_path.empty()) no_user_reason_ = "no user database (disabled by the caller)";
  } else {
    user_path = default_user_path();
    if (user_path.empty())
      no_user_reason_ = "no user database: none of DFGNN_CACHE_DIR, XDG_CACHE_HOME, HOME is set";
  }
  if (!user_path.empty()) {
    try {
      user_ = TuningDb::open_user(user_path, options.db);
    } catch (const std::exception& e) {
      no_user_reason_ = std::string("the user database is unusable: ") + e.what();
      open_errors_.push_back(e.what());
      log_warn("{}; tuning results will not be saved", no_user_reason_);
    }
  }
  const std::vector<fs::path> sites = options.site_paths ? *options.site_paths : default_site_paths();
  for (const fs::path& site : sites) {
    try {
      sites_.push_back(TuningDb::open_site(site, options.db));
    } catch (const std::exception& e) {
      open_errors_.push_back(e.what());
      log_warn("site database skipped: {}", e.what());
    }
  }
}

namespace {

// Calls f(layer) for the user database, then the sites, until it returns true; a layer that
// throws is logged and skipped.
template <typename F>
void each_layer(TuningDb* user, const std::vector<std::unique_ptr<TuningDb>>& sites, const char* what, F&& f) {
  auto visit = [&](TuningDb& db) {
    try {
      return f(db);
    } catch (const std::exception& e) {
      log_warn("tuning database {}: {} failed, layer skipped: {}", db.path().string(), what, e.what());
      return false;
    }
  };
  if (user != nullptr && visit(*user)) return;
  for (const auto& site : sites)
    if (visit(*site)) return;
}

}  // namespace

std::optional<TuningResult> LayeredDb::find_exact(const EnvironmentInfo& current, const OpKey& op,
                                                  const std::string& hash) {
  std::optional<TuningResult> found;
  each_layer(user_.get(), sites_, "lookup", [&](TuningDb& db) {
    found = db.find_exact(current, op, hash);
    return found.has_value();
  });
  return found;
}

std::vector<TuningResult> LayeredDb::candidates_for(const EnvironmentInfo& current, const OpKey& op,
                                                    const std::optional<std::string>& bucket_key) {
  std::map<std::string, TuningResult> by_fingerprint;
  each_layer(user_.get(), sites_, "candidate search", [&](TuningDb& db) {
    for (TuningResult& r : db.candidates_for(current, op, bucket_key))
      by_fingerprint.try_emplace(r.fingerprint_hash, std::move(r));  // a higher layer was first
    return false;
  });
  std::vector<TuningResult> out;
  out.reserve(by_fingerprint.size());
  for (auto& [hash, r] : by_fingerprint) out.push_back(std::move(r));
  return out;
}

std::optional<ModuleRecord> LayeredDb::get_module(const std::string& key, const std::string& template_hash,
                                                  int32_t nvrtc_version, int32_t arch) {
  std::optional<ModuleRecord> found;
  each_layer(user_.get(), sites_, "module lookup", [&](TuningDb& db) {
    found = db.get_module(key, template_hash, nvrtc_version, arch);
    return found.has_value();
  });
  return found;
}

std::vector<CandidateStat> LayeredDb::pooled_candidates(const TuningResult& row) {
  std::vector<CandidateStat> out;
  each_layer(user_.get(), sites_, "candidate statistics", [&](TuningDb& db) {
    if (db.path().string() != row.source) return false;
    out = db.pooled_candidates(row.id);
    return true;
  });
  return out;
}

std::optional<TuningResult> LayeredDb::put_result(const TuningRun& run) {
  if (!user_) throw DbError(ErrorKind::Other, no_user_reason_);
  return user_->put_result(run);
}

void LayeredDb::put_module(const ModuleRecord& module) {
  if (!user_) throw DbError(ErrorKind::Other, no_user_reason_);
  user_->put_module(module);
}

}  // namespace dfgnn::db
