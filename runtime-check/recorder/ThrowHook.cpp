// Interposes __cxa_throw to record where a c10::Error is thrown, and writes
// the trace when the program dies through std::terminate or a fatal signal.
//
// Under LD_PRELOAD this definition comes first in the global symbol lookup,
// so libc10's throw sites bind to it; it records the event and forwards to
// the next definition (libstdc++'s) found with dlsym(RTLD_NEXT).
#include "Recorder.h"
#include "ThrowHook.h"

#include <cxxabi.h>
#include <dlfcn.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <typeinfo>

namespace ttrt {
namespace {

std::atomic<int> gThrowsRecorded{0};
constexpr int kMaxThrows = 256;
thread_local bool tInHook = false;
std::terminate_handler gPrevTerminate = nullptr;

using CxaThrowFn = void (*)(void *, std::type_info *, void (*)(void *));

CxaThrowFn realThrow() {
  static CxaThrowFn fn =
      reinterpret_cast<CxaThrowFn>(dlsym(RTLD_NEXT, "__cxa_throw"));
  return fn;
}

std::string demangle(const char *mangled) {
  int status = 0;
  char *d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string out = (status == 0 && d) ? d : mangled;
  std::free(d);
  return out;
}

void onTerminate() {
  writeTrace("terminate");
  if (gPrevTerminate)
    gPrevTerminate();
  std::abort();
}

void onSignal(int sig) {
  writeTrace("signal");
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

} // namespace

bool isDeviceMismatchMessage(const std::string &msg) {
  static const char *const kPatterns[] = {
      "same device",                   // "Expected all tensors to be on the same device"
      "expected it to be on GPU",      // older checkSameGPU wording
      "to be on the same GPU",
      "but expected it to be on CUDA", // TensorArg checks
  };
  for (const char *p : kPatterns)
    if (msg.find(p) != std::string::npos)
      return true;
  return false;
}

bool isC10ErrorTypeName(const char *mangled) {
  return mangled && std::strstr(mangled, "c10") && std::strstr(mangled, "Error");
}

void recordThrow(void *obj, std::type_info *tinfo) {
  if (!tinfo || !isC10ErrorTypeName(tinfo->name()))
    return;
  if (gThrowsRecorded.fetch_add(1) >= kMaxThrows)
    return;
  // Let the C++ runtime perform the same upcast a `catch (std::exception&)`
  // would, so multiple or virtual inheritance is handled correctly.
  void *adjusted = obj;
  std::string what;
  if (typeid(std::exception).__do_catch(tinfo, &adjusted, 1) && adjusted)
    what = static_cast<std::exception *>(adjusted)->what();
  Event ev;
  ev.kind = EvKind::Throw;
  ev.api = "__cxa_throw";
  ev.tNs = nowNs();
  ev.deviceMismatch = isDeviceMismatchMessage(what);
  ev.stack = captureStack(2);
  ev.typeName = addMessage(demangle(tinfo->name()));
  if (!what.empty())
    ev.message = addMessage(what);
  addEvent(ev);
}

void installCrashHandlers() {
  static std::atomic<bool> done{false};
  if (done.exchange(true))
    return;
  gPrevTerminate = std::set_terminate(onTerminate);
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE}) {
    struct sigaction cur {};
    if (sigaction(sig, nullptr, &cur) == 0 && cur.sa_handler == SIG_DFL &&
        !(cur.sa_flags & SA_SIGINFO))
      std::signal(sig, onSignal);
  }
}

} // namespace ttrt

extern "C" __attribute__((visibility("default"), noreturn)) void
__cxa_throw(void *obj, std::type_info *tinfo, void (*dest)(void *)) {
  if (!ttrt::tInHook) {
    ttrt::tInHook = true;
    try {
      ttrt::recordThrow(obj, tinfo);
    } catch (...) {
    }
    ttrt::tInHook = false;
  }
  ttrt::CxaThrowFn next = ttrt::realThrow();
  if (!next)
    std::abort();
  next(obj, tinfo, dest);
  __builtin_unreachable();
}
