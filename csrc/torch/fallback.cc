#include "fallback.h"

#include <ATen/native/CPUFallback.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/library.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "base/env.h"
#include "context.h"
#include "generator.h"

namespace ember::torch_glue {
namespace {

FallbackMode mode_from_env() {
    auto v = env::get("EMBER_FALLBACK");
    if (!v || *v == "warn") return FallbackMode::kWarn;
    if (*v == "silent") return FallbackMode::kSilent;
    if (*v == "error") return FallbackMode::kError;
    TORCH_WARN("ember: EMBER_FALLBACK=", *v, " is not one of warn, silent, error; using warn");
    return FallbackMode::kWarn;
}

std::atomic<FallbackMode>& mode_slot() {
    static std::atomic<FallbackMode> mode{mode_from_env()};
    return mode;
}

struct Registry {
    std::mutex mu;
    std::unordered_map<std::string, FallbackRecord> records;
    std::unordered_set<std::string> warned;  // survives reset: warn once per op per process
};
Registry& registry() {
    static auto* r = new Registry();
    return *r;
}

// Bytes moved by the fallback currently running on this thread.
struct Transfers {
    int64_t to_host = 0;
    int64_t to_device = 0;
};
thread_local Transfers* t_transfers = nullptr;

// Random ops take a Generator argument; an ember generator (or none, meaning the default one)
// cannot drive a CPU kernel. Give the CPU kernel a generator derived from the ember generator's
// (seed, offset) and advance the offset, so ember seeding and RNG state stay meaningful.
void substitute_generators(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                           c10::DeviceIndex device) {
    const auto& args = op.schema().arguments();
    size_t base = stack->size() - args.size();
    for (size_t i = 0; i < args.size(); ++i) {
        auto& iv = (*stack)[base + i];
        bool is_gen_arg = args[i].type()->kind() == c10::TypeKind::OptionalType &&
                          args[i].type()->containedType(0)->kind() == c10::TypeKind::GeneratorType;
        if (!is_gen_arg) continue;
        at::Generator ember_gen = iv.isNone() ? default_generator(device) : iv.toGenerator();
        if (ember_gen.device().type() != c10::DeviceType::PrivateUse1) continue;
        uint64_t seed, offset;
        {
            std::lock_guard<std::mutex> lock(ember_gen.mutex());
            std::tie(seed, offset) = ember_gen.get<EmberGenerator>()->philox_engine_inputs(1 << 20);
        }
        // splitmix64 of (seed, offset): distinct streams for distinct calls.
        uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (offset / 4 + 1);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        iv = c10::IValue(at::make_generator<at::CPUGeneratorImpl>(z));
    }
}

c10::DeviceIndex device_in_stack(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
    size_t n = op.schema().arguments().size();
    for (size_t i = stack.size() - n; i < stack.size(); ++i) {
        const auto& iv = stack[i];
        if (iv.isTensor() && iv.toTensor().device().type() == c10::DeviceType::PrivateUse1) {
            return iv.toTensor().device().index();
        }
        if (iv.isTensorList()) {
            for (const auto& t : iv.toTensorList()) {
                at::Tensor tt = t;
                if (tt.device().type() == c10::DeviceType::PrivateUse1) return tt.device().index();
            }
        }
    }
    return static_cast<c10::DeviceIndex>(runtime::current_device());
}

void ember_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
    const auto& name = op.schema().operator_name();
    std::string op_name = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
    FallbackMode mode = mode_slot().load(std::memory_order_relaxed);
    TORCH_CHECK_NOT_IMPLEMENTED(
        mode != FallbackMode::kError, "ember: operator '", op_name,
        "' has no ember kernel, and EMBER_FALLBACK=error forbids running it on the CPU. Unset "
        "EMBER_FALLBACK (or set it to 'warn' or 'silent') to let it fall back.");
    if (mode == FallbackMode::kWarn) {
        bool first;
        {
            auto& r = registry();
            std::lock_guard<std::mutex> lock(r.mu);
            first = r.warned.insert(op_name).second;
        }
        if (first) {
            TORCH_WARN("ember: operator '", op_name,
                       "' has no ember kernel and runs on the CPU (inputs copied to the host and "
                       "results back). torch_ember.fallback_report() lists every such op; "
                       "EMBER_FALLBACK=silent hides this warning, =error forbids fallback.");
        }
    }
    substitute_generators(op, stack, device_in_stack(op, *stack));
    Transfers transfers;
    Transfers* outer = t_transfers;
    t_transfers = &transfers;
    auto start = std::chrono::steady_clock::now();
    try {
        at::native::cpu_fallback(op, stack, /*error_on_views=*/false);
    } catch (...) {
        t_transfers = outer;
        throw;
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    t_transfers = outer;
    auto& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    FallbackRecord& rec = r.records[op_name];
    rec.op = op_name;
    rec.calls += 1;
    rec.bytes_to_host += transfers.to_host;
    rec.bytes_to_device += transfers.to_device;
    rec.seconds += seconds;
}

}  // namespace

void note_transfer(size_t bytes, bool to_host) {
    if (t_transfers == nullptr) return;
    (to_host ? t_transfers->to_host : t_transfers->to_device) += static_cast<int64_t>(bytes);
}

FallbackMode fallback_mode() { return mode_slot().load(); }
void set_fallback_mode(FallbackMode mode) { mode_slot().store(mode); }

std::vector<FallbackRecord> fallback_records() {
    auto& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    std::vector<FallbackRecord> out;
    out.reserve(r.records.size());
    for (auto& [k, v] : r.records) out.push_back(v);
    return out;
}

void reset_fallback_records() {
    auto& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.records.clear();
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
    m.fallback(torch::CppFunction::makeFromBoxedFunction<&ember_cpu_fallback>());
}

}  // namespace ember::torch_glue
