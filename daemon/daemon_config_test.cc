#include "daemon/daemon_config.h"

#include <gtest/gtest.h>

namespace collectived::daemon {
namespace {

TEST(DaemonConfigTest, EverySpellingParsesToItsEnum) {
  DaemonConfig cfg;
  ConfigChoices in;
  in.backend = "cuda";
  in.gpu_gather_path = "copy-engine";
  in.gpu_reduce_path = "fused";
  in.gpu_memory_export = "legacy-ipc";
  ASSERT_TRUE(ParseConfigChoices(in, &cfg).ok());
  EXPECT_EQ(cfg.backend, Backend::kCuda);
  EXPECT_EQ(cfg.gpu_gather_path, GpuPath::kCopyEngine);
  EXPECT_EQ(cfg.gpu_reduce_path, GpuPath::kFused);
  EXPECT_EQ(cfg.gpu_memory_export, GpuMemoryExport::kLegacyIpc);
  in = ConfigChoices{};
  in.backend = "host";
  in.gpu_reduce_path = "copy-engine";
  in.gpu_memory_export = "cumem";
  ASSERT_TRUE(ParseConfigChoices(in, &cfg).ok());
  EXPECT_EQ(cfg.backend, Backend::kHost);
  EXPECT_EQ(cfg.gpu_gather_path, GpuPath::kFused);
  EXPECT_EQ(cfg.gpu_reduce_path, GpuPath::kCopyEngine);
  EXPECT_EQ(cfg.gpu_memory_export, GpuMemoryExport::kCuMem);
}

TEST(DaemonConfigTest, DefaultChoicesMatchTheDefaultConfig) {
  DaemonConfig parsed;
  parsed.backend = Backend::kCuda;  // overwritten by the default "auto"
  ASSERT_TRUE(ParseConfigChoices(ConfigChoices{}, &parsed).ok());
  const DaemonConfig defaults;
  EXPECT_EQ(parsed.backend, defaults.backend);
  EXPECT_EQ(parsed.gpu_gather_path, defaults.gpu_gather_path);
  EXPECT_EQ(parsed.gpu_reduce_path, defaults.gpu_reduce_path);
  EXPECT_EQ(parsed.gpu_memory_export, defaults.gpu_memory_export);
}

TEST(DaemonConfigTest, ABadValueIsRefusedNamingTheFlagAndLeavesTheConfigAlone) {
  struct Case {
    const char* flag;
    std::string ConfigChoices::*field;
    const char* message;
  };
  for (const Case& c : {Case{"--backend", &ConfigChoices::backend, "--backend must be auto, host or cuda, got 'rocm'"},
                        Case{"--gpu-gather-path", &ConfigChoices::gpu_gather_path,
                             "--gpu-gather-path must be fused or copy-engine, got 'rocm'"},
                        Case{"--gpu-reduce-path", &ConfigChoices::gpu_reduce_path,
                             "--gpu-reduce-path must be fused or copy-engine, got 'rocm'"},
                        Case{"--gpu-memory-export", &ConfigChoices::gpu_memory_export,
                             "--gpu-memory-export must be auto, cumem or legacy-ipc, got 'rocm'"}}) {
    ConfigChoices in;
    in.backend = "cuda";  // valid, and parsed before any bad one: must not stick
    in.*c.field = "rocm";
    DaemonConfig cfg;
    Status s = ParseConfigChoices(in, &cfg);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.flag;
    EXPECT_EQ(s.message(), c.message);
    EXPECT_EQ(cfg.backend, Backend::kAuto) << c.flag;
  }
}

TEST(DaemonConfigTest, ChoicesAndNamesRoundTrip) {
  EXPECT_EQ(BackendChoices(), (std::vector<std::string>{"auto", "host", "cuda"}));
  EXPECT_EQ(GpuPathChoices(), (std::vector<std::string>{"fused", "copy-engine"}));
  EXPECT_EQ(GpuMemoryExportChoices(), (std::vector<std::string>{"auto", "cumem", "legacy-ipc"}));
  EXPECT_STREQ(BackendName(Backend::kHost), "host");
  EXPECT_STREQ(BackendName(Backend::kCuda), "cuda");
  EXPECT_STREQ(BackendName(Backend::kAuto), "auto");
}

}  // namespace
}  // namespace collectived::daemon
