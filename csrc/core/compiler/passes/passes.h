// The compiler's passes, in pipeline order (pipeline.cc runs them by name):
//   decompose     Graph -> Graph: composite ops (softmax, log_softmax) into reductions and
//                 elementwise ops, so that fusion sees one vocabulary.
//   fuse          Graph -> Plan: groups elementwise chains, views and reductions into kernels
//                 of the loop IR (plan.h), and library ops into their own steps.
//   reuse_values  Plan -> Plan: a costly value a kernel needs in two phases (softmax's exp) is
//                 computed once, kept in the later phase's output buffer and read back.
//   plan_buffers  Plan -> Plan: places intermediates in one scratch arena, reusing memory of
//                 buffers whose last use has passed.
#pragma once

#include "base/status.h"
#include "compiler/ir/graph.h"
#include "compiler/plan.h"

namespace ember::compiler {

StatusOr<Graph> decompose(const Graph& graph);
StatusOr<Plan> fuse(const Graph& graph);
Status reuse_values(Plan& plan);
Status plan_buffers(Plan& plan);

}  // namespace ember::compiler
