#pragma once
// A driver library loaded with dlopen, so sgpu needs no GPU stack to build or
// run. Never unloaded: driver libraries (libcuda above all) register exit
// handlers and threads that do not survive dlclose, and sgpu is short-lived.
#include <dlfcn.h>

#include <string>

namespace sgpu::launcher {

class SharedLibrary {
 public:
  explicit SharedLibrary(const char* soname) : handle_(::dlopen(soname, RTLD_NOW | RTLD_LOCAL)) {
    if (handle_ == nullptr) {
      const char* why = ::dlerror();
      error_ = why != nullptr ? why : std::string(soname) + ": cannot be loaded";
    }
  }
  bool loaded() const { return handle_ != nullptr; }
  const std::string& error() const { return error_; }  // dlerror()'s text when not loaded

  // The function `name` as type F, or nullptr when the library lacks it.
  template <class F>
  F function(const char* name) const {
    return handle_ == nullptr ? nullptr : reinterpret_cast<F>(::dlsym(handle_, name));
  }

 private:
  void* handle_;
  std::string error_;
};

}  // namespace sgpu::launcher
