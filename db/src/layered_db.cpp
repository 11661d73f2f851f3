// User database over read-only site databases over the databases shipped with the package.
#include "tuning_db.hpp"

#include "sqlite_util.hpp"

#include <spdlog/spdlog.h>

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

// Relative paths from the installed library's and tools' directories to <prefix>/share/dfgnn/tuning
// (CMakeLists.txt computes them from GNUInstallDirs).
#ifndef DFGNN_LIB_TO_SHIPPED
#define DFGNN_LIB_TO_SHIPPED "../share/dfgnn/tuning"
#endif
#ifndef DFGNN_BIN_TO_SHIPPED
#define DFGNN_BIN_TO_SHIPPED "../share/dfgnn/tuning"
#endif

namespace dfgnn::db {

namespace fs = std::filesystem;

using detail::log_warn;

namespace {

// A read-only layer's trouble is logged once per process: every context opens its own layers,
// and an installed file does not change while the process runs.
template <typename... Args>
void log_once(spdlog::level::level_enum level, fmt::format_string<Args...> format, Args&&... args) {
  static std::mutex mutex;
  static std::set<std::string> said;
  const std::string text = fmt::format(format, std::forward<Args>(args)...);
  {
    std::lock_guard lock(mutex);
    if (!said.insert(text).second) return;
  }
  if (auto* l = detail::db_logger()) l->log(level, "{}", text);
}

// Files found damaged (SQLite's "database disk image is malformed") in this process, by identity:
// every context opens its own layers, and a damaged file stays damaged, so one finding skips it
// everywhere. The identity is (device, inode, size, modification time), so a file replaced or
// rewritten at the same path (a new export, a repaired user database) is read again.
std::string file_identity(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return fmt::format("{}:{}:{}:{}.{}", st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
}
struct DamagedFiles {
  std::mutex mutex;
  std::map<std::string, std::string> reason;  // identity -> the error that found it
};
DamagedFiles& damaged_files() {
  static DamagedFiles files;
  return files;
}
// The recorded damage of a file ("" if none).
std::string known_damage(const std::string& identity) {
  if (identity.empty()) return {};
  DamagedFiles& d = damaged_files();
  std::lock_guard lock(d.mutex);
  auto it = d.reason.find(identity);
  return it == d.reason.end() ? std::string() : it->second;
}
// Records a damage; true the first time for this file (then it is logged).
bool record_damage(const std::string& identity, const std::string& reason) {
  if (identity.empty()) return true;
  DamagedFiles& d = damaged_files();
  std::lock_guard lock(d.mutex);
  return d.reason.emplace(identity, reason).second;
}
bool is_damage(const std::exception& e) {
  const auto* d = dynamic_cast<const DbError*>(&e);
  return d != nullptr && d->kind() == ErrorKind::Corrupt;
}

std::string env_value(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

std::vector<std::string> split_colons(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(':', start), list.size());
    if (end > start) out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// The *.db files of a directory, by name (none if it cannot be read).
std::vector<fs::path> databases_in(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".db" && it->is_regular_file(ec)) out.push_back(it->path());
  std::sort(out.begin(), out.end());
  return out;
}

// The file holding this code: libdfgnn.so, or the executable that links the database statically.
fs::path code_file() {
  Dl_info info{};
  std::error_code ec;
  if (dladdr(reinterpret_cast<void*>(&LayeredDb::shipped_directory), &info) != 0 && info.dli_fname != nullptr &&
      *info.dli_fname != '\0') {
    fs::path p = fs::canonical(info.dli_fname, ec);
    if (!ec) return p;
  }
  fs::path self = fs::canonical("/proc/self/exe", ec);
  return ec ? fs::path() : self;
}

// Why a read-only database serves nothing here (empty if some of its results fit this environment),
// or the class of another GPU of this architecture whose results it answers with.
struct Foreign {
  std::string reason;
  bool stale = false;  // this GPU class, another build
  std::optional<EnvironmentInfo> stand_in;  // answers as this GPU (another of the same architecture)
};

// "<gpu_name>|sm_<cc>|<sm_count>" split from the right (a GPU name may hold anything).
std::optional<std::pair<std::string, int32_t>> name_and_sms(const std::string& env_class, int32_t cc) {
  const std::string arch = fmt::format("|sm_{}|", cc);
  const size_t at = env_class.rfind(arch);
  if (at == std::string::npos || at == 0) return std::nullopt;
  const std::string sms = env_class.substr(at + arch.size());
  if (sms.empty() || sms.size() > 6 || sms.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::make_pair(env_class.substr(0, at), static_cast<int32_t>(std::stoi(sms)));
}

Foreign foreign_reason(TuningDb& db, const EnvironmentInfo& env) {
  // Seeks on the results index per class of the file, not a scan of every result (a process's first
  // dispatch asks this of every read-only layer): results of this GPU class and build answer; else
  // those of another GPU of this architecture and build, the same SM count first, then the one with
  // the most results (counted only to break that tie). Schedules valid there are valid here, and its
  // winners are far nearer this GPU's than the default rule (an H100 reads the H200's sm90.db).
  const std::string here = environment_class(env);
  const std::vector<std::string> classes = db.result_classes();
  if (classes.empty()) return {};  // empty: nothing to skip
  const auto of_this_build = [&](const std::string& c, int64_t at_most) {
    return db.build_results(c, env.library_version, env.template_hash, at_most);
  };
  if (of_this_build(here, 1) > 0) return {};
  std::optional<EnvironmentInfo> stand_in;
  std::string best;
  int best_rank = -1;
  int64_t best_results = -1;  // -1: not counted yet
  for (const std::string& c : classes) {
    const auto parsed = name_and_sms(c, env.compute_capability);
    if (c == here || !parsed) continue;
    const int rank = parsed->second == env.sm_count ? 1 : 0;
    if (rank < best_rank || of_this_build(c, 1) == 0) continue;
    if (rank == best_rank) {
      if (best_results < 0) best_results = of_this_build(best, -1);
      const int64_t results = of_this_build(c, -1);
      if (results <= best_results) continue;
      best_results = results;
    } else {
      best_results = -1;
    }
    best = c;
    best_rank = rank;
    stand_in = env;
    stand_in->gpu_name = parsed->first;
    stand_in->sm_count = parsed->second;
  }
  if (stand_in) return {{}, false, std::move(stand_in)};
  // Nothing fits: say why, from the build stamps (a stale build of this class, or other GPUs only).
  const std::vector<BuildStamp> stamps = db.build_stamps();
  const auto same_class = std::find_if(stamps.begin(), stamps.end(),
                                       [&](const BuildStamp& s) { return s.env_class == here; });
  if (same_class != stamps.end())
    return {fmt::format("tuned by library {} with kernel source {}, this is library {} with kernel source {} (stale: "
                        "rebuild it with this version)",
                        same_class->library_version, same_class->template_hash, env.library_version, env.template_hash),
            true, {}};
  std::string listed;
  for (size_t i = 0; i < stamps.size() && i < 3; ++i) listed += (i ? "; " : "") + stamps[i].env_class;
  if (stamps.size() > 3) listed += fmt::format("; {} more", stamps.size() - 3);
  return {fmt::format("tuned for another GPU ({}), this one is {}", listed, here), false, {}};
}

}  // namespace

const char* layer_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::User: return "user";
    case LayerKind::Site: return "site";
    case LayerKind::Shipped: return "shipped";
  }
  return "unknown";
}

fs::path LayeredDb::default_user_path() {
  if (std::string dir = env_value("DFGNN_CACHE_DIR"); !dir.empty()) return fs::path(dir) / "tuning.db";
  if (std::string dir = env_value("XDG_CACHE_HOME"); !dir.empty()) return fs::path(dir) / "dfgnn" / "tuning.db";
  if (std::string home = env_value("HOME"); !home.empty()) return fs::path(home) / ".cache" / "dfgnn" / "tuning.db";
  return {};
}

std::vector<fs::path> LayeredDb::default_site_paths() {
  std::vector<fs::path> out;
  for (const std::string& s : split_colons(env_value("DFGNN_SITE_DB"))) out.emplace_back(s);
  return out;
}

std::vector<fs::path> LayeredDb::shipped_directory_candidates(const fs::path& code_file) {
  const fs::path dir = code_file.parent_path();
  return {dir / "data/tuning", dir / "../data/tuning", dir / DFGNN_LIB_TO_SHIPPED, dir / DFGNN_BIN_TO_SHIPPED};
}

fs::path LayeredDb::shipped_directory() {
  const fs::path file = code_file();
  if (file.empty()) return {};
  for (const fs::path& dir : shipped_directory_candidates(file)) {
    std::error_code ec;
    if (fs::is_directory(dir, ec)) return fs::canonical(dir, ec);
  }
  return {};
}

std::vector<fs::path> LayeredDb::default_shipped_paths() {
  if (const char* v = std::getenv("DFGNN_SHIPPED_DB"); v != nullptr) {
    const std::string value(v);
    if (value.empty() || value == "off" || value == "none" || value == "0") return {};
    std::vector<fs::path> out;
    for (const std::string& entry : split_colons(value)) {
      std::error_code ec;
      if (fs::is_directory(entry, ec)) {
        for (fs::path& p : databases_in(entry)) out.push_back(std::move(p));
      } else {
        out.emplace_back(entry);  // a missing file is reported when it is opened
      }
    }
    return out;
  }
  const fs::path dir = shipped_directory();
  return dir.empty() ? std::vector<fs::path>{} : databases_in(dir);
}

void LayeredDb::open_read_only_layer(const fs::path& path, LayerKind kind,
                                     const std::optional<EnvironmentInfo>& environment, const TuningDb::Options& db) {
  LayerInfo info{kind, path, false, {}, {}};
  const bool shipped = kind == LayerKind::Shipped;
  const std::string identity = file_identity(path);
  if (std::string damage = known_damage(identity); !damage.empty()) {  // logged when it was found
    info.reason = "damaged (found earlier in this process): " + damage;
    layers_.push_back(std::move(info));
    return;
  }
  try {
    std::unique_ptr<TuningDb> opened = TuningDb::open_site(path, db);
    const Foreign foreign = environment ? foreign_reason(*opened, *environment) : Foreign{};
    info.reason = foreign.reason;
    if (info.reason.empty()) {
      const bool results_free = !opened->has_results();  // before the layer is registered: it may throw
      info.used = true;
      identity_[opened.get()] = identity;
      if (results_free) results_free_.insert(opened.get());
      if (foreign.stand_in) {
        info.tuned_on = environment_class(*foreign.stand_in);
        stand_in_[opened.get()] = *foreign.stand_in;
        log_once(spdlog::level::info, "{} tuning database {} holds no results of this build for this GPU ({}); it answers with those "
                 "tuned on {}, a GPU of the same architecture", layer_name(kind), path.string(),
                 environment_class(*environment), info.tuned_on);
      }
      (shipped ? shipped_ : sites_).push_back(std::move(opened));
    } else {
      // Another GPU class is expected (a database per class); a stale build of this class is not.
      log_once(foreign.stale ? spdlog::level::warn : spdlog::level::info, "{} tuning database {} skipped: {}", layer_name(kind),
               path.string(), info.reason);
    }
  } catch (const std::exception& e) {
    info.reason = e.what();
    open_errors_.push_back(e.what());
    if (is_damage(e)) {
      info.reason = std::string("damaged: ") + e.what();
      if (record_damage(identity, e.what()))
        log_once(spdlog::level::warn, "{} tuning database {} is damaged and not read in this process: {}",
                 layer_name(kind), path.string(), e.what());
    } else if (shipped)
      log_once(spdlog::level::warn, "shipped tuning database skipped (dispatch uses the other layers and the default "
               "rule): {}", e.what());
    else
      log_warn("site database skipped: {}", e.what());
  }
  layers_.push_back(std::move(info));
}

LayeredDb::LayeredDb(Options options) : policy_(options.db.policy) {
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
    user_path_ = user_path;
    user_options_ = options.db;
    LayerInfo info{LayerKind::User, user_path, true, {}, {}};
    std::error_code ec;
    if (fs::exists(user_path, ec) || ec) {  // an existing file is judged now, as before any write
      if (user_layer(true) == nullptr) {
        info.used = false;
        info.reason = user_open_error_;
        open_errors_.push_back(user_open_error_);
      }
    }
    layers_.push_back(std::move(info));
  }
  const std::vector<fs::path> sites = options.site_paths ? *options.site_paths : default_site_paths();
  for (const fs::path& site : sites) open_read_only_layer(site, LayerKind::Site, options.environment, options.db);
  const std::vector<fs::path> shipped = options.shipped_paths ? *options.shipped_paths : default_shipped_paths();
  for (const fs::path& file : shipped) {
    // A shipped file also named as a site database is read once, as the site.
    std::error_code ec;
    const bool listed = std::any_of(sites.begin(), sites.end(), [&](const fs::path& s) { return fs::equivalent(s, file, ec); });
    if (!listed) open_read_only_layer(file, LayerKind::Shipped, options.environment, options.db);
  }
}

TuningDb* LayeredDb::user_layer(bool create) {
  if (TuningDb* db = user_.load(std::memory_order_acquire)) return db;
  if (user_path_.empty()) return nullptr;
  std::lock_guard lock(user_mutex_);
  if (TuningDb* db = user_.load(std::memory_order_relaxed)) return db;
  if (user_unusable_) return nullptr;
  std::error_code ec;
  if (!create && !fs::exists(user_path_, ec)) return nullptr;  // a stat per read until it exists
  try {
    user_owned_ = TuningDb::open_user(user_path_, user_options_);
    user_identity_ = file_identity(user_path_);
    user_.store(user_owned_.get(), std::memory_order_release);
    return user_owned_.get();
  } catch (const std::exception& e) {
    if (!create) {  // a read that found another process's new file (maybe still being made): try again later
      detail::log_debug("user database {} not read yet: {}", user_path_.string(), e.what());
      return nullptr;
    }
    user_unusable_ = true;
    user_open_error_ = e.what();
    no_user_reason_ = std::string("the user database is unusable: ") + e.what();
    log_warn("{}; tuning results will not be saved", no_user_reason_);
    return nullptr;
  }
}

template <typename F>
void LayeredDb::each_layer(const char* what, bool results, F&& f) {
  auto visit = [&](TuningDb& db, LayerKind kind) {
    if (results && results_free_.count(&db) > 0) return false;
    const auto known = identity_.find(&db);  // filled in by the constructor: read-only here
    const std::string identity = kind == LayerKind::User ? user_identity_  // set before the layer was published
                                 : known != identity_.end() ? known->second : std::string();
    {
      std::lock_guard lock(failed_mutex_);
      if (std::find(failed_.begin(), failed_.end(), &db) != failed_.end()) return false;
    }
    if (!known_damage(identity).empty()) return false;  // found damaged by another context
    try {
      return f(db, kind);
    } catch (const std::exception& e) {
      if (is_damage(e)) {  // damaged pages stay damaged, in every layer: skip it for the process
        {
          std::lock_guard lock(failed_mutex_);
          failed_.push_back(&db);
        }
        if (record_damage(identity, e.what()))
          log_once(spdlog::level::warn, "{} tuning database {} is damaged and no longer read in this process ({} "
                   "failed; dispatch answers from the other layers): {}",
                   layer_name(kind), db.path().string(), what, e.what());
        return false;
      }
      if (kind == LayerKind::User) {  // may be transient (busy, a full disk): try again next time
        log_warn("tuning database {}: {} failed, layer skipped: {}", db.path().string(), what, e.what());
        return false;
      }
      {  // an immutable file that fails once fails again: drop it
        std::lock_guard lock(failed_mutex_);
        failed_.push_back(&db);
      }
      log_once(spdlog::level::warn, "{} tuning database {} failed and is no longer read ({} failed): {}",
               layer_name(kind), db.path().string(), what, e.what());
      return false;
    }
  };
  if (TuningDb* user = user_layer(false); user != nullptr && visit(*user, LayerKind::User)) return;
  for (const auto& site : sites_)
    if (visit(*site, LayerKind::Site)) return;
  for (const auto& file : shipped_)
    if (visit(*file, LayerKind::Shipped)) return;
}

template <typename Map, typename Read>
typename Map::mapped_type LayeredDb::read_once(Map& memo, const typename Map::key_type& key, Read&& read) {
  {
    std::lock_guard lock(memo_mutex_);
    if (auto it = memo.find(key); it != memo.end()) return it->second;
  }
  typename Map::mapped_type value = read();
  std::lock_guard lock(memo_mutex_);
  return memo.emplace(key, std::move(value)).first->second;
}

const EnvironmentInfo& LayeredDb::as_seen_by(const TuningDb& db, const EnvironmentInfo& current) const {
  const auto it = stand_in_.find(&db);
  return it == stand_in_.end() ? current : it->second;
}

std::optional<TuningResult> LayeredDb::find_exact(const EnvironmentInfo& current, const OpKey& op,
                                                  const std::string& hash) {
  std::optional<TuningResult> found;
  each_layer("lookup", true, [&](TuningDb& db, LayerKind kind) {
    found = db.find_exact(as_seen_by(db, current), op, hash);
    if (found) found->layer = layer_name(kind);
    return found.has_value();
  });
  return found;
}

std::vector<TuningResult> LayeredDb::candidates_for(const EnvironmentInfo& current, const OpKey& op,
                                                    const std::optional<std::string>& bucket_key) {
  std::map<std::string, TuningResult> by_fingerprint;
  each_layer("candidate search", true, [&](TuningDb& db, LayerKind kind) {
    const EnvironmentInfo& seen = as_seen_by(db, current);
    const auto read = [&] { return db.candidates_for(seen, op, bucket_key); };
    std::vector<TuningResult> rows =
        kind == LayerKind::User
            ? read()
            : read_once(rows_memo_,
                        RowsKey{&db, environment_class(seen), op.model, op.dtype, op.heads, op.dim, op.direction,
                                op.key_bits, bucket_key.value_or("")},
                        read);
    for (TuningResult& r : rows) {
      r.layer = layer_name(kind);
      by_fingerprint.try_emplace(r.fingerprint_hash, std::move(r));  // a higher layer was first
    }
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
  each_layer("module lookup", false, [&](TuningDb& db, LayerKind kind) {
    found = db.get_module(key, template_hash, nvrtc_version, arch);
    if (found) {
      found->layer = layer_name(kind);
      found->source = db.path().string();
    }
    return found.has_value();
  });
  return found;
}

std::vector<CandidateStat> LayeredDb::pooled_candidates(const TuningResult& row) {
  std::vector<CandidateStat> out;
  each_layer("candidate statistics", true, [&](TuningDb& db, LayerKind kind) {
    if (db.path().string() != row.source) return false;
    const auto read = [&] { return db.pooled_candidates(row.id); };
    out = kind == LayerKind::User ? read() : read_once(pooled_memo_, {&db, row.id}, read);
    return true;
  });
  return out;
}

TuningDb& LayeredDb::writable_user() {
  if (TuningDb* db = user_layer(true)) return *db;
  std::lock_guard lock(user_mutex_);
  throw DbError(ErrorKind::Other, no_user_reason_);
}

std::optional<TuningResult> LayeredDb::put_result(const TuningRun& run) {
  return writable_user().put_result(run);
}

void LayeredDb::put_module(const ModuleRecord& module) {
  writable_user().put_module(module);
}

}  // namespace dfgnn::db
