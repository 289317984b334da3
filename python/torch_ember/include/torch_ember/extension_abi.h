/* The table of functions an ahead-of-time C++ extension calls into Ember through.
 *
 * Ember's runtime lives inside the torch_ember._C module, whose symbols are not exported to
 * other extension modules; the module publishes this table instead, as the PyCapsule
 * "torch_ember._C._extension_api". extension.h wraps it for C++; this header is plain C, so the
 * layout is the same on both sides of the boundary. Bump EMBER_EXTENSION_API_VERSION when a
 * field changes; fields are only ever appended.
 */
#ifndef TORCH_EMBER_EXTENSION_ABI_H_
#define TORCH_EMBER_EXTENSION_ABI_H_

#include <stddef.h>
#include <stdint.h>

#define EMBER_EXTENSION_API_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

/* A kernel body: fills `err` (a NUL-terminated message of at most err_len bytes) on failure. */
typedef void (*ember_ext_task)(void* ctx, char* err, size_t err_len);
typedef void (*ember_ext_drop)(void* ctx);
typedef void (*ember_ext_range)(void* ctx, int64_t begin, int64_t end);

typedef struct EmberExtensionApi {
    int version;
    /* Queues task(ctx) on the current stream of ember device `device`, under `name` (copied; a
     * failure and a trace name it), then drop(ctx). Returns 0, or non-zero with the reason in
     * err: a bad device, or the task's own failure when EMBER_SYNC=1 runs it at once. */
    int (*enqueue)(int device, const char* name, ember_ext_task task, void* ctx, ember_ext_drop drop,
                   char* err, size_t err_len);
    /* Runs body(ctx, begin, end) over [0, n) in chunks of at least `grain` on the device's
     * compute threads, the calling thread included; returns when all are done. Meant for
     * inside a queued task. */
    void (*parallel_for)(int device, int64_t n, int64_t grain, ember_ext_range body, void* ctx);
    /* The device's compute threads. */
    int (*num_threads)(int device);
} EmberExtensionApi;

#ifdef __cplusplus
}
#endif

#endif /* TORCH_EMBER_EXTENSION_ABI_H_ */
