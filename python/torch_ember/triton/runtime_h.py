"""The C++ prelude every translated Triton kernel is compiled with.

Kept as a Python string (not a header file next to the sources) so that it travels with the
package however it is installed, and so that its text is part of the compile-cache key: a change
here recompiles every cached kernel. It starts with torch_ember/vec_math.h (exp, exp2, log,
log1p, tanh and erf on float written so that loops over them vectorize, as in Ember's own
kernels) and holds what else the generated code needs beyond plain C++:
16-bit float storage types (converted through float, rounding to nearest even), NaN-aware min/max,
guarded integer division, atomics on any element type through compare-and-swap, the dot product
on fixed-size tiles (through the device's sgemm when large enough), and the parallel loop that
runs a kernel's programs on host threads.
"""


def _vec_math() -> str:
    """torch_ember/vec_math.h, the vectorizable float math Ember's own kernels use."""
    from pathlib import Path
    return (Path(__file__).resolve().parent.parent / "include" / "torch_ember" / "vec_math.h").read_text()


RUNTIME_H = _vec_math() + r"""
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>
#include <type_traits>
#include <vector>

namespace em {

static inline float bits_to_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline uint32_t f32_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

struct bf16 {
  uint16_t v;
  bf16() = default;
  bf16(float f) {
    uint32_t u = f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) { v = (uint16_t)((u >> 16) | 0x40); return; }
    u += 0x7fffu + ((u >> 16) & 1u);
    v = (uint16_t)(u >> 16);
  }
  bf16(double d) : bf16((float)d) {}
  bf16(int32_t i) : bf16((float)i) {}
  bf16(int64_t i) : bf16((float)i) {}
  operator float() const { return bits_to_f32((uint32_t)v << 16); }
};

struct f16 {
  uint16_t v;
  f16() = default;
  f16(float f) {
    uint32_t x = f32_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) { v = (uint16_t)(sign | 0x7e00u); return; }
    if (ax >= 0x477ff000u) { v = (uint16_t)(sign | 0x7c00u); return; }  // overflow -> inf
    if (ax < 0x38800000u) {  // subnormal or zero in half
      float a = bits_to_f32(ax);
      // Scale so that the half subnormal step (2^-24) becomes 1, round to nearest even.
      float r = std::nearbyint(a * 16777216.0f);
      v = (uint16_t)(sign | (uint32_t)r);
      return;
    }
    uint32_t mant = ax & 0x7fffffu;
    uint32_t e = (ax >> 23) - 112;
    uint32_t h = (e << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h += 1;
    v = (uint16_t)(sign | h);
  }
  f16(double d) : f16((float)d) {}
  f16(int32_t i) : f16((float)i) {}
  f16(int64_t i) : f16((float)i) {}
  operator float() const {
    uint32_t sign = ((uint32_t)v & 0x8000u) << 16;
    uint32_t e = (v >> 10) & 0x1fu, m = v & 0x3ffu;
    if (e == 0) {
      float f = (float)m * 5.9604644775390625e-08f;
      return sign ? -f : f;
    }
    if (e == 31) return bits_to_f32(sign | 0x7f800000u | (m << 13));
    return bits_to_f32(sign | ((e + 112) << 23) | (m << 13));
  }
};

template <class T> struct acc { using type = T; };
template <> struct acc<f16> { using type = float; };
template <> struct acc<bf16> { using type = float; };

template <class T> static inline T maxnum(T a, T b) { return std::fmax((float)a, (float)b); }
static inline double maxnum(double a, double b) { return std::fmax(a, b); }
template <class T> static inline T minnum(T a, T b) { return std::fmin((float)a, (float)b); }
static inline double minnum(double a, double b) { return std::fmin(a, b); }
template <class T> static inline T maximum(T a, T b) {
  float x = a, y = b;
  return (x != x || y != y) ? std::numeric_limits<float>::quiet_NaN() : std::fmax(x, y);
}
static inline double maximum(double x, double y) {
  return (x != x || y != y) ? std::numeric_limits<double>::quiet_NaN() : std::fmax(x, y);
}
template <class T> static inline T minimum(T a, T b) {
  float x = a, y = b;
  return (x != x || y != y) ? std::numeric_limits<float>::quiet_NaN() : std::fmin(x, y);
}
static inline double minimum(double x, double y) {
  return (x != x || y != y) ? std::numeric_limits<double>::quiet_NaN() : std::fmin(x, y);
}

// Integer division as GPUs do it without trapping: x/0 gives 0 here (masked-off lanes often
// divide by a zero `other`), and INT_MIN/-1 wraps.
template <class T> static inline T sdiv(T a, T b) {
  if (b == 0) return 0;
  if (std::is_signed<T>::value && b == (T)-1) return (T)(0 - (typename std::make_unsigned<T>::type)a);
  return a / b;
}
template <class T> static inline T srem(T a, T b) {
  if (b == 0 || (std::is_signed<T>::value && b == (T)-1)) return 0;
  return a % b;
}
template <class T> static inline T shl(T a, int64_t b) {
  return (b < 0 || b >= (int64_t)(8 * sizeof(T))) ? (T)0 : (T)((typename std::make_unsigned<T>::type)a << b);
}
template <class T> static inline T ashr(T a, int64_t b) {
  using S = typename std::make_signed<T>::type;
  if (b < 0 || b >= (int64_t)(8 * sizeof(T))) return (T)((S)a < 0 ? -1 : 0);
  return (T)((S)a >> b);
}
template <class T> static inline T lshr(T a, int64_t b) {
  using U = typename std::make_unsigned<T>::type;
  return (b < 0 || b >= (int64_t)(8 * sizeof(T))) ? (T)0 : (T)((U)a >> b);
}

template <size_t N> struct bits;
template <> struct bits<1> { using type = uint8_t; };
template <> struct bits<2> { using type = uint16_t; };
template <> struct bits<4> { using type = uint32_t; };
template <> struct bits<8> { using type = uint64_t; };

template <class T> static inline T bitcast_from(const void* p) { T t; std::memcpy(&t, p, sizeof(T)); return t; }

// Atomic read-modify-write of any 1/2/4/8-byte element: a compare-and-swap loop.
template <class T, class F> static inline T atomic_rmw(T* p, T v, F f) {
  using U = typename bits<sizeof(T)>::type;
  U* q = reinterpret_cast<U*>(p);
  U old = __atomic_load_n(q, __ATOMIC_RELAXED);
  while (true) {
    T o = bitcast_from<T>(&old);
    T n = f(o, v);
    U nu = bitcast_from<U>(&n);
    if (__atomic_compare_exchange_n(q, &old, nu, true, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) return o;
  }
}
template <class T> static inline T atomic_cas(T* p, T cmp, T v) {
  using U = typename bits<sizeof(T)>::type;
  U expected = bitcast_from<U>(&cmp);
  U desired = bitcast_from<U>(&v);
  __atomic_compare_exchange_n(reinterpret_cast<U*>(p), &expected, desired, false, __ATOMIC_ACQ_REL,
                              __ATOMIC_ACQUIRE);
  return bitcast_from<T>(&expected);
}

// The device's single-threaded float32 block product (kernels::block_sgemm, a BLAS sgemm), set by
// the runtime library's loader; null until then. Row-major C (m x n) = A (m x k) @ B (k x n),
// plus C when accumulate.
using block_sgemm_fn = void (*)(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*,
                                int64_t, float*, int64_t, bool);
extern "C" block_sgemm_fn ember_rt_block_sgemm;

// A tile as float32: the tile itself when it already is, else widened into `buf`.
template <int SIZE, class T> static inline const float* as_f32(const T* t, float* buf) {
  if constexpr (std::is_same_v<T, float>) {
    return t;
  } else {
    for (int i = 0; i < SIZE; ++i) buf[i] = (float)t[i];
    return buf;
  }
}

// d = c + a @ b on row-major tiles, accumulating in C's type (float for 16-bit inputs). Float32
// accumulators of tiles big enough to pay for a library call go through the device's sgemm
// (16-bit operands widen exactly first); the rest run the loop below.
template <int M, int N, int K, class TA, class TB, class TC>
static inline void dot(const TA* __restrict a, const TB* __restrict b, const TC* c, TC* __restrict d) {
  using A = typename acc<TC>::type;
  constexpr bool float_operands = !std::is_same_v<TA, double> && !std::is_integral_v<TA> &&
                                  !std::is_same_v<TB, double> && !std::is_integral_v<TB>;
  if constexpr (std::is_same_v<TC, float> && float_operands && (int64_t)M * N * K >= 16384) {
    if (ember_rt_block_sgemm) {
      static thread_local float abuf[std::is_same_v<TA, float> ? 1 : M * K];
      static thread_local float bbuf[std::is_same_v<TB, float> ? 1 : K * N];
      const float* af = as_f32<M * K>(a, abuf);
      const float* bf = as_f32<K * N>(b, bbuf);
      if (d != c) std::memcpy(d, c, sizeof(float) * M * N);
      ember_rt_block_sgemm(false, false, M, N, K, af, K, bf, N, d, N, true);
      return;
    }
  }
  static thread_local A accum[M * N];
  static thread_local A bt[K * N];
  for (int i = 0; i < K * N; ++i) bt[i] = (A)(typename acc<TB>::type)b[i];
  for (int i = 0; i < M * N; ++i) accum[i] = (A)c[i];
  for (int m = 0; m < M; ++m) {
    A* __restrict row = accum + m * N;
    for (int k = 0; k < K; ++k) {
      A av = (A)(typename acc<TA>::type)a[m * K + k];
      const A* __restrict brow = bt + k * N;
      for (int n = 0; n < N; ++n) row[n] += av * brow[n];
    }
  }
  for (int i = 0; i < M * N; ++i) d[i] = (TC)accum[i];
}

// Runs programs [0, total): on the calling thread for one program (or one thread), else on the
// shared worker pool of the runtime library (RUNTIME_CPP). Each thread owns one scratch area that
// holds its program's block values.
extern "C" void ember_rt_parallel(int64_t total, int nthreads, size_t scratch,
                                  void (*fn)(void*, int64_t, char*), void* ctx);

template <class F> static inline void parallel(int64_t total, int nthreads, size_t scratch, F f) {
  if (total <= 0) return;
  if (nthreads <= 1 || total == 1) {
    void* mem = nullptr;
    if (posix_memalign(&mem, 64, scratch ? scratch : 64) != 0) std::abort();
    for (int64_t pid = 0; pid < total; ++pid) f(pid, (char*)mem);
    std::free(mem);
    return;
  }
  ember_rt_parallel(total, nthreads, scratch,
                    [](void* c, int64_t pid, char* s) { (*(F*)c)(pid, s); }, &f);
}

}  // namespace em
"""


# The runtime library every kernel links against at load time (loaded once per process with
# RTLD_GLOBAL): one pool of worker threads shared by all kernels, so a launch wakes parked threads
# instead of creating them. One launch runs at a time; the caller works too.
RUNTIME_CPP = r"""
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <pthread.h>
#include <thread>
#include <vector>

namespace {

using Fn = void (*)(void*, int64_t, char*);

struct Scratch {
  char* buf = nullptr;
  size_t cap = 0;
  char* get(size_t n) {
    if (n < 64) n = 64;
    if (cap < n) {
      std::free(buf);
      void* p = nullptr;
      if (posix_memalign(&p, 64, n) != 0) std::abort();
      buf = (char*)p;
      cap = n;
    }
    return buf;
  }
};

struct Pool {
  std::mutex launch_mu, mu;
  std::condition_variable wake, done;
  std::vector<std::thread> threads;
  uint64_t generation = 0;
  int want = 0, pending = 0;
  int64_t total = 0, chunk = 1;
  std::atomic<int64_t> next{0};
  size_t scratch = 0;
  Fn fn = nullptr;
  void* ctx = nullptr;

  void run_chunks(Scratch& s) {
    char* buf = s.get(scratch);
    while (true) {
      int64_t start = next.fetch_add(chunk);
      if (start >= total) break;
      int64_t stop = std::min(total, start + chunk);
      for (int64_t pid = start; pid < stop; ++pid) fn(ctx, pid, buf);
    }
  }
  void loop(int id) {
    Scratch s;
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lk(mu);
    while (true) {
      wake.wait(lk, [&] { return generation != seen; });
      seen = generation;
      if (id >= want) continue;
      lk.unlock();
      run_chunks(s);
      lk.lock();
      if (--pending == 0) done.notify_all();
    }
  }
};

Pool* g_pool = nullptr;
std::once_flag g_once;

Pool& pool() {
  std::call_once(g_once, [] {
    g_pool = new Pool();  // never destroyed: parked workers must not be joined at exit
    pthread_atfork(nullptr, nullptr, [] { g_pool = new Pool(); });  // threads do not survive fork
  });
  return *g_pool;
}

}  // namespace

using block_sgemm_fn = void (*)(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*,
                                int64_t, float*, int64_t, bool);
extern "C" {
block_sgemm_fn ember_rt_block_sgemm = nullptr;
void ember_rt_set_block_sgemm(void* fn) { ember_rt_block_sgemm = (block_sgemm_fn)fn; }
}

extern "C" void ember_rt_parallel(int64_t total, int nthreads, size_t scratch, Fn fn, void* ctx) {
  if (total <= 0) return;
  if ((int64_t)nthreads > total) nthreads = (int)total;
  if (nthreads < 1) nthreads = 1;
  static thread_local Scratch mine;
  Pool& p = pool();
  std::lock_guard<std::mutex> one_launch(p.launch_mu);
  {
    std::lock_guard<std::mutex> lk(p.mu);
    while ((int)p.threads.size() < nthreads - 1) {
      int id = (int)p.threads.size();
      p.threads.emplace_back([&p, id] { p.loop(id); });
      p.threads.back().detach();
    }
    p.total = total;
    p.chunk = std::max<int64_t>(1, total / ((int64_t)nthreads * 8));
    p.next = 0;
    p.scratch = scratch;
    p.fn = fn;
    p.ctx = ctx;
    p.want = nthreads - 1;
    p.pending = nthreads - 1;
    p.generation++;
  }
  p.wake.notify_all();
  p.run_chunks(mine);
  std::unique_lock<std::mutex> lk(p.mu);
  p.done.wait(lk, [&] { return p.pending == 0; });
}
"""
