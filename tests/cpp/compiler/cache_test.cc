// The persistent compile cache: hits, corruption recovery, concurrent writers (threads and
// processes).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "compiler/cache/sha256.h"
#include "compiler_test_util.h"

namespace ember::compiler::test {
namespace {

class CompilerCache : public ::testing::Test {
  protected:
    void SetUp() override {
        EMBER_REQUIRE_LLVM();
        dir_ = std::filesystem::temp_directory_path() /
               ("ember_cache_test_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        std::filesystem::remove_all(dir_);
        opts_.cache_dir = dir_.string();
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }

    // A small transformer-ish block: layer norm statistics, gelu, softmax.
    static Graph block() {
        Graph g;
        const int x = g.input(DType::kFloat32, {64, 128});
        const int mu = g.reduce(Op::kMean, x, {-1}, true);
        const int xc = g.add(Op::kSub, {x, mu});
        const int var = g.reduce(Op::kMean, g.add(Op::kMul, {xc, xc}), {-1}, true);
        const int y = g.add(Op::kMul, {xc, g.add(Op::kRsqrt, {g.add(Op::kAdd, {var, g.scalar(1e-5)})})});
        Attrs a;
        a.ints = {-1};
        g.mark_output(g.add(Op::kSoftmax, {g.add(Op::kGelu, {y})}, a));
        return g;
    }

    std::vector<float> run(const Executable& exe) {
        auto xs = random_floats(64 * 128, -2, 2, 42);
        std::vector<float> out(64 * 128);
        void* in[] = {xs.data()};
        void* o[] = {out.data()};
        EXPECT_TRUE(exe.run(in, o, nullptr).ok());
        return out;
    }

    std::filesystem::path dir_;
    CompileOptions opts_;
};

TEST(CompilerSha256, KnownVectors) {
    auto h = sha256("abc");
    EXPECT_EQ(to_hex(h.data(), h.size()), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    h = sha256(std::string(1000, 'a'));
    EXPECT_EQ(to_hex(h.data(), h.size()), "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
}

TEST_F(CompilerCache, SecondCompileHitsAndMatches) {
    Graph g = block();
    CompileStats cold, warm;
    auto a = compile_ok(g, &cold, opts_);
    auto b = compile_ok(g, &warm, opts_);
    ASSERT_TRUE(a && b);
    std::printf("[ compile ] cold: %s\n[ compile ] warm: %s\n", cold.to_string().c_str(), warm.to_string().c_str());
    EXPECT_FALSE(cold.cache_hit);
    EXPECT_TRUE(warm.cache_hit);
    EXPECT_LT(warm.total_ms, cold.total_ms);
    EXPECT_EQ(warm.kernels, cold.kernels);
    EXPECT_EQ(run(*a), run(*b));
    auto info = CompileCache(opts_.cache_dir).info();
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->entries, 1);
    EXPECT_GT(info->bytes, 0);
    EXPECT_TRUE(CompileCache(opts_.cache_dir).clear().ok());
    EXPECT_EQ(CompileCache(opts_.cache_dir).info()->entries, 0);
    opts_.use_cache = false;
    CompileStats off;
    compile_ok(g, &off, opts_);
    EXPECT_FALSE(off.cache_hit);
    EXPECT_EQ(CompileCache(opts_.cache_dir).info()->entries, 0);
}

TEST_F(CompilerCache, TruncatedEntryIsDetectedAndReplaced) {
    Graph g = block();
    CompileStats s1, s2, s3;
    auto a = compile_ok(g, &s1, opts_);
    const std::string path = CompileCache(opts_.cache_dir).entry_path(s1.cache_key);
    const auto size = std::filesystem::file_size(path);
    std::filesystem::resize_file(path, size / 2);
    auto b = compile_ok(g, &s2, opts_);
    EXPECT_FALSE(s2.cache_hit);
    EXPECT_TRUE(s2.cache_corrupt);
    EXPECT_NE(s2.warning.find("corrupt"), std::string::npos);
    auto c = compile_ok(g, &s3, opts_);
    EXPECT_TRUE(s3.cache_hit);
    EXPECT_EQ(run(*a), run(*c));
    // A flipped payload byte fails the checksum.
    {
        std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(path) - 10));
        f.put('\x5a');
    }
    CompileStats s4;
    compile_ok(g, &s4, opts_);
    EXPECT_TRUE(s4.cache_corrupt);
}

TEST_F(CompilerCache, ConcurrentThreadsAndProcesses) {
    Graph g = block();
    // Two processes first (before this process starts threads of its own).
    pid_t kids[2];
    for (pid_t& pid : kids) {
        pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            auto exe = compile(g, opts_, nullptr);
            ::_exit(exe.ok() ? 0 : 1);
        }
    }
    for (pid_t pid : kids) {
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    CompileStats after_fork;
    auto ref = compile_ok(g, &after_fork, opts_);
    EXPECT_TRUE(after_fork.cache_hit);
    CompileCache(opts_.cache_dir).clear().ok();

    std::vector<std::shared_ptr<const Executable>> exes(4);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < exes.size(); ++i)
        threads.emplace_back([&, i] {
            auto e = compile(g, opts_, nullptr);
            if (e.ok()) exes[i] = e.value();
        });
    for (auto& t : threads) t.join();
    const auto want = run(*ref);
    for (auto& e : exes) {
        ASSERT_TRUE(e);
        EXPECT_EQ(run(*e), want);
    }
    EXPECT_EQ(CompileCache(opts_.cache_dir).info()->entries, 1);
    for (const auto& entry : std::filesystem::directory_iterator(dir_))
        EXPECT_EQ(entry.path().filename().string().rfind(".tmp-", 0), std::string::npos) << entry.path();
}

}  // namespace
}  // namespace ember::compiler::test
