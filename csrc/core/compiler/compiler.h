// The compiler's public surface for the torch glue: build a Graph (ir/graph.h), compile() it
// (pipeline.h), run the Executable (executable.h); manage the on-disk cache (cache/cache.h).
#pragma once

#include "compiler/cache/cache.h"
#include "compiler/executable.h"
#include "compiler/ir/graph.h"
#include "compiler/ir/verifier.h"
#include "compiler/pipeline.h"
