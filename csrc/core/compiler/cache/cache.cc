#include "compiler/cache/cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "compiler/cache/sha256.h"

namespace ember::compiler {
namespace {

constexpr char kMagic[8] = {'E', 'M', 'B', 'R', 'C', 'A', 'C', 'H'};
constexpr uint32_t kFormat = 1;
constexpr const char* kSuffix = ".ember";
constexpr const char* kTmpPrefix = ".tmp-";

struct Header {
    char magic[8];
    uint32_t format;
    uint32_t reserved;
    uint64_t plan_bytes;
    uint64_t object_bytes;
    uint8_t checksum[32];
};

std::array<uint8_t, 32> payload_sum(const std::string& plan, const std::string& object) {
    Sha256 h;
    h.update(plan);
    h.update(object);
    return h.digest();
}

bool read_file(const std::string& path, std::string* out) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat st;
    if (::fstat(fd, &st) != 0) {
        ::close(fd);
        return false;
    }
    out->resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < out->size()) {
        ssize_t n = ::read(fd, out->data() + done, out->size() - done);
        if (n <= 0) break;
        done += static_cast<size_t>(n);
    }
    ::close(fd);
    out->resize(done);
    return true;
}

Status write_all(int fd, const char* p, size_t n) {
    while (n > 0) {
        ssize_t w = ::write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return internal_error(std::string("compile cache: write failed: ") + std::strerror(errno));
        }
        p += w;
        n -= static_cast<size_t>(w);
    }
    return {};
}

}  // namespace

std::string CompileCache::entry_path(const std::string& key) const { return dir_ + "/" + key + kSuffix; }

CompileCache::Lookup CompileCache::load(const std::string& key, Entry* out, std::string* why) const {
    std::string bytes;
    if (!read_file(entry_path(key), &bytes)) return Lookup::kMiss;
    auto corrupt = [&](const char* reason) {
        if (why) *why = reason;
        return Lookup::kCorrupt;
    };
    Header h;
    if (bytes.size() < sizeof(Header)) return corrupt("shorter than its header");
    std::memcpy(&h, bytes.data(), sizeof(Header));
    if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) return corrupt("bad magic");
    if (h.format != kFormat) return corrupt("unknown format version");
    if (h.plan_bytes > bytes.size() || h.object_bytes > bytes.size() ||
        sizeof(Header) + h.plan_bytes + h.object_bytes != bytes.size())
        return corrupt("truncated or padded");
    out->plan = bytes.substr(sizeof(Header), h.plan_bytes);
    out->object = bytes.substr(sizeof(Header) + h.plan_bytes, h.object_bytes);
    if (payload_sum(out->plan, out->object) != std::to_array(h.checksum)) return corrupt("checksum mismatch");
    return Lookup::kHit;
}

Status CompileCache::store(const std::string& key, const Entry& entry) const {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) return internal_error("compile cache: cannot create " + dir_ + ": " + ec.message());
    Header h{};
    std::memcpy(h.magic, kMagic, sizeof(kMagic));
    h.format = kFormat;
    h.plan_bytes = entry.plan.size();
    h.object_bytes = entry.object.size();
    const auto sum = payload_sum(entry.plan, entry.object);
    std::memcpy(h.checksum, sum.data(), sum.size());

    static std::atomic<uint64_t> counter{0};
    const std::string tmp = dir_ + "/" + kTmpPrefix + key + "-" + std::to_string(::getpid()) + "-" +
                            std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id())) + "-" +
                            std::to_string(counter++);
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return internal_error("compile cache: cannot create " + tmp + ": " + std::strerror(errno));
    Status st = write_all(fd, reinterpret_cast<const char*>(&h), sizeof(h));
    if (st.ok()) st = write_all(fd, entry.plan.data(), entry.plan.size());
    if (st.ok()) st = write_all(fd, entry.object.data(), entry.object.size());
    ::close(fd);
    if (st.ok() && ::rename(tmp.c_str(), entry_path(key).c_str()) != 0)
        st = internal_error("compile cache: rename failed: " + std::string(std::strerror(errno)));
    if (!st.ok()) ::unlink(tmp.c_str());
    return st;
}

StatusOr<CompileCache::Info> CompileCache::info() const {
    Info info;
    std::error_code ec;
    if (!std::filesystem::exists(dir_, ec)) return info;
    for (auto it = std::filesystem::directory_iterator(dir_, ec); !ec && it != std::filesystem::directory_iterator();
         it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.size() <= std::strlen(kSuffix) || name.rfind(kTmpPrefix, 0) == 0 ||
            name.compare(name.size() - std::strlen(kSuffix), std::string::npos, kSuffix) != 0)
            continue;
        std::error_code sec;
        const auto size = it->file_size(sec);
        if (sec) continue;
        ++info.entries;
        info.bytes += static_cast<int64_t>(size);
    }
    if (ec) return internal_error("compile cache: cannot list " + dir_ + ": " + ec.message());
    return info;
}

Status CompileCache::clear() const {
    std::error_code ec;
    if (!std::filesystem::exists(dir_, ec)) return {};
    for (auto it = std::filesystem::directory_iterator(dir_, ec); !ec && it != std::filesystem::directory_iterator();
         it.increment(ec)) {
        const std::string name = it->path().filename().string();
        const bool entry = name.size() > std::strlen(kSuffix) &&
                           name.compare(name.size() - std::strlen(kSuffix), std::string::npos, kSuffix) == 0;
        if (entry || name.rfind(kTmpPrefix, 0) == 0) {
            std::error_code rec;
            std::filesystem::remove(it->path(), rec);
        }
    }
    if (ec) return internal_error("compile cache: cannot list " + dir_ + ": " + ec.message());
    return {};
}

}  // namespace ember::compiler
