#include "cubin_elf.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace dfgnn {
namespace {

// The .nv.info attributes read here (their numbers as cuobjdump's EIATTR_* list has them).
constexpr uint8_t kFormatSized = 0x04;  // EIFMT_SVAL: a 16-bit size, then that many bytes
constexpr uint8_t kMaxThreads = 0x05, kFrameSize = 0x11, kRegCount = 0x2f;
constexpr uint32_t kSymbolBytes = 24;  // Elf64_Sym
constexpr uint32_t kNoBits = 8;        // SHT_NOBITS (.nv.shared.*): a section with no bytes in the file

template <typename T>
T read_at(const std::vector<char>& image, uint64_t at) {
  if (at > image.size() || image.size() - at < sizeof(T))
    throw std::runtime_error(fmt::format("cubin: a field at byte {} runs past the image's {} bytes", at, image.size()));
  T v;
  std::memcpy(&v, image.data() + at, sizeof(T));
  return v;
}

// Calls f(attribute, payload offset, payload bytes) for each attribute of an .nv.info section.
template <typename F>
void for_each_attribute(const std::vector<char>& image, uint64_t offset, uint64_t size, F&& f) {
  uint64_t at = offset;
  const uint64_t end = offset + size;
  while (end - at >= 4) {
    const auto format = read_at<uint8_t>(image, at), attribute = read_at<uint8_t>(image, at + 1);
    if (format != kFormatSized) {  // the other formats hold their value in these 4 bytes
      at += 4;
      continue;
    }
    const uint64_t bytes = read_at<uint16_t>(image, at + 2);
    if (bytes > end - at - 4) throw std::runtime_error("cubin: an .nv.info attribute runs past its section");
    f(attribute, at + 4, bytes);
    at += 4 + bytes;
  }
}

}  // namespace

CubinElf::CubinElf(const std::vector<char>& image) : image_(image) {
  if (image.size() < 64 || std::memcmp(image.data(), "\x7f" "ELF", 4) != 0 || image[4] != 2)
    throw std::runtime_error("cubin: not a 64-bit ELF image");
  const auto table = read_at<uint64_t>(image, 0x28);
  const auto entry = read_at<uint16_t>(image, 0x3a), count = read_at<uint16_t>(image, 0x3c),
             names = read_at<uint16_t>(image, 0x3e);
  if (entry < 64 || names >= count) throw std::runtime_error("cubin: malformed section table");
  if (table > image.size() || (image.size() - table) / entry < count)
    throw std::runtime_error("cubin: the section table runs past the image");
  for (uint16_t k = 0; k < count; ++k) {
    const uint64_t h = table + uint64_t{k} * entry;
    Section s;
    s.name_offset = read_at<uint32_t>(image, h);
    s.type = read_at<uint32_t>(image, h + 4);
    s.offset = read_at<uint64_t>(image, h + 0x18);
    s.size = read_at<uint64_t>(image, h + 0x20);
    s.link = read_at<uint32_t>(image, h + 0x28);
    if (s.type != kNoBits && (s.offset > image.size() || s.size > image.size() - s.offset))
      throw std::runtime_error(fmt::format("cubin: section {} runs past the image", k));
    sections_.push_back(s);
  }
  const Section names_table = sections_[names];
  for (Section& s : sections_) s.name = string_at(names_table, s.name_offset);
}

std::string CubinElf::string_at(const Section& table, uint64_t offset) const {
  if (table.type == kNoBits) throw std::runtime_error("cubin: a string table without bytes");
  if (offset >= table.size) throw std::runtime_error("cubin: a name lies outside its string table");
  const char* begin = image_.data() + table.offset + offset;
  const char* end = static_cast<const char*>(std::memchr(begin, '\0', table.size - offset));
  if (end == nullptr) throw std::runtime_error("cubin: an unterminated name");
  return std::string(begin, end);
}

const CubinElf::Section* CubinElf::find(const std::string& name) const {
  const auto it = std::find_if(sections_.begin(), sections_.end(), [&](const Section& s) { return s.name == name; });
  return it == sections_.end() ? nullptr : &*it;
}

std::vector<std::string> CubinElf::symbol_names() const {
  const Section* symbols = find(".symtab");
  if (symbols == nullptr) return {};
  if (symbols->link >= sections_.size()) throw std::runtime_error("cubin: the symbol table names no string table");
  const Section& strings = sections_[symbols->link];
  std::vector<std::string> out;
  for (uint64_t at = 0; at + kSymbolBytes <= symbols->size; at += kSymbolBytes)
    out.push_back(string_at(strings, read_at<uint32_t>(image_, symbols->offset + at)));
  return out;
}

std::map<std::string, std::string> CubinElf::machine_code() const {
  std::map<std::string, std::string> out;
  for (const Section& s : sections_)
    if (s.type != kNoBits && s.name.rfind(".text.", 0) == 0) out[s.name.substr(6)] = std::string(image_.data() + s.offset, s.size);
  return out;
}

std::map<std::string, KernelResources> CubinElf::resources() const {
  std::map<std::string, KernelResources> out;
  const std::string prefix = ".nv.info.";
  for (const Section& s : sections_) {
    if (s.name.rfind(prefix, 0) != 0) continue;
    KernelResources& r = out[s.name.substr(prefix.size())];
    for_each_attribute(image_, s.offset, s.size, [&](uint8_t attribute, uint64_t at, uint64_t bytes) {
      if (attribute == kMaxThreads && bytes == 12)
        r.max_threads = static_cast<int>(read_at<uint32_t>(image_, at) * read_at<uint32_t>(image_, at + 4) *
                                         read_at<uint32_t>(image_, at + 8));
    });
  }
  // Registers and frames are listed once for the image, by symbol.
  if (const Section* info = find(".nv.info")) {
    const std::vector<std::string> symbols = symbol_names();
    for_each_attribute(image_, info->offset, info->size, [&](uint8_t attribute, uint64_t at, uint64_t bytes) {
      if ((attribute != kRegCount && attribute != kFrameSize) || bytes != 8) return;
      const uint32_t symbol = read_at<uint32_t>(image_, at), value = read_at<uint32_t>(image_, at + 4);
      if (symbol >= symbols.size()) throw std::runtime_error("cubin: an attribute names a symbol the image lacks");
      const auto it = out.find(symbols[symbol]);
      if (it == out.end()) return;  // a device function's frame, not a kernel's
      (attribute == kRegCount ? it->second.registers : it->second.frame_bytes) = static_cast<int>(value);
    });
  }
  return out;
}

int resident_blocks(int registers, int threads, int arch) {
  // Per SM, by compute capability (CUDA C++ Programming Guide, "Technical Specifications"): resident
  // warps and blocks; every one of them has 64K registers, allocated per warp in units of 256.
  struct Limits {
    int arch, warps, blocks;
  };
  static constexpr Limits kLimits[] = {{70, 64, 32}, {72, 64, 32}, {75, 32, 16}, {80, 64, 32},
                                       {86, 48, 16}, {87, 48, 16}, {89, 48, 24}, {90, 64, 32}};
  const auto it = std::find_if(std::begin(kLimits), std::end(kLimits), [&](const Limits& l) { return l.arch == arch; });
  if (it == std::end(kLimits) || registers <= 0 || registers > 255 || threads <= 0 || threads > 1024) return 0;
  const int warps = (threads + 31) / 32;
  const int per_warp = (registers * 32 + 255) / 256 * 256;
  return std::min({65536 / per_warp / warps, it->warps / warps, it->blocks});
}

}  // namespace dfgnn
