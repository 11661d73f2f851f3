// NVRTC opened at run time (nvrtc.cpp): the search order, the error that lists what was tried, the
// toolkit found on this machine, and an architecture NVRTC does not compile for named as such.
#include "test_util.hpp"

#include "error.hpp"
#include "nvrtc.hpp"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

using namespace dfgnn::test;

namespace {

const std::string kSoname = "libnvrtc.so." + std::to_string(CUDART_VERSION / 1000);

// Sets (or unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

size_t position(const std::vector<std::string>& list, const std::string& item) {
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i] == item) return i;
  ADD_FAILURE() << item << " is not among the candidates";
  return list.size();
}

}  // namespace

TEST(NvrtcLoader, CandidatesFollowTheSearchOrder) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "dfgnn-nvrtc-loader-test";
  std::filesystem::create_directories(dir / "wheel");
  const std::string path_var = dir.string() + "::/explicit/file/libnvrtc.so.99";
  ScopedEnv path("DFGNN_NVRTC_PATH", path_var.c_str());
  ScopedEnv home("CUDA_HOME", "/opt/cuda-home");
  ScopedEnv cuda_path("CUDA_PATH", nullptr);
  ScopedEnv wheel_dirs("DFGNN_NVRTC_WHEEL_DIRS", (dir / "wheel").c_str());
  const std::vector<std::string> c = dfgnn::nvrtc_candidates();
  ASSERT_GE(c.size(), 8u);
  // DFGNN_NVRTC_PATH first, in its order: a directory gets the soname, a file is taken as it is.
  EXPECT_EQ(c[0], (dir / kSoname).string());
  EXPECT_EQ(c[1], "/explicit/file/libnvrtc.so.99");
  EXPECT_EQ(c[2], "/opt/cuda-home/lib64/" + kSoname);
  EXPECT_EQ(c[3], "/opt/cuda-home/lib/" + kSoname);
  EXPECT_EQ(c[4], "/usr/local/cuda/lib64/" + kSoname);
  EXPECT_EQ(c[5], "/usr/local/cuda/lib/" + kSoname);
  // The pip wheel's directories beside this binary come next.
  bool wheel = false;
  for (const std::string& candidate : c) wheel |= candidate.find("/nvidia/cu") != std::string::npos;
  EXPECT_TRUE(wheel);
  // Then the directories the Python package found on sys.path, and the loader's default search.
  EXPECT_EQ(c[c.size() - 2], (dir / "wheel" / kSoname).string());
  EXPECT_EQ(c.back(), kSoname);
  std::filesystem::remove_all(dir);
}

TEST(NvrtcLoader, CudaPathCountsWhenCudaHomeIsUnset) {
  ScopedEnv path("DFGNN_NVRTC_PATH", nullptr);
  ScopedEnv home("CUDA_HOME", nullptr);
  ScopedEnv cuda_path("CUDA_PATH", "/opt/cuda-path");
  const std::vector<std::string> c = dfgnn::nvrtc_candidates();
  ASSERT_GE(c.size(), 2u);
  EXPECT_EQ(c[0], "/opt/cuda-path/lib64/" + kSoname);
  EXPECT_LT(position(c, "/opt/cuda-path/lib/" + kSoname), position(c, "/usr/local/cuda/lib64/" + kSoname));
}

TEST(NvrtcLoader, MissingNvrtcListsWhatWasTried) {
  const std::vector<std::string> tried = {"/nonexistent/dir/" + kSoname, "/etc/hostname", "libnvrtc-no-such.so.0"};
  try {
    dfgnn::find_nvrtc(tried);
    FAIL() << "found an NVRTC among candidates that are not NVRTC";
  } catch (const dfgnn::Error& e) {
    EXPECT_EQ(e.status(), DFGNN_STATUS_NOT_SUPPORTED);
    const std::string message = e.what();
    EXPECT_NE(message.find("NVRTC (" + kSoname + ") was not found"), std::string::npos) << message;
    EXPECT_NE(message.find("/nonexistent/dir/" + kSoname + ": not present"), std::string::npos) << message;
    // A file that is there but no library: dlopen's reason is given.
    EXPECT_NE(message.find("/etc/hostname: "), std::string::npos) << message;
    EXPECT_EQ(message.find("/etc/hostname: not present"), std::string::npos) << message;
    EXPECT_NE(message.find("libnvrtc-no-such.so.0: "), std::string::npos) << message;
    EXPECT_NE(message.find("DFGNN_NVRTC_PATH"), std::string::npos) << message;
  }
}

TEST(NvrtcLoader, FindsTheToolkitOfThisMachine) {
  // This machine builds with the CUDA Toolkit, so the default candidates find its NVRTC.
  const std::string found = dfgnn::find_nvrtc(dfgnn::nvrtc_candidates());
  EXPECT_NE(found.find(kSoname), std::string::npos) << found;
  EXPECT_NE(dfgnn::nvrtc_library().find("libnvrtc.so"), std::string::npos) << dfgnn::nvrtc_library();
  EXPECT_GE(dfgnn::nvrtc_version(), 12000);
}

// A GPU older than NVRTC compiles for (CUDA 13 dropped sm_50..sm_72) fails as NOT_SUPPORTED naming
// the architecture and the range, not as an NVRTC option error.
TEST(NvrtcLoader, ArchitectureOutsideNvrtcsRangeIsNamed) {
  const std::string name = "&dfgnn::does_not_exist<int>";
  for (const auto& [arch, relation] : {std::pair{52, "older than the oldest"}, std::pair{990, "newer than the newest"}}) {
    try {
      dfgnn::compile({name}, arch);
      FAIL() << "compiled for sm_" << arch;
    } catch (const dfgnn::Error& e) {
      EXPECT_EQ(e.status(), DFGNN_STATUS_NOT_SUPPORTED) << e.what();
      const std::string message = e.what();
      EXPECT_NE(message.find("GPU architecture sm_" + std::to_string(arch) + " is " + relation), std::string::npos)
          << message;
      EXPECT_NE(message.find("compiles for (sm_"), std::string::npos) << message;
    }
  }
  // Through the C API, as a GPU's own architecture would arrive.
  auto ctx = make_context();
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 32);
  EXPECT_EQ(dfgnnCompile(ctx.get(), nullptr, &op, DFGNN_FORWARD, "subwarp:lanes=16,groups=8,vec=4", 60),
            DFGNN_STATUS_NOT_SUPPORTED);
  EXPECT_NE(std::string(dfgnnGetLastErrorMessage()).find("sm_60"), std::string::npos) << dfgnnGetLastErrorMessage();
}
