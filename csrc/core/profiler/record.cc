#include "profiler/record.h"

namespace ember::profiler {

const char* kind_name(RecordKind kind) {
    switch (kind) {
        case RecordKind::kEnqueue: return "enqueue";
        case RecordKind::kKernel: return "kernel";
        case RecordKind::kAlloc: return "alloc";
        case RecordKind::kFree: return "free";
        case RecordKind::kHostOp: return "host_op";
        case RecordKind::kCopy: return "copy";
        case RecordKind::kFallback: return "fallback";
        case RecordKind::kEventRecord: return "event_record";
        case RecordKind::kEventWait: return "event_wait";
        case RecordKind::kSynchronize: return "synchronize";
        case RecordKind::kCompilePhase: return "compile";
        case RecordKind::kInstant: return "instant";
        case RecordKind::kStep: return "step";
    }
    return "unknown";
}

const char* copy_kind_name(CopyKind kind) {
    switch (kind) {
        case CopyKind::kNone: return "";
        case CopyKind::kH2D: return "H2D";
        case CopyKind::kD2H: return "D2H";
        case CopyKind::kD2D: return "D2D";
    }
    return "";
}

}  // namespace ember::profiler
