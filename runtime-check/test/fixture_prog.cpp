// A stand-in for a LibTorch program, built with -g -O0, for the GPU-free
// tests. It feeds the recorder core the events a CUDA program would produce,
// from lines marked "MARK:<name>", captures real call stacks, throws a
// c10::Error look-alike through the __cxa_throw interposer, and writes a real
// trace. The tests find the marked lines by reading this file.
//
//   tt_fixture_prog trace OUT.jsonl   record and write OUT.jsonl
//   tt_fixture_prog env               record and write to $TORCH_TIDY_TRACE
//   tt_fixture_prog crash             throw uncaught; the terminate handler writes
//   tt_fixture_prog where             print "MODULE OFFSET" of the MARK:where call
#include "Recorder.h"
#include "ThrowHook.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <cstdlib>
#include <unistd.h>

namespace c10 {
// Same shape as LibTorch's: derives from std::exception, message in what().
class Error : public std::exception {
public:
  explicit Error(std::string msg) : msg_(std::move(msg)) {}
  const char *what() const noexcept override { return msg_.c_str(); }

private:
  std::string msg_;
};
} // namespace c10

namespace {

using namespace ttrt;

__attribute__((noinline)) void emit(EvKind kind, Dir dir, HostKind host, bool async,
                                    uint64_t bytes) {
  Event ev;
  ev.kind = kind;
  ev.dir = dir;
  ev.host = host;
  ev.hostSource = host == HostKind::Unknown ? HostSource::None : HostSource::Activity;
  ev.async = async;
  ev.bytes = bytes;
  ev.api = kind == EvKind::Memcpy ? "cudaMemcpyAsync"
           : kind == EvKind::Free ? "cudaFree"
           : kind == EvKind::Alloc ? "cudaMalloc"
                                   : "cudaStreamSynchronize";
  ev.tNs = nowNs();
  ev.durNs = 1000;
  ev.stack = captureStack(1);  // drop emit() itself: the caller's line is the site
  if (kind == EvKind::Alloc)
    noteAlloc(0x1000 + bytes, bytes);
  if (kind == EvKind::Free)
    ev.bytes = noteFree(0x1000 + bytes);
  addEvent(ev);
}

void copyH2D(bool async, HostKind host) { emit(EvKind::Memcpy, Dir::HtoD, host, async, 4096); }
void sync() { emit(EvKind::Sync, Dir::Unknown, HostKind::Unknown, false, 0); }

struct Where {
  uintptr_t addr;
  std::string module;
  uintptr_t bias;
};

int findModule(struct dl_phdr_info *info, size_t, void *data) {
  auto *w = static_cast<Where *>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto &ph = info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && w->addr >= lo && w->addr < lo + ph.p_memsz) {
      w->bias = info->dlpi_addr;
      return 1;
    }
  }
  return 0;
}

__attribute__((noinline)) void printCaller() {
  Where w{reinterpret_cast<uintptr_t>(__builtin_return_address(0)), "", 0};
  dl_iterate_phdr(findModule, &w);
  Dl_info info{};
  dladdr(reinterpret_cast<void *>(w.addr), &info);
  char exe[4096] = {0};
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  std::string mod = info.dli_fname && *info.dli_fname ? info.dli_fname : "";
  if (n > 0 && (mod.empty() || mod.find('/') == std::string::npos))
    mod = exe;
  std::printf("%s 0x%lx\n", mod.c_str(), static_cast<unsigned long>(w.addr - w.bias));
}

void record() {
  for (int step = 0; step < 3; ++step) {
    copyH2D(true, HostKind::Pageable);  // MARK:pageable
    copyH2D(true, HostKind::Pinned);    // MARK:pinned
    copyH2D(true, HostKind::Pageable);  // MARK:blocking
    sync();
    emit(EvKind::Memcpy, Dir::DtoH, HostKind::Pinned, true, 64);  // MARK:d2h
    emit(EvKind::Alloc, Dir::Unknown, HostKind::Unknown, false, 1 << 20);
    emit(EvKind::Free, Dir::Unknown, HostKind::Unknown, false, 1 << 20);  // MARK:free
    sync();  // MARK:sync
  }
  try {
    throw c10::Error("Expected all tensors to be on the same device, but found at "
                     "least two devices, cuda:0 and cpu!");  // MARK:throw
  } catch (const std::exception &) {
  }
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2)
    return 2;
  std::string mode = argv[1];
  if (mode == "where") {
    printCaller();  // MARK:where
    return 0;
  }
  if (mode == "trace" && argc > 2)
    setenv("TORCH_TIDY_TRACE", argv[2], 1);  // before the recorder reads it
  else if (mode != "env" && mode != "crash")
    return 2;
  installCrashHandlers();
  setAlwaysWrite(true);
  record();
  if (mode == "crash")
    throw c10::Error("Expected all tensors to be on the same device, but got "
                     "mat1 is on cpu");  // MARK:crash
  return writeTrace("explicit") ? 0 : 1;
}
