// The function table ahead-of-time C++ extensions call Ember through
// (python/torch_ember/include/torch_ember/extension_abi.h), published by the bindings as the
// PyCapsule torch_ember._C._extension_api.
#pragma once

#include "torch_ember/extension_abi.h"

namespace ember::torch_glue {

const EmberExtensionApi& extension_api();

}  // namespace ember::torch_glue
