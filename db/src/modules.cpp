// Compiled module records: content-addressed cubins with their kernels' lowered names.
#include "db_internal.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace dfgnn::db {

using namespace detail;

namespace {

std::string lowered_json(const ModuleRecord& m) {
  nlohmann::json j = nlohmann::json::array();
  for (size_t i = 0; i < m.names.size(); ++i) j.push_back({m.names[i], m.lowered[i]});
  return j.dump();
}

// "" or the problem.
std::string decode_lowered(const std::string& text, ModuleRecord& m) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array()) return "lowered names are not a JSON array";
  m.names.clear();
  m.lowered.clear();
  for (const auto& pair : j) {
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string())
      return "lowered names: an entry is not a [name, lowered] pair of strings";
    m.names.push_back(pair[0].get<std::string>());
    m.lowered.push_back(pair[1].get<std::string>());
  }
  return {};
}

}  // namespace

namespace detail {

const std::string& module_select() {
  static const std::string sql =
      "SELECT " +
      select_list("m", "modules",
                  {"key", "image", "lowered_names", "arch", "nvrtc_version", "template_hash", "created"}) +
      " FROM modules m ";
  return sql;
}

std::string decode_module(const Query& q, ModuleRecord& m) {
  m = ModuleRecord{};
  RowReader in(q);
  m.key = in.text("modules.key");
  if (q.column_type("modules.image") != SQLITE_BLOB) return "image is not a blob";
  m.image = q.blob("modules.image");
  const std::string lowered = in.text("modules.lowered_names");
  m.arch = in.int32("modules.arch");
  m.nvrtc_version = in.int32("modules.nvrtc_version");
  m.template_hash = in.text("modules.template_hash");
  m.created = in.integer("modules.created");
  if (!in.problem().empty()) return in.problem();
  if (m.key.empty()) return "empty key";
  if (m.image.empty()) return "empty image";
  if (std::string why = decode_lowered(lowered, m); !why.empty()) return why;
  if (m.names.empty()) return "no kernel names";
  for (size_t i = 0; i < m.names.size(); ++i)  // JSON escapes could have hidden control characters
    if (std::string why = unprintable(m.names[i] + m.lowered[i]); !why.empty()) return "lowered names: " + why;
  return {};
}

void insert_module(Connection& conn, const ModuleRecord& m, int64_t& added) {
  Query ins(conn,
            "INSERT INTO modules (key, image, lowered_names, arch, nvrtc_version, template_hash, created) "
            "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (key) DO NOTHING");
  ins.bind(1, m.key).bind_blob(2, m.image.data(), m.image.size()).bind(3, lowered_json(m)).bind(4, m.arch);
  ins.bind(5, m.nvrtc_version).bind(6, m.template_hash).bind(7, m.created != 0 ? m.created : now_unix());
  added += ins.run();
}

}  // namespace detail

void TuningDb::put_module(const ModuleRecord& module) {
  std::lock_guard lock(mutex_);
  Impl::require_writable(*this);
  if (module.key.empty() || module.image.empty() || module.names.empty() ||
      module.names.size() != module.lowered.size())
    throw DbError(ErrorKind::InvalidArgument,
                  fmt::format("tuning database {}: put_module: empty key, image or names, or names ({}) and lowered "
                              "names ({}) differ in length",
                              path_.string(), module.names.size(), module.lowered.size()));
  int64_t added = 0;
  write_transaction(*conn_, options_.write_attempts, [&] { insert_module(*conn_, module, added); });
}

std::optional<ModuleRecord> TuningDb::get_module(const std::string& key, const std::string& template_hash,
                                                 int32_t nvrtc_version, int32_t arch) {
  std::lock_guard lock(mutex_);
  static const std::string sql = module_select() + "WHERE m.key = ?1";
  Query q(*conn_, sql.c_str());
  q.bind(1, key);
  if (!q.step()) return std::nullopt;
  ModuleRecord m;
  if (std::string why = decode_module(q, m); !why.empty()) {
    log_warn("tuning database {}: module {} rejected: {}", path_.string(), key, why);
    return std::nullopt;
  }
  if ((!template_hash.empty() && m.template_hash != template_hash) ||
      (nvrtc_version != 0 && m.nvrtc_version != nvrtc_version) || (arch != 0 && m.arch != arch)) {
    log_warn("tuning database {}: module {} was built from kernel source {} by NVRTC {} for sm_{}; wanted: {}{} for "
             "sm_{}; miss",
             path_.string(), key, m.template_hash, m.nvrtc_version, m.arch, template_hash,
             nvrtc_version != 0 ? fmt::format(" by NVRTC {}", nvrtc_version) : std::string(), arch);
    return std::nullopt;
  }
  return m;
}

std::vector<ModuleRecord> TuningDb::modules() {
  std::lock_guard lock(mutex_);
  static const std::string sql = module_select() + "ORDER BY m.key";
  Query q(*conn_, sql.c_str());
  std::vector<ModuleRecord> out;
  while (q.step()) {
    ModuleRecord m;
    if (std::string why = decode_module(q, m); !why.empty()) {
      log_warn("tuning database {}: a module rejected: {}", path_.string(), why);
      continue;
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace dfgnn::db
