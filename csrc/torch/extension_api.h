// The function table ahead-of-time C++ extensions call Ember through
// (python/torch_ember/include/torch_ember/extension_abi.h), published by the bindings as the
// PyCapsule torch_ember._C._extension_api.
#pragma once

#include <string>

#include "torch_ember/extension_abi.h"

namespace ember::torch_glue {

const EmberExtensionApi& extension_api();

// A stream task name that lives as long as the profiler may show it: one copy per distinct
// name (tasks named at run time: extension kernels, Triton launches, collectives).
const char* interned(const std::string& name);

}  // namespace ember::torch_glue
