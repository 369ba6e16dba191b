// torch_cubemem_alloc.cpp - the two entry points PyTorch's
// CUDAPluggableAllocator calls, as C++ so that a failure is an exception.
//
// PyTorch stores the pointer cubemem_torch_malloc returns without checking it
// (a NULL becomes a tensor at address 0), so the only safe way to report a
// failed allocation is to throw; PyTorch's Python binding turns a
// std::exception into RuntimeError carrying what(). All the work is in C
// (cmt__alloc in torch_cubemem.c); this unit only translates its result.
#include <exception>
#include <string>

#include "torch_cubemem.h"

namespace cubemem {

// Any allocation failure; what() is the full message (also kept by
// cubemem_torch_last_error()).
class Error : public std::exception {
 public:
  explicit Error(std::string message) : message_(std::move(message)) {}
  const char *what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// The device (or cubemem's capacity limit) is out of memory. The message
// follows PyTorch's: the size requested, the device's total and free memory,
// what cubemem holds and how much of it is cached.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

}  // namespace cubemem

extern "C" CMT_EXPORT void *cubemem_torch_malloc(ssize_t size, int device, void *stream) {
  void *p = nullptr;
  char msg[1024];
  switch (cmt__alloc(size, device, stream, &p, msg, sizeof msg)) {
    case CMT_OK: return p;
    case CMT_OOM: throw cubemem::OutOfMemoryError(msg);
    default: throw cubemem::Error(msg);
  }
}

extern "C" CMT_EXPORT void cubemem_torch_free(void *ptr, ssize_t size, int device, void *stream) {
  (void)size;
  cmt__free(ptr, device, stream);
}
