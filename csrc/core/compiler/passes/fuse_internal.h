// Internals of the fuse pass, shared by fuse.cc (grouping and steps) and fuse_lower.cc
// (translating graph values into a kernel's loop IR). Not a public header.
//
// Vocabulary. A *root* is a graph value that a kernel computes as a unit: every reduction, every
// output, and each elementwise value worth keeping rather than recomputing (used twice and
// costly). Everything else is inlined: an elementwise or view node becomes part of the expression
// of each root that reads it, evaluated at that root's index (views are index maps, never
// copies). A root joins an existing kernel when its loop domain matches and everything it reads
// from that kernel is row-aligned (same outer index), which is what makes the whole softmax or
// RMSNorm one kernel; otherwise it starts a new kernel. Roots whose values nobody outside their
// kernel reads are never stored.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "compiler/ir/graph.h"
#include "compiler/plan.h"

namespace ember::compiler::fusion {

struct RootInfo {
    enum Kind { kFull, kReduce, kOuter } kind = kFull;
    int phase = 0;
    int expr = -1;             // the value (kReduced for reductions)
    std::vector<int> out_idx;  // idx id per dim of the value's shape; -1 for size-1 dims
};

struct KernelState {
    int kernel = -1;  // index into plan.kernels
    int step = -1;    // index into plan.steps
    bool sealed = false;
    std::vector<int64_t> shape;   // the reference shape S of the domain
    std::vector<int> inner_dims;  // dims of S run by the inner loops (sorted)
    bool chunked = false;
    std::vector<int> dim_idx;  // idx id per dim of S
    std::map<std::tuple<int, int64_t, int64_t>, int> idx_cons;
    std::map<std::tuple<int, bool, std::vector<int>>, std::pair<int, int>> memo;  // -> (expr, level)
    std::unordered_map<int, RootInfo> roots;
    std::vector<int> root_order;
};

// One attempt at lowering into a kernel; rolled back on failure.
struct LowerCtx {
    KernelState* s = nullptr;
    Kernel* k = nullptr;
    bool outer_scope = false;
    int level = 0;  // first phase whose loop may evaluate the result
    bool failed = false;
    std::vector<int> needs;  // values whose buffers the attempt reads
    std::vector<std::tuple<int, int64_t, int64_t>> new_idx_keys;
    std::vector<std::tuple<int, bool, std::vector<int>>> new_memo_keys;
};

class Fuser {
  public:
    // `inlined`: values that would be kept for being used twice but are inlined instead (see
    // sinkable_roots()).
    Fuser(const Graph& g, std::set<int> disabled_aliases, std::set<int> inlined = {});
    Status run();
    // Values whose in-place output could not be written directly (found by run()).
    const std::vector<int>& unsafe_aliases() const { return unsafe_; }
    // Values kept only for being used twice whose scratch buffer one kernel writes and one other
    // kernel reads, in a single phase: inlining them there may save the round trip through memory
    // (and the first kernel), when every use then lands in that one kernel.
    std::vector<int> sinkable_roots() const;
    Plan take_plan() { return std::move(plan_); }

  private:
    // fuse.cc
    void decide_roots();
    Status assign_homes();
    Status process_library(int v);
    bool place_root(int v);
    bool place_pseudo(const std::vector<int64_t>& shape, const std::function<int(LowerCtx&)>& make,
                      int dest_buffer, bool late);
    StatusOr<TensorRef> operand_ref(int v, bool need_unit_last_stride);
    int new_kernel(const std::vector<int64_t>& shape, std::vector<int> inner_dims, bool allow_chunk);
    bool compatible_full(const KernelState& s, const std::vector<int64_t>& shape) const;
    int kept_form(const KernelState& s, const std::vector<int64_t>& shape) const;  // 0 no, 1 keepdim, 2 dropped
    std::vector<int> kept_idx(const KernelState& s, int form) const;
    void finalize();
    void check_aliases();
    void label_kernel_steps();
    int home(int v);
    int scratch_buffer(DType dtype, const std::vector<int64_t>& sizes);

    // fuse_lower.cc
  public:
    int make_idx(LowerCtx& c, Idx::Kind kind, int64_t a, int64_t b, int64_t clamp = 0);
    int lower_pad(LowerCtx& c, const Node& n, const std::vector<int>& idx);
    int recombine(LowerCtx& c, int64_t a, int64_t b);
    int lower(LowerCtx& c, int v, const std::vector<int>& idx);
    int lower_def(LowerCtx& c, int v, const std::vector<int>& idx);
    int add_expr(LowerCtx& c, Expr e);
    int address(LowerCtx& c, const std::vector<int>& idx, const std::vector<int64_t>& strides,
                const std::vector<int64_t>& sizes);
    std::vector<int> broadcast_idx(LowerCtx& c, const std::vector<int>& idx, const std::vector<int64_t>& from,
                                   const std::vector<int64_t>& to);
    std::vector<int> view_idx(LowerCtx& c, const Node& n, const std::vector<int>& idx);
    bool begin_attempt(LowerCtx& c, KernelState& s);
    void rollback(LowerCtx& c, size_t nidx, size_t nexpr, size_t nred);

  private:
    const Graph& g_;
    std::set<int> disabled_, inlined_;
    std::vector<int> kept_for_reuse_;  // values decide_roots() kept for being used twice
    Plan plan_;
    std::vector<KernelState> states_;
    std::vector<std::vector<int>> users_;
    std::vector<char> live_, is_root_, needed_;
    std::vector<int> home_, producer_;  // producer_: step index, -1 for inputs and constants
    std::vector<int> input_buffer_, output_buffer_;
    std::vector<std::pair<int, int>> copies_, late_copies_;  // (value, destination buffer)
    std::vector<int> unsafe_;
    std::vector<std::pair<int, int>> aliases_;  // (value, input buffer) written in place
    int late_barrier_ = -1;  // states_ index of the first kernel that may hold late copies
    std::vector<char> lowered_;
};

bool is_pointwise(OpKind k);

// Loads reachable from a phase's loop (post = false) or its post stores (post = true).
std::vector<int> phase_loads(const Kernel& k, const Phase& p, bool post);

}  // namespace ember::compiler::fusion
