// What a cubin (the ELF image NVRTC writes, machine code of one sm_XX) says about its kernels, read
// on the CPU: the machine code of each kernel and the resources ptxas gave it. The runtime holds a
// dropout kernel at the occupancy of its sibling without dropout (ModuleCache), and the shipped-file
// tools compare machine code across kernel-source changes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dfgnn {

struct KernelResources {
  int registers = -1;    // per thread (EIATTR_REGCOUNT); -1 when the image does not say
  int frame_bytes = 0;   // per-thread stack frame (EIATTR_FRAME_SIZE): spills land here
  int max_threads = 0;   // threads per block of __launch_bounds__ (EIATTR_MAX_THREADS); 0 without
};

class CubinElf {
 public:
  // Reads the section table; throws std::runtime_error naming what is malformed (a truncated or
  // foreign image), never reads outside `image`.
  explicit CubinElf(const std::vector<char>& image);
  // Machine code by kernel: the bytes of each ".text.<mangled name>" section, keyed by the name.
  std::map<std::string, std::string> machine_code() const;
  // Resources by kernel (mangled name), for every kernel the image describes.
  std::map<std::string, KernelResources> resources() const;

 private:
  struct Section {
    std::string name;
    uint32_t name_offset = 0, type = 0, link = 0;
    uint64_t offset = 0, size = 0;
  };
  const Section* find(const std::string& name) const;
  std::vector<std::string> symbol_names() const;
  std::string string_at(const Section& table, uint64_t offset) const;
  const std::vector<char>& image_;
  std::vector<Section> sections_;
};

// Blocks of `threads` threads resident per SM of sm_<arch> when each thread takes `registers`
// (registers alone: threads, blocks and the register file; shared memory is not counted). 0 for an
// architecture without a known table or a kernel that cannot launch.
int resident_blocks(int registers, int threads, int arch);

}  // namespace dfgnn
