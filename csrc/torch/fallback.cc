#include "fallback.h"

#include "profiler_bridge.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <atomic>
#include <exception>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "base/env.h"
#include "byte_moves.h"
#include "context.h"
#include "generator.h"
#include "graph_capture.h"

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

thread_local FallbackScope* t_scope = nullptr;

std::string op_name(const c10::FunctionSchema& schema) {
    const auto& n = schema.operator_name();
    return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

bool is_ember(const at::Tensor& t) {
    return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// The device the op runs for, checked as CUDA checks it: every tensor on that one device,
// except 0-dim CPU tensors (wrapped scalars) and CPU index tensors of indexing ops.
c10::Device op_device(const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
                      size_t begin, const std::string& name) {
    std::optional<c10::Device> device;
    std::optional<std::pair<c10::Device, std::string>> foreign;
    const bool indexing = name.rfind("aten::index", 0) == 0 || name.rfind("aten::_index_put", 0) == 0;
    const auto& args = schema.arguments();
    auto visit = [&](const at::Tensor& t, const c10::Argument& arg) {
        if (!t.defined()) return;
        if (is_ember(t)) {
            if (!device) device = t.device();
            else if (t.device() != *device) foreign = {t.device(), arg.name()};
        } else if (!(t.device().is_cpu() && (t.dim() == 0 || (indexing && arg.name() == "indices")) &&
                     !(arg.alias_info() && arg.alias_info()->isWrite()))) {
            // A 0-dim CPU tensor is a scalar operand, as CUDA treats it, but never an output.
            foreign = {t.device(), arg.name()};
        }
    };
    for (size_t i = 0; i < args.size(); ++i) {
        const auto& iv = stack[begin + i];
        if (iv.isTensor()) {
            visit(iv.toTensor(), args[i]);
        } else if (iv.isTensorList()) {
            for (const at::Tensor& t : iv.toTensorVector()) visit(t, args[i]);
        } else if (iv.isOptionalTensorList()) {
            for (const auto& t : iv.toOptionalTensorList()) {
                std::optional<at::Tensor> ot = t;
                if (ot) visit(*ot, args[i]);
            }
        } else if (iv.isDevice() && iv.toDevice().type() == c10::DeviceType::PrivateUse1 && !device) {
            device = iv.toDevice();
        }
    }
    if (!device) device = c10::Device(c10::DeviceType::PrivateUse1,
                                      static_cast<c10::DeviceIndex>(runtime::current_device()));
    if (!device->has_index()) device->set_index(static_cast<c10::DeviceIndex>(runtime::current_device()));
    TORCH_CHECK(!foreign, "Expected all tensors to be on the same device, but found at least two "
                          "devices, ", *device, " and ", foreign->first, "! (when checking argument '",
                foreign->second, "' of ", name, ")");
    return *device;
}

uint64_t derived_seed(at::Generator ember_gen) {
    uint64_t seed, offset;
    {
        std::lock_guard<std::mutex> lock(ember_gen.mutex());
        std::tie(seed, offset) = ember_gen.get<EmberGenerator>()->philox_engine_inputs(1 << 20);
    }
    // splitmix64 of (seed, offset): a distinct CPU stream for every call.
    uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (offset / 4 + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// Random ops draw from ember's generator: a Generator argument (or none, meaning the device's
// default) becomes a CPU generator seeded from the ember generator's (seed, offset), whose
// offset then advances. Seeded ops without a Generator argument (native_dropout) get the same
// through the CPU default generator, restored afterwards.
struct RngRedirect {
    std::optional<at::Tensor> saved_cpu_state;

    RngRedirect(const c10::OperatorHandle& op, torch::jit::Stack& stack, size_t begin, c10::Device device) {
        const auto& args = op.schema().arguments();
        bool has_generator_arg = false;
        for (size_t i = 0; i < args.size(); ++i) {
            const auto& type = args[i].type();
            bool is_gen = type->kind() == c10::TypeKind::OptionalType &&
                          type->containedType(0)->kind() == c10::TypeKind::GeneratorType;
            if (!is_gen) continue;
            has_generator_arg = true;
            auto& iv = stack[begin + i];
            at::Generator gen = iv.isNone() ? default_generator(device.index()) : iv.toGenerator();
            TORCH_CHECK(gen.device().type() == c10::DeviceType::PrivateUse1,
                        "Expected a 'ember' device type for generator but found '", gen.device().type(), "'");
            iv = c10::IValue(at::make_generator<at::CPUGeneratorImpl>(derived_seed(gen)));
        }
        if (!has_generator_arg && op.hasTag(at::Tag::nondeterministic_seeded)) {
            at::Generator cpu = at::detail::getDefaultCPUGenerator();
            std::lock_guard<std::mutex> lock(cpu.mutex());
            saved_cpu_state = at::Tensor(cpu.get_state());
            cpu.set_current_seed(derived_seed(default_generator(device.index())));
        }
    }
    ~RngRedirect() {
        if (!saved_cpu_state) return;
        at::Generator cpu = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(cpu.mutex());
        cpu.set_state(*saved_cpu_state);
    }
};

// `t` on `device` with exactly its sizes and strides. A plain .to() keeps the strides of a dense
// tensor but makes a tensor with gaps (x[:, ::2]) contiguous, and some kernels' results mean
// something else in another layout: linalg_det's LU factors, which its backward reads with the
// input's strides. So the memory span the view covers is copied whole and viewed the same way.
at::Tensor same_strides_on(const at::Tensor& t, c10::Device device) {
    if (t.numel() == 0 || t.is_non_overlapping_and_dense()) return t.to(device);
    int64_t span = 1;
    for (int64_t d = 0; d < t.dim(); ++d) span += (t.size(d) - 1) * t.stride(d);
    at::Tensor flat = t.as_strided({span}, {1}, t.storage_offset()).to(device);
    return flat.as_strided(t.sizes(), t.strides(), 0);
}

at::Tensor to_cpu(const at::Tensor& t) { return same_strides_on(t, c10::Device(c10::kCPU)); }

// A CPU tensor over the same device memory, with the same sizes, strides and conj/neg bits: the
// host executor's device memory is host memory, so a library routine can read it in place. Read
// only, so a copy-on-write input stays unmaterialized.
at::Tensor host_alias(const at::Tensor& t) {
    auto options = t.options().device(c10::kCPU);
    at::Tensor a = t.numel() == 0 ? at::empty_strided(t.sizes(), t.strides(), options)
                                  : at::from_blob(const_cast<void*>(t.const_data_ptr()), t.sizes(), t.strides(), options);
    a._set_conj(t.is_conj());
    a._set_neg(t.is_neg());
    return a;
}

// Replaces ember tensors in the argument at `iv` by CPU copies (lists element-wise), or with
// `alias` by host aliases of their memory.
void move_arg_to_cpu(c10::IValue& iv, bool alias = false) {
    auto host = [alias](const at::Tensor& t) { return alias ? host_alias(t) : to_cpu(t); };
    if (iv.isTensor()) {
        const at::Tensor& t = iv.toTensor();
        if (is_ember(t)) iv = c10::IValue(host(t));
    } else if (iv.isTensorList()) {
        std::vector<at::Tensor> ts = iv.toTensorVector();
        for (auto& t : ts) if (is_ember(t)) t = host(t);
        iv = c10::IValue(c10::List<at::Tensor>(ts));
    } else if (iv.isOptionalTensorList()) {
        c10::List<std::optional<at::Tensor>> out;
        for (const auto& t : iv.toOptionalTensorList()) {
            std::optional<at::Tensor> ot = t;
            out.push_back(ot && is_ember(*ot) ? std::make_optional(host(*ot)) : ot);
        }
        iv = c10::IValue(out);
    } else if (iv.isDevice() && iv.toDevice().type() == c10::DeviceType::PrivateUse1) {
        iv = c10::IValue(c10::Device(c10::kCPU));
    }
}

// Ops that write into arguments their schema does not mark as written: native_batch_norm
// updates running_mean and running_var (arguments 3 and 4) in training mode.
bool mutates_undeclared(const std::string& name, size_t arg) {
    return name == "aten::native_batch_norm" && (arg == 3 || arg == 4);
}

// Writes the CPU result of a mutated argument back into the original device tensor(s).
void copy_back(const c10::IValue& original, const c10::IValue& cpu) {
    auto one = [](const at::Tensor& dst, const at::Tensor& src) {
        if (!dst.defined() || !is_ember(dst)) return;
        at::_copy_from_and_resize(src, dst);
    };
    if (original.isTensor()) {
        one(original.toTensor(), cpu.toTensor());
    } else if (original.isTensorList()) {
        auto dst = original.toTensorVector();
        auto src = cpu.toTensorVector();
        for (size_t k = 0; k < dst.size(); ++k) one(dst[k], src[k]);
    }
}

// The shared body of the fallback and of library ops: arguments to the host (copies, or for a
// library op aliases of the inputs), the CPU kernel, results back to the device.
void run_on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack, bool library) {
    const auto& schema = op.schema();
    const std::string name = op_name(schema);
    std::optional<FallbackScope> scope;
    if (!library) scope.emplace(name);
    const auto& args = schema.arguments();
    const size_t begin = stack->size() - args.size();
    const c10::Device device = op_device(schema, *stack, begin, name);
    c10::DeviceGuard guard(device);
    if (!library && device.is_privateuseone() && any_capture()) {
        // Refused here, naming the op, before its copies to the host wait on the device (which a
        // capture refuses with a message that cannot say which op asked).
        check_not_capturing(device.index(), ("'" + name + "'").c_str(),
                            "it has no ember kernel and runs on the CPU fallback, which waits for the device");
    }
    std::optional<RngRedirect> rng;
    if (!library) rng.emplace(op, *stack, begin, device);
    if (library) synchronize(device_for(device.index()).current_stream());

    std::vector<c10::IValue> originals(stack->begin() + begin, stack->end());
    auto written = [&](size_t i) {
        return (args[i].alias_info() && args[i].alias_info()->isWrite()) || mutates_undeclared(name, i);
    };
    // Written arguments are CPU copies (the kernel may resize them), copied back afterwards.
    for (size_t i = 0; i < args.size(); ++i) {
        move_arg_to_cpu((*stack)[begin + i], library && !written(i));
    }
    std::vector<std::pair<size_t, c10::IValue>> mutated;
    for (size_t i = 0; i < args.size(); ++i) {
        if (written(i)) mutated.emplace_back(i, (*stack)[begin + i]);
    }

    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);

    for (const auto& [i, cpu] : mutated) copy_back(originals[i], cpu);
    const auto& rets = schema.returns();
    const size_t rbegin = stack->size() - rets.size();
    for (size_t j = 0; j < rets.size(); ++j) {
        auto& iv = (*stack)[rbegin + j];
        const auto* alias = rets[j].alias_info();
        if (alias && alias->isWrite()) {
            // In-place and out= results are the caller's own tensors.
            for (size_t i = 0; i < args.size(); ++i) {
                const auto* a = args[i].alias_info();
                if (a && a->isWrite() && a->beforeSets() == alias->beforeSets()) {
                    iv = originals[i];
                    break;
                }
            }
        } else if (iv.isTensor()) {
            const at::Tensor& t = iv.toTensor();
            if (t.defined() && t.device().is_cpu()) iv = c10::IValue(same_strides_on(t, device));
        } else if (iv.isTensorList()) {
            std::vector<at::Tensor> ts = iv.toTensorVector();
            for (auto& t : ts) if (t.defined() && t.device().is_cpu()) t = same_strides_on(t, device);
            iv = c10::IValue(c10::List<at::Tensor>(ts));
        }
    }
}

}  // namespace

void ember_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
    if (run_moves_as_bits(op, stack)) return;  // a float8/complex64 element move: no host round trip
    run_on_host(op, stack, false);
}

void ember_library_call(const c10::OperatorHandle& op, torch::jit::Stack* stack) { run_on_host(op, stack, true); }

FallbackScope::FallbackScope(std::string op)
    : op_(std::move(op)), outer_(t_scope), uncaught_(std::uncaught_exceptions()),
      start_(std::chrono::steady_clock::now()) {
    FallbackMode mode = mode_slot().load(std::memory_order_relaxed);
    TORCH_CHECK_NOT_IMPLEMENTED(
        mode != FallbackMode::kError, "ember: operator '", op_,
        "' has no ember kernel, and EMBER_FALLBACK=error forbids running it on the CPU. Unset "
        "EMBER_FALLBACK (or set it to 'warn' or 'silent') to let it fall back.");
    t_scope = this;
}

FallbackScope::~FallbackScope() {
    t_scope = outer_;
    if (std::uncaught_exceptions() > uncaught_) return;  // the op failed: nothing ran
    auto elapsed = std::chrono::steady_clock::now() - start_;
    double seconds = std::chrono::duration<double>(elapsed).count();
    if (profiler::Tracer* t = tracer()) {
        t->fallback(op_, static_cast<uint64_t>(to_host_), static_cast<uint64_t>(to_device_),
                    std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
    }
    auto& r = registry();
    bool first_warning = false;
    {
        std::lock_guard<std::mutex> lock(r.mu);
        FallbackRecord& rec = r.records[op_];
        rec.op = op_;
        rec.calls += 1;
        rec.bytes_to_host += to_host_;
        rec.bytes_to_device += to_device_;
        rec.seconds += seconds;
        if (mode_slot().load(std::memory_order_relaxed) == FallbackMode::kWarn)
            first_warning = r.warned.insert(op_).second;
    }
    // Warned only once the op has run: a call the CPU kernel refuses (wrong device mix, bad
    // shapes) raises its own error, and a warning about falling back would mislead.
    if (first_warning) {
        TORCH_WARN("ember: operator '", op_,
                   "' has no ember kernel and runs on the CPU (inputs copied to the host and "
                   "results back). torch_ember.fallback_report() lists every such op; "
                   "EMBER_FALLBACK=silent hides this warning, =error forbids fallback.");
    }
}

void FallbackScope::add_transfer(size_t bytes, bool to_host) {
    (to_host ? to_host_ : to_device_) += static_cast<int64_t>(bytes);
}

void note_transfer(size_t bytes, bool to_host) {
    if (t_scope != nullptr) t_scope->add_transfer(bytes, to_host);
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
