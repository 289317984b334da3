// Checks a Graph before compilation. Two kinds of failure, kept apart as Halide does:
//  - user errors: ops the compiler has no lowering for (kUnimplemented). Every such node is
//    listed in one message, "op '<name>' at <source>", so the frontend can raise one
//    CompileError naming all of them rather than one per attempt.
//  - malformed graphs (kInvalidArgument): bad operand ids, shapes or dtypes that do not follow
//    from the op (the frontend and the compiler disagree), bad outputs or aliases.
#pragma once

#include "base/status.h"
#include "compiler/ir/graph.h"

namespace ember::compiler {

Status verify(const Graph& graph);

}  // namespace ember::compiler
