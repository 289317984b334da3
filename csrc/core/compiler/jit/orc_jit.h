// The process's one LLVM ORC JIT. Created on first use (thread-safe) for the host CPU; never
// destroyed, so that no static destructor races kernels still running at exit.
//
// A compiled graph's object file is linked into its own JITDylib, so symbol names repeat freely
// between graphs and the code is freed with the graph (LoadedObject's destructor). Linking and
// removal are serialized on one mutex; calling the returned function pointers is not.
//
// Only built when EMBER_WITH_LLVM is on.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace ember::compiler::jit {

// Initializes LLVM's native target once.
void initialize_llvm();

// Identifies the code this machine's JIT produces: LLVM version, target triple, CPU name and
// features. Part of the compile-cache key, so a cache moved to another CPU misses.
const std::string& host_fingerprint();

class LoadedObject {
  public:
    ~LoadedObject();
    LoadedObject(const LoadedObject&) = delete;
    LoadedObject& operator=(const LoadedObject&) = delete;
    void* symbol(size_t i) const { return symbols_[i]; }

  private:
    friend StatusOr<std::unique_ptr<LoadedObject>> load_object(std::string_view, const std::vector<std::string>&);
    LoadedObject() = default;
    std::vector<void*> symbols_;
    void* dylib_ = nullptr;  // llvm::orc::JITDylib*
};

// Links `object` into a fresh JITDylib and resolves `symbols` (in order). libm and the process's
// own symbols are visible to the object.
StatusOr<std::unique_ptr<LoadedObject>> load_object(std::string_view object,
                                                    const std::vector<std::string>& symbols);

}  // namespace ember::compiler::jit
