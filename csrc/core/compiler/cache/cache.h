// CompileCache: compiled graphs on disk, shared by every process that points at the directory.
//
// An entry is one file, `<key>.ember`, holding a header (magic, format version, payload sizes and
// a SHA-256 of the payload) followed by the serialized runtime plan and the object file. The key
// (see compile()) is the SHA-256 of the graph, the compiler version and the host fingerprint
// (LLVM version, CPU name and features), so entries never cross machines with different code.
//
// Concurrency: store() writes a private temporary file in the same directory and renames it
// over the entry, which POSIX makes atomic: a reader sees the old file, the new file or none,
// never a partial one. Two processes storing the same key both succeed; the last rename wins and
// both wrote identical bytes. load() verifies sizes and the checksum, so a truncated or corrupt
// file (a full disk, a crash of a tool that bypassed rename, bit rot) reports kCorrupt and the
// caller recompiles and stores a fresh entry over it.
//
// Thread-safety: all methods are safe to call concurrently; the object holds only the path.
// Errors: I/O failures are Status values; nothing throws.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace ember::compiler {

class CompileCache {
  public:
    explicit CompileCache(std::string dir) : dir_(std::move(dir)) {}

    struct Entry {
        std::string plan;
        std::string object;
    };
    enum class Lookup { kHit, kMiss, kCorrupt };

    // kCorrupt sets *why (e.g. "checksum mismatch").
    Lookup load(const std::string& key, Entry* out, std::string* why) const;
    Status store(const std::string& key, const Entry& entry) const;

    struct Info {
        int64_t entries = 0;
        int64_t bytes = 0;
    };
    StatusOr<Info> info() const;
    // Removes every entry and leftover temporary file (not the directory).
    Status clear() const;

    std::string entry_path(const std::string& key) const;
    const std::string& dir() const { return dir_; }

  private:
    std::string dir_;
};

}  // namespace ember::compiler
