// Allocator adapters: core's CachingAllocator as PyTorch's DeviceAllocator for PrivateUse1, and
// core's HostAllocator as the pinned-memory allocator the hooks hand out.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>

namespace ember::torch_glue {

c10::Allocator* device_allocator();
c10::Allocator* pinned_allocator();
// Grows or shrinks a storage's device memory, keeping its first min(old, new) bytes.
void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes);

}  // namespace ember::torch_glue
