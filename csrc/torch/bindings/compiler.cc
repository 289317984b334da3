// torch_ember._C's compiler part: a Graph builder for the Python frontend (FX -> Ember IR),
// compile() with the persistent cache, and running an Executable on the current stream as one
// unit of device work. Part of the binding layer; module.cc calls bind_compiler().
#include <torch/csrc/Dtype.h>
#include <torch/csrc/utils/pybind.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "../check.h"
#include "../context.h"
#include "../profiler_bridge.h"
#include "compiler/compiler.h"

namespace py = pybind11;

namespace ember::torch_glue {
namespace {

using compiler::Op;

// Compiled code converts float8 where it loads and stores it (eager kernels have no float8).
kernels::DType ir_dtype(c10::ScalarType t) {
    if (t == at::kFloat8_e4m3fn) return kernels::DType::kFloat8E4M3FN;
    if (t == at::kFloat8_e5m2) return kernels::DType::kFloat8E5M2;
    return to_dtype(t);
}

kernels::DType dtype_of(const py::handle& obj) {
    if (!THPDtype_Check(obj.ptr())) throw py::type_error("expected a torch.dtype");
    return ir_dtype(reinterpret_cast<THPDtype*>(obj.ptr())->scalar_type);
}

py::object torch_dtype(kernels::DType t) {
    static const std::map<kernels::DType, const char*> names = {
        {kernels::DType::kBool, "bool"},       {kernels::DType::kUInt8, "uint8"},
        {kernels::DType::kInt8, "int8"},       {kernels::DType::kInt16, "int16"},
        {kernels::DType::kInt32, "int32"},     {kernels::DType::kInt64, "int64"},
        {kernels::DType::kFloat16, "float16"}, {kernels::DType::kBFloat16, "bfloat16"},
        {kernels::DType::kFloat32, "float32"}, {kernels::DType::kFloat64, "float64"},
        {kernels::DType::kFloat8E4M3FN, "float8_e4m3fn"}, {kernels::DType::kFloat8E5M2, "float8_e5m2"},
        {kernels::DType::kComplex64, "complex64"},     {kernels::DType::kComplex128, "complex128"}};
    return py::module_::import("torch").attr(names.at(t));
}

const std::map<std::string, Op>& ops_by_name() {
    static const std::map<std::string, Op> m = [] {
        std::map<std::string, Op> out;
#define EMBER_OP(e, name, kind, lowering) out[name] = Op::k##e;
#include "compiler/ir/ops.def"
#undef EMBER_OP
        return out;
    }();
    return m;
}

Op op_of(const std::string& name) {
    auto it = ops_by_name().find(name);
    if (it == ops_by_name().end()) throw py::value_error("ember compiler has no op named '" + name + "'");
    return it->second;
}

// Kernel names given to the stream must outlive every task queued under them.
const char* intern(const std::string& s) {
    static std::mutex mu;
    static auto* names = new std::set<std::string>();
    std::lock_guard<std::mutex> lock(mu);
    return names->insert(s).first->c_str();
}

py::dict stats_dict(const compiler::CompileStats& s) {
    py::dict d;
    d["verify_ms"] = s.verify_ms;
    d["lower_ms"] = s.lower_ms;
    d["optimize_ms"] = s.optimize_ms;
    d["codegen_ms"] = s.codegen_ms;
    d["jit_ms"] = s.jit_ms;
    d["load_ms"] = s.load_ms;
    d["total_ms"] = s.total_ms;
    d["nodes"] = s.nodes;
    d["nodes_fused"] = s.nodes_fused;
    d["kernels"] = s.kernels;
    d["library_calls"] = s.library_calls;
    d["cache_hit"] = s.cache_hit;
    d["cache_corrupt"] = s.cache_corrupt;
    d["cache_key"] = s.cache_key;
    d["warning"] = s.warning;
    d["scratch_bytes"] = s.scratch_bytes;
    return d;
}

struct CompiledGraph {
    std::shared_ptr<const compiler::Executable> exe;
    const char* name = "ember_graph";
};

// Queues the whole graph on the current stream of the inputs' device. Only raw pointers travel
// with the task: the caching allocator keeps every block valid for work already queued on its
// stream, so the tensors may be released as soon as this returns.
void run_graph(const CompiledGraph& g, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) {
    const compiler::Executable& exe = *g.exe;
    TORCH_CHECK(static_cast<int>(inputs.size()) == exe.num_inputs(), "ember compiled graph: expected ",
                exe.num_inputs(), " inputs, got ", inputs.size());
    TORCH_CHECK(static_cast<int>(outputs.size()) == exe.num_outputs(), "ember compiled graph: expected ",
                exe.num_outputs(), " outputs, got ", outputs.size());
    std::optional<c10::Device> device;
    for (const at::Tensor& t : inputs) {
        if (t.defined() && t.is_privateuseone()) device = t.device();
    }
    for (const at::Tensor& t : outputs) {
        if (!device && t.defined() && t.is_privateuseone()) device = t.device();
    }
    TORCH_CHECK(device.has_value(), "ember compiled graph: no input or output is on an ember device");
    std::vector<void*> in(inputs.size()), out(outputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
        const at::Tensor& t = inputs[i];
        TORCH_CHECK(t.defined() && t.device() == *device, "ember compiled graph: input ", i, " is on ", t.device(),
                    ", expected ", *device);
        // Generated code reads memory: a lazy negation or conjugation bit would be lost.
        TORCH_CHECK(!t.is_neg() && !t.is_conj(), "ember compiled graph: input ", i,
                    " is a lazily negated or conjugated view; resolve it first (resolve_neg/resolve_conj)");
        in[i] = t.data_ptr();
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
        const at::Tensor& t = outputs[i];
        if (!t.defined()) continue;  // an in-place output (alias of an input)
        TORCH_CHECK(t.device() == *device, "ember compiled graph: output ", i, " is on ", t.device());
        out[i] = t.data_ptr();
    }
    c10::DeviceGuard guard(*device);
    runtime::Device& dev = device_for(device->index());
    runtime::ThreadPool* pool = &dev.pool();
    std::shared_ptr<const compiler::Executable> keep = g.exe;
    enqueue(dev.current_stream(), g.name, [keep, in = std::move(in), out = std::move(out), pool] {
        return keep->run(in.data(), out.data(), pool);
    });
}

}  // namespace

void bind_compiler(py::module_& m) {
    m.def("_compiler_available", [] { return compiler::llvm_available(); });
    m.def("_compiler_ops", [] {
        py::list names;
        for (const auto& [name, op] : ops_by_name()) names.append(name);
        return names;
    });

    py::class_<compiler::Graph>(m, "_Graph")
        .def(py::init<>())
        .def("input", [](compiler::Graph& g, py::handle dtype, std::vector<int64_t> sizes,
                         std::vector<int64_t> strides, std::string source) {
            return g.input(dtype_of(dtype), std::move(sizes), std::move(strides), std::move(source));
        })
        .def("scalar", [](compiler::Graph& g, double v, py::handle dtype) { return g.scalar(v, dtype_of(dtype)); })
        .def("scalar_int", [](compiler::Graph& g, int64_t v, py::handle dtype) {
            return g.scalar_int(v, dtype_of(dtype));
        })
        .def("constant", [](compiler::Graph& g, const at::Tensor& t) {
            at::Tensor c = t.detach().cpu().contiguous();
            // A tensor without storage (a ZeroTensor, a fake tensor) has nothing to copy.
            TORCH_CHECK(c.numel() == 0 || (c.has_storage() && c.const_data_ptr() != nullptr && !c._is_zerotensor()),
                        "ember compiler: a graph constant has no data to embed");
            return g.constant(ir_dtype(c.scalar_type()), c.sizes().vec(), c.const_data_ptr());
        })
        .def("add", [](compiler::Graph& g, const std::string& op, std::vector<int> inputs, std::vector<int64_t> ints,
                       std::vector<double> floats, std::string str, py::handle dtype, std::vector<int64_t> sizes,
                       std::string source) {
            compiler::Attrs a{std::move(ints), std::move(floats), std::move(str)};
            if (dtype.is_none()) return g.add(op_of(op), std::move(inputs), std::move(a), std::move(source));
            return g.add(op_of(op), std::move(inputs), std::move(a), dtype_of(dtype), std::move(sizes), std::move(source));
        })
        .def("opaque", [](compiler::Graph& g, std::string name, std::vector<int> inputs, py::handle dtype,
                          std::vector<int64_t> sizes, std::string source) {
            return g.add_opaque(std::move(name), std::move(inputs), dtype_of(dtype), std::move(sizes), std::move(source));
        })
        .def("node_sizes", [](const compiler::Graph& g, int v) { return g.node(v).sizes; })
        .def("node_dtype", [](const compiler::Graph& g, int v) { return torch_dtype(g.node(v).dtype); })
        .def("node_op", [](const compiler::Graph& g, int v) { return std::string(compiler::op_name(g.node(v).op)); })
        .def("mark_output", &compiler::Graph::mark_output)
        .def("mark_output_alias", &compiler::Graph::mark_output_alias)
        .def("num_nodes", [](const compiler::Graph& g) { return g.nodes().size(); })
        .def("__str__", &compiler::Graph::to_string);

    py::class_<CompiledGraph>(m, "_Executable")
        .def_property_readonly("num_inputs", [](const CompiledGraph& c) { return c.exe->num_inputs(); })
        .def_property_readonly("num_outputs", [](const CompiledGraph& c) { return c.exe->num_outputs(); })
        .def_property_readonly("num_kernels", [](const CompiledGraph& c) { return c.exe->num_kernels(); })
        .def("output_info", [](const CompiledGraph& c, int i) {
            const compiler::OutputInfo& o = c.exe->output(i);
            return py::make_tuple(torch_dtype(o.dtype), o.sizes, o.strides, o.alias_input);
        })
        .def("run", [](const CompiledGraph& c, const std::vector<at::Tensor>& inputs,
                       const std::vector<std::optional<at::Tensor>>& outputs) {
            std::vector<at::Tensor> outs;
            outs.reserve(outputs.size());
            for (const auto& o : outputs) outs.push_back(o.has_value() ? *o : at::Tensor());
            run_graph(c, inputs, outs);
        });

    // Compiles `graph`; returns (executable, stats). Untranslatable ops raise NotImplementedError
    // naming each op and source line (the frontend turns it into torch_ember.CompileError).
    m.def("_compile", [](const compiler::Graph& graph, const std::string& name, const std::string& cache_dir,
                         bool use_cache) {
        compiler::CompileOptions o;
        o.cache_dir = cache_dir;
        o.use_cache = use_cache && !cache_dir.empty();
        compiler::CompileStats stats;
        StatusOr<std::shared_ptr<const compiler::Executable>> exe = [&] {
            py::gil_scoped_release release;
            return compiler::compile(graph, o, &stats);
        }();
        if (profiler::Tracer* t = tracer()) {
            t->compile_phase("compile " + name, static_cast<int64_t>(stats.total_ms * 1e6), stats.cache_hit);
        }
        if (!exe.ok()) raise_status(exe.status());
        CompiledGraph c{*exe, intern(name)};
        return py::make_tuple(c, stats_dict(stats));
    });
    m.def("_cache_info", [](const std::string& dir) {
        auto info = compiler::CompileCache(dir).info();
        if (!info.ok()) raise_status(info.status());
        return py::make_tuple(info->entries, info->bytes);
    });
    m.def("_cache_clear", [](const std::string& dir) { EMBER_CHECK(compiler::CompileCache(dir).clear()); });
}

}  // namespace ember::torch_glue
