#include "compiler/plan.h"

#include <cstring>
#include <sstream>

namespace ember::compiler {

Cls value_class(DType t) {
    switch (t) {
        case DType::kBool: return Cls::kBool;
        case DType::kFloat16: case DType::kBFloat16: case DType::kFloat32: return Cls::kF32;
        case DType::kFloat8E4M3FN: case DType::kFloat8E5M2: return Cls::kF32;
        case DType::kFloat64: return Cls::kF64;
        default: return Cls::kI64;
    }
}

int64_t Kernel::outer_count() const { return numel_of(outer); }

int64_t Buffer::bytes() const {
    int64_t extent = 1;  // one past the furthest element
    for (size_t d = 0; d < sizes.size(); ++d) {
        if (sizes[d] == 0) return 0;
        extent += (sizes[d] - 1) * strides[d];
    }
    return extent * kernels::element_size(dtype);
}

namespace {

class Writer {
  public:
    template <typename T>
    void pod(const T& v) { s_.append(reinterpret_cast<const char*>(&v), sizeof(T)); }
    template <typename T>
    void vec(const std::vector<T>& v) {
        pod(static_cast<uint64_t>(v.size()));
        if (!v.empty()) s_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
    }
    void str(const std::string& v) { vec(std::vector<char>(v.begin(), v.end())); }
    void ref(const TensorRef& r) {
        pod(r.buffer);
        pod(r.offset);
        pod(r.dtype);
        vec(r.sizes);
        vec(r.strides);
    }
    std::string take() { return std::move(s_); }

  private:
    std::string s_;
};

class Reader {
  public:
    explicit Reader(std::string_view s) : s_(s) {}
    bool ok() const { return ok_; }
    void fail() { ok_ = false; }
    template <typename T>
    T pod() {
        T v{};
        if (pos_ + sizeof(T) > s_.size()) { ok_ = false; return v; }
        std::memcpy(&v, s_.data() + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }
    template <typename T>
    std::vector<T> vec() {
        uint64_t n = pod<uint64_t>();
        if (!ok_ || n > (s_.size() - pos_) / sizeof(T)) { ok_ = false; return {}; }
        std::vector<T> v(n);
        if (n) std::memcpy(v.data(), s_.data() + pos_, n * sizeof(T));
        pos_ += n * sizeof(T);
        return v;
    }
    std::string str() {
        auto v = vec<char>();
        return {v.begin(), v.end()};
    }
    TensorRef ref() {
        TensorRef r;
        r.buffer = pod<int>();
        r.offset = pod<int64_t>();
        r.dtype = pod<DType>();
        r.sizes = vec<int64_t>();
        r.strides = vec<int64_t>();
        return r;
    }

  private:
    std::string_view s_;
    size_t pos_ = 0;
    bool ok_ = true;
};

constexpr uint32_t kPlanFormat = 2;

}  // namespace

std::string Plan::serialize() const {
    Writer w;
    w.pod(kPlanFormat);
    w.pod(static_cast<uint64_t>(kernel_names.size()));
    for (const auto& n : kernel_names) w.str(n);
    w.pod(static_cast<uint64_t>(buffers.size()));
    for (const Buffer& b : buffers) {
        w.pod(b.kind);
        w.pod(b.index);
        w.pod(b.dtype);
        w.vec(b.sizes);
        w.vec(b.strides);
        w.pod(b.offset);
    }
    w.pod(static_cast<uint64_t>(steps.size()));
    for (const Step& s : steps) {
        w.pod(s.kind);
        w.pod(s.kernel);
        w.pod(s.range);
        w.pod(s.grain);
        w.pod(static_cast<uint64_t>(s.refs.size()));
        for (const auto& r : s.refs) w.ref(r);
        w.pod(s.f0);
        w.pod(s.f1);
        w.pod(s.i0);
        w.str(s.label);
    }
    w.pod(static_cast<uint64_t>(constants.size()));
    for (const auto& c : constants) w.vec(c);
    w.pod(static_cast<uint64_t>(outputs.size()));
    for (const auto& o : outputs) {
        w.pod(o.dtype);
        w.vec(o.sizes);
        w.vec(o.strides);
        w.pod(o.alias_input);
    }
    w.pod(num_inputs);
    w.pod(scratch_bytes);
    w.pod(nodes_fused);
    w.pod(static_cast<int>(kernels.size() ? kernels.size() : kernel_names.size()));
    return w.take();
}

StatusOr<Plan> Plan::deserialize(std::string_view bytes) {
    Reader r(bytes);
    Plan p;
    if (r.pod<uint32_t>() != kPlanFormat) return invalid_argument("plan: unknown format");
    auto count = [&]() -> uint64_t {
        uint64_t n = r.pod<uint64_t>();
        if (n >= (1u << 24)) r.fail();
        return r.ok() ? n : 0;
    };
    uint64_t n = count();
    for (uint64_t i = 0; i < n && r.ok(); ++i) p.kernel_names.push_back(r.str());
    n = count();
    for (uint64_t i = 0; i < n && r.ok(); ++i) {
        Buffer b;
        b.kind = r.pod<Buffer::Kind>();
        b.index = r.pod<int>();
        b.dtype = r.pod<DType>();
        b.sizes = r.vec<int64_t>();
        b.strides = r.vec<int64_t>();
        b.offset = r.pod<int64_t>();
        p.buffers.push_back(std::move(b));
    }
    n = count();
    for (uint64_t i = 0; i < n && r.ok(); ++i) {
        Step s;
        s.kind = r.pod<Step::Kind>();
        s.kernel = r.pod<int>();
        s.range = r.pod<int64_t>();
        s.grain = r.pod<int64_t>();
        uint64_t nr = count();
        for (uint64_t j = 0; j < nr && r.ok(); ++j) s.refs.push_back(r.ref());
        s.f0 = r.pod<double>();
        s.f1 = r.pod<double>();
        s.i0 = r.pod<int64_t>();
        s.label = r.str();
        p.steps.push_back(std::move(s));
    }
    n = count();
    for (uint64_t i = 0; i < n && r.ok(); ++i) p.constants.push_back(r.vec<uint8_t>());
    n = count();
    for (uint64_t i = 0; i < n && r.ok(); ++i) {
        OutputInfo o;
        o.dtype = r.pod<DType>();
        o.sizes = r.vec<int64_t>();
        o.strides = r.vec<int64_t>();
        o.alias_input = r.pod<int>();
        p.outputs.push_back(std::move(o));
    }
    p.num_inputs = r.pod<int>();
    p.scratch_bytes = r.pod<int64_t>();
    p.nodes_fused = r.pod<int>();
    r.pod<int>();
    if (!r.ok()) return invalid_argument("plan: truncated");
    // Indices must stay in range: a plan that passed the cache checksum can still come from a
    // buggy writer, and the Executable indexes with these numbers.
    for (const Step& s : p.steps) {
        if (s.kind == Step::kKernel && (s.kernel < 0 || s.kernel >= static_cast<int>(p.kernel_names.size())))
            return invalid_argument("plan: bad kernel index");
        for (const auto& ref : s.refs)
            if (ref.buffer < 0 || ref.buffer >= static_cast<int>(p.buffers.size()))
                return invalid_argument("plan: bad buffer index");
    }
    return p;
}

namespace {
const char* cls_name(Cls c) {
    switch (c) {
        case Cls::kBool: return "i1";
        case Cls::kI64: return "i64";
        case Cls::kF32: return "f32";
        case Cls::kF64: return "f64";
    }
    return "?";
}

// Appends rather than chaining operator+, which trips GCC 12's -Wrestrict false positive.
void idx_out(std::string& out, const Kernel& k, int id) {
    const Idx& x = k.idx[static_cast<size_t>(id)];
    const char* op = x.kind == Idx::kAdd ? "+" : x.kind == Idx::kMul ? "*" : x.kind == Idx::kDiv ? "/" : "%";
    switch (x.kind) {
        case Idx::kVar: out += 'v'; out += std::to_string(x.a); return;
        case Idx::kConst: out += std::to_string(x.a); return;
        case Idx::kShift:
            out += "clamp(";
            idx_out(out, k, static_cast<int>(x.a));
            out += "-" + std::to_string(x.b) + ",0," + std::to_string(x.c) + ")";
            return;
        case Idx::kAdd:
            out += '(';
            idx_out(out, k, static_cast<int>(x.a));
            out += op;
            idx_out(out, k, static_cast<int>(x.b));
            out += ')';
            return;
        default:
            out += '(';
            idx_out(out, k, static_cast<int>(x.a));
            out += op;
            out += std::to_string(x.b);
            out += ')';
            return;
    }
}

std::string idx_str(const Kernel& k, int id) {
    std::string s;
    idx_out(s, k, id);
    return s;
}

std::string vec_str(const std::vector<int64_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s + "]";
}

void dump_kernel(std::ostringstream& os, const Kernel& k) {
    os << "  kernel " << k.name << " outer=" << vec_str(k.outer) << " inner=" << vec_str(k.inner);
    if (k.tail) os << " tail=" << k.tail;
    os << "\n";
    for (size_t e = 0; e < k.exprs.size(); ++e) {
        const Expr& x = k.exprs[e];
        os << "    e" << e << ":" << cls_name(x.cls) << " = ";
        switch (x.kind) {
            case Expr::kLoad: os << "load b" << x.buffer << "[" << idx_str(k, x.addr) << "] " << kernels::dtype_name(x.dtype); break;
            case Expr::kConst: os << "const " << (x.cls == Cls::kF32 || x.cls == Cls::kF64 ? std::to_string(x.f) : std::to_string(x.i)); break;
            case Expr::kReduced: os << "reduced r" << x.reduction; break;
            case Expr::kInRange:
                os << "in_range " << idx_str(k, x.addr) << " [" << x.lo << "," << x.hi << ") step " << x.step;
                break;
            case Expr::kOp:
                os << op_name(x.op);
                for (int a : x.args) if (a >= 0) os << " e" << a;
                break;
        }
        os << "\n";
    }
    for (size_t p = 0; p < k.phases.size(); ++p) {
        const Phase& ph = k.phases[p];
        os << "    phase " << p << ":";
        for (int r : ph.reductions) os << " r" << r << "=" << op_name(k.reductions[r].op) << "(e" << k.reductions[r].expr << ")";
        for (const Store& s : ph.stores) os << " b" << s.buffer << "[" << idx_str(k, s.addr) << "]=e" << s.expr;
        if (!ph.post.empty()) os << " | post:";
        for (const Store& s : ph.post) os << " b" << s.buffer << "[" << idx_str(k, s.addr) << "]=e" << s.expr;
        os << "\n";
    }
}
}  // namespace

std::string Plan::to_string() const {
    std::ostringstream os;
    static const char* kinds[] = {"input", "output", "scratch", "constant"};
    for (size_t b = 0; b < buffers.size(); ++b) {
        const Buffer& x = buffers[b];
        os << "  b" << b << ": " << kinds[x.kind] << " " << x.index << " " << kernels::dtype_name(x.dtype)
           << vec_str(x.sizes) << " strides=" << vec_str(x.strides);
        if (x.kind == Buffer::kScratch) os << " @" << x.offset;
        os << "\n";
    }
    for (const Kernel& k : kernels) dump_kernel(os, k);
    for (size_t i = 0; i < steps.size(); ++i) {
        const Step& s = steps[i];
        os << "  step " << i << ": ";
        if (s.kind == Step::kKernel) {
            os << "kernel " << kernel_names[s.kernel] << " range=" << s.range << " grain=" << s.grain;
        } else {
            os << (s.kind == Step::kGemm ? "gemm" : "attention");
            for (const auto& r : s.refs) os << " b" << r.buffer << "+" << r.offset << vec_str(r.sizes) << vec_str(r.strides);
        }
        os << "\n";
    }
    os << "  scratch bytes: " << scratch_bytes << "\n";
    return os.str();
}

}  // namespace ember::compiler
