#include "compiler/jit/orc_jit.h"

#include <algorithm>
#include <mutex>

#include "compiler/codegen/llvm_headers.h"

namespace ember::compiler::jit {
namespace {

struct Jit {
    std::unique_ptr<llvm::orc::LLJIT> lljit;
    std::string error;
    std::mutex mu;  // dylib creation, linking, removal
    uint64_t next_id = 0;
};

Jit& the_jit() {
    // Leaked on purpose: destroying the JIT at exit could free code other threads still run.
    static Jit* jit = [] {
        auto* j = new Jit;
        initialize_llvm();
        auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
        if (!jtmb) {
            j->error = llvm::toString(jtmb.takeError());
            return j;
        }
        auto built = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(*jtmb)).create();
        if (!built) j->error = llvm::toString(built.takeError());
        else j->lljit = std::move(*built);
        return j;
    }();
    return *jit;
}

}  // namespace

void initialize_llvm() {
    static std::once_flag once;
    std::call_once(once, [] {
        llvm::InitializeNativeTarget();
        llvm::InitializeNativeTargetAsmPrinter();
        llvm::InitializeNativeTargetAsmParser();
    });
}

const std::string& host_fingerprint() {
    static const std::string fp = [] {
        std::string s = "llvm " LLVM_VERSION_STRING "; ";
        s += llvm::sys::getProcessTriple();
        s += "; cpu=" + llvm::sys::getHostCPUName().str() + ";";
        std::vector<std::string> on;
        for (auto& f : llvm::sys::getHostCPUFeatures())
            if (f.getValue()) on.push_back(f.getKey().str());
        std::sort(on.begin(), on.end());
        for (auto& f : on) s += " +" + f;
        return s;
    }();
    return fp;
}

LoadedObject::~LoadedObject() {
    if (!dylib_) return;
    Jit& j = the_jit();
    std::lock_guard<std::mutex> lock(j.mu);
    auto* jd = static_cast<llvm::orc::JITDylib*>(dylib_);
    llvm::consumeError(j.lljit->getExecutionSession().removeJITDylib(*jd));
}

StatusOr<std::unique_ptr<LoadedObject>> load_object(std::string_view object, const std::vector<std::string>& symbols) {
    Jit& j = the_jit();
    if (!j.lljit) return internal_error("llvm: cannot create the ORC JIT: " + j.error);
    std::lock_guard<std::mutex> lock(j.mu);
    const std::string name = "ember_graph_" + std::to_string(j.next_id++);
    auto jd = j.lljit->createJITDylib(name);
    if (!jd) return internal_error("llvm: " + llvm::toString(jd.takeError()));
    auto fail = [&](std::string msg) -> Status {
        llvm::consumeError(j.lljit->getExecutionSession().removeJITDylib(*jd));
        return internal_error(std::move(msg));
    };
    auto buffer = llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(object.data(), object.size()), name);
    if (auto err = j.lljit->addObjectFile(*jd, std::move(buffer)))
        return fail("llvm: cannot add object: " + llvm::toString(std::move(err)));
    std::vector<void*> addrs;
    for (const std::string& s : symbols) {
        auto addr = j.lljit->lookup(*jd, s);
        if (!addr) return fail("llvm: cannot link kernel " + s + ": " + llvm::toString(addr.takeError()));
        addrs.push_back(addr->toPtr<void*>());
    }
    std::unique_ptr<LoadedObject> loaded(new LoadedObject);
    loaded->dylib_ = &*jd;
    loaded->symbols_ = std::move(addrs);
    return loaded;
}

}  // namespace ember::compiler::jit
