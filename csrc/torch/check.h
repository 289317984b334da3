// The one place where core's Status becomes a PyTorch exception. kOutOfMemory raises
// c10::OutOfMemoryError (torch.OutOfMemoryError in Python); invalid arguments raise ValueError;
// everything else RuntimeError.
#pragma once

#include <c10/util/Exception.h>

#include "base/status.h"

namespace ember::torch_glue {

[[noreturn]] void raise_status(const Status& status);

template <typename T>
T value_or_raise(StatusOr<T> s) {
    if (!s.ok()) raise_status(s.status());
    return std::move(s.value());
}

}  // namespace ember::torch_glue

#define EMBER_CHECK(expr)                                                  \
    do {                                                                   \
        ::ember::Status _ember_status = (expr);                            \
        if (!_ember_status.ok()) ::ember::torch_glue::raise_status(_ember_status); \
    } while (0)
