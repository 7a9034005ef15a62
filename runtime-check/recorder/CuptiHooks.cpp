// CUPTI side of libtorch_tidy_rt.so: API callbacks for copies, frees,
// allocations and synchronisations, and memcpy activity records for the
// pageable/pinned kind of each copy. No hardware counters are used.
//
// Entry points: InitializeInjection (CUDA_INJECTION64_PATH) and a library
// constructor (LD_PRELOAD). Both may run in one process; setup happens once.
#include "Recorder.h"
#include "ThrowHook.h"

#include <cuda.h>
#include <cupti.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <dlfcn.h>
#include <execinfo.h>
#include <mutex>
#include <string>
#include <vector>

namespace ttrt {
namespace {

// What a callback id means to the recorder, and which parameter layout its
// functionParams has.
// Launch: other GPU work (kernels, memsets, graphs); it is not recorded, it
// only ends the "copy immediately followed by a sync" window.
enum class Cls : uint8_t { None, Memcpy, Free, Alloc, Sync, Launch };
enum class Layout : uint8_t {
  None,
  MemcpyRt,      // {dst, src, count, kind}
  MemcpyRtAsync, // {dst, src, count, kind, stream}
  PtrArg,        // {void *ptr, ...}: cudaFree, cuMemFree_v2, cuMemUnmap (ptr,size)
  HandleArg,     // {handle}: cuMemRelease
  OutPtrSize,    // {T *out, size_t size, ...}: cudaMalloc, cuMemAlloc_v2, cuMemCreate
  StreamArg,     // {stream}
};

struct Info {
  Cls cls = Cls::None;
  Layout layout = Layout::None;
  bool async = false;
  bool sizeSecond = false;  // PtrArg: second field is the size (cuMemUnmap)
  const char *api = "";
};

std::vector<Info> gRuntime, gDriver;
std::deque<std::string> gNames;  // owns the api strings Info points to
CUpti_SubscriberHandle gSubscriber = nullptr;
std::atomic<bool> gCuptiInit{false};

struct Pending {
  Info info;
  bool nested = false;
  uint64_t t0 = 0;
  uint32_t corrRt = 0, corrDrv = 0;
  Dir dir = Dir::Unknown;
  HostKind host = HostKind::Unknown;
  uint64_t bytes = 0, stream = 0, key = 0;
  void *outPtr = nullptr;
};
constexpr int kMaxDepth = 8;
thread_local Pending tPending[kMaxDepth];
thread_local int tDepth = 0;

using PtrAttrFn = CUresult (*)(void *, CUpointer_attribute, CUdeviceptr);
PtrAttrFn ptrAttrFn() {
  static PtrAttrFn fn = [] {
    void *h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
    return h ? reinterpret_cast<PtrAttrFn>(dlsym(h, "cuPointerGetAttribute"))
             : nullptr;
  }();
  return fn;
}

// 0 = pageable (unknown to the driver), 1 = pinned host, 2 = device/other.
int memoryType(const void *p) {
  PtrAttrFn fn = config().pointerAttr ? ptrAttrFn() : nullptr;
  if (!fn || !p)
    return -1;
  unsigned int type = 0;
  CUresult r = fn(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                  reinterpret_cast<CUdeviceptr>(p));
  if (r != CUDA_SUCCESS)
    return 0;
  return type == CU_MEMORYTYPE_HOST ? 1 : 2;
}

Info classify(const std::string &n, bool runtime) {
  Info i;
  auto is = [&](const char *s) { return n == s; };
  auto starts = [&](const char *s) { return n.rfind(s, 0) == 0; };
  // Runtime-API launches only: every runtime launch would also raise the
  // nested driver callback, doubling the per-kernel cost for nothing.
  if (runtime && (starts("cudaLaunch") || starts("cudaGraphLaunch") || starts("cudaMemset"))) {
    i.cls = Cls::Launch;
    return i;
  }
  if (runtime) {
    if (n.rfind("cudaMemcpy", 0) == 0) {
      i.cls = Cls::Memcpy;
      i.async = n.find("Async") != std::string::npos;
      if (is("cudaMemcpy"))
        i.layout = Layout::MemcpyRt;
      else if (is("cudaMemcpyAsync"))
        i.layout = Layout::MemcpyRtAsync;
    } else if (is("cudaFree") || is("cudaFreeAsync")) {
      i.cls = Cls::Free, i.layout = Layout::PtrArg;
    } else if (is("cudaMalloc") || is("cudaMallocAsync")) {
      i.cls = Cls::Alloc, i.layout = Layout::OutPtrSize;
    } else if (is("cudaStreamSynchronize")) {
      i.cls = Cls::Sync, i.layout = Layout::StreamArg;
    } else if (is("cudaDeviceSynchronize") || is("cudaEventSynchronize") ||
               is("cudaThreadSynchronize")) {
      i.cls = Cls::Sync;
    }
  } else {
    if (n.rfind("cuMemcpy", 0) == 0) {
      i.cls = Cls::Memcpy;
      i.async = n.find("Async") != std::string::npos;
    } else if (is("cuMemFree") || is("cuMemFreeAsync")) {
      i.cls = Cls::Free, i.layout = Layout::PtrArg;
    } else if (is("cuMemUnmap")) {
      i.cls = Cls::Free, i.layout = Layout::PtrArg, i.sizeSecond = true;
    } else if (is("cuMemRelease")) {
      i.cls = Cls::Free, i.layout = Layout::HandleArg;
    } else if (is("cuMemAlloc") || is("cuMemAllocAsync") || is("cuMemCreate")) {
      i.cls = Cls::Alloc, i.layout = Layout::OutPtrSize;
    } else if (is("cuStreamSynchronize")) {
      i.cls = Cls::Sync, i.layout = Layout::StreamArg;
    } else if (is("cuCtxSynchronize") || is("cuEventSynchronize")) {
      i.cls = Cls::Sync;
    }
  }
  return i;
}

void enableDomain(CUpti_CallbackDomain dom, uint32_t size, std::vector<Info> &table) {
  table.assign(size, Info());
  for (uint32_t cbid = 1; cbid < size; ++cbid) {
    const char *name = nullptr;
    if (cuptiGetCallbackName(dom, cbid, &name) != CUPTI_SUCCESS || !name)
      continue;
    Info i = classify(apiBaseName(name), dom == CUPTI_CB_DOMAIN_RUNTIME_API);
    if (i.cls == Cls::None)
      continue;
    gNames.push_back(name);
    i.api = gNames.back().c_str();
    table[cbid] = i;
    cuptiEnableCallback(1, gSubscriber, dom, cbid);
  }
}

Dir dirFromKind(int kind, const void *dst, const void *src, Pending &p) {
  switch (kind) {
  case 1: return Dir::HtoD;
  case 2: return Dir::DtoH;
  case 3: return Dir::DtoD;
  case 0: return Dir::HtoH;
  default: break;
  }
  // cudaMemcpyDefault: ask the driver what each side is.
  int s = memoryType(src), d = memoryType(dst);
  if (s == 2 && d == 2)
    return Dir::DtoD;
  if (s == 2 && d >= 0 && d != 2) {
    p.host = d == 1 ? HostKind::Pinned : HostKind::Pageable;
    return Dir::DtoH;
  }
  if (d == 2 && s >= 0 && s != 2) {
    p.host = s == 1 ? HostKind::Pinned : HostKind::Pageable;
    return Dir::HtoD;
  }
  return Dir::Unknown;
}

void onEnter(const Info &info, const CUpti_CallbackData *cb, bool runtime) {
  if (tDepth > 0) {
    // A tracked call made from inside another one (cudaMemcpyAsync calls
    // cuMemcpyHtoDAsync): keep the driver correlation id, record nothing.
    Pending &outer = tPending[tDepth - 1];
    if (!runtime && info.cls == Cls::Memcpy && outer.info.cls == Cls::Memcpy &&
        !outer.corrDrv)
      outer.corrDrv = cb->correlationId;
    if (tDepth < kMaxDepth)
      tPending[tDepth].nested = true;
    ++tDepth;
    return;
  }
  Pending &p = tPending[0];
  p = Pending();
  p.info = info;
  if (info.cls == Cls::Launch) {
    breakSyncChain();
    ++tDepth;  // launches made inside it are nested, not new work
    return;
  }
  (runtime ? p.corrRt : p.corrDrv) = cb->correlationId;
  const void *params = cb->functionParams;
  switch (info.layout) {
  case Layout::MemcpyRt:
  case Layout::MemcpyRtAsync: {
    const auto *m = static_cast<const cudaMemcpyAsync_v3020_params *>(params);
    p.bytes = m->count;
    p.dir = dirFromKind(static_cast<int>(m->kind), m->dst, m->src, p);
    if (info.layout == Layout::MemcpyRtAsync)
      p.stream = reinterpret_cast<uint64_t>(m->stream);
    if (p.host == HostKind::Unknown && (p.dir == Dir::HtoD || p.dir == Dir::DtoH)) {
      int t = memoryType(p.dir == Dir::HtoD ? m->src : m->dst);
      if (t == 0 || t == 1)
        p.host = t == 1 ? HostKind::Pinned : HostKind::Pageable;
    }
    break;
  }
  case Layout::PtrArg: {
    const auto *a = static_cast<const uint64_t *>(params);
    p.key = a[0];
    if (info.sizeSecond)
      p.bytes = a[1];
    break;
  }
  case Layout::HandleArg:
    p.key = *static_cast<const uint64_t *>(params);
    break;
  case Layout::OutPtrSize: {
    struct OutSize { void *out; size_t size; };
    const auto *a = static_cast<const OutSize *>(params);
    p.outPtr = a->out;
    p.bytes = a->size;
    break;
  }
  case Layout::StreamArg:
    p.stream = *static_cast<const uint64_t *>(params);
    break;
  case Layout::None:
    break;
  }
  p.t0 = nowNs();
  ++tDepth;
}

void onExit(const CUpti_CallbackData *cb) {
  if (tDepth <= 0)
    return;
  --tDepth;
  if (tDepth > 0) {
    if (tDepth < kMaxDepth)
      tPending[tDepth].nested = false;
    return;
  }
  Pending &p = tPending[0];
  uint64_t t1 = nowNs();
  Event ev;
  ev.api = p.info.api ? p.info.api : "";
  ev.tNs = p.t0;
  ev.durNs = t1 - p.t0;
  ev.bytes = p.bytes;
  ev.stream = p.stream;
  switch (p.info.cls) {
  case Cls::Memcpy:
    ev.kind = EvKind::Memcpy;
    ev.async = p.info.async;
    ev.dir = p.dir;
    ev.host = p.host;
    ev.hostSource = p.host == HostKind::Unknown ? HostSource::None
                                                : HostSource::PointerAttr;
    ev.corrRuntime = p.corrRt;
    ev.corrDriver = p.corrDrv;
    break;
  case Cls::Free: {
    ev.kind = EvKind::Free;
    uint64_t b = p.info.sizeSecond ? 0 : noteFree(p.key);
    if (b)
      ev.bytes = b;
    break;
  }
  case Cls::Alloc:
    ev.kind = EvKind::Alloc;
    // cudaError_t / CUresult: 0 is success; a failed allocation wrote nothing.
    if (p.outPtr && cb->functionReturnValue &&
        *static_cast<const int *>(cb->functionReturnValue) == 0)
      noteAlloc(*static_cast<uint64_t *>(p.outPtr), p.bytes);
    break;
  case Cls::Sync:
    ev.kind = EvKind::Sync;
    break;
  case Cls::None:
  case Cls::Launch:
    return;
  }
  ev.stack = captureStack(2);
  addEvent(ev);
}

void CUPTIAPI onCallback(void *, CUpti_CallbackDomain dom, CUpti_CallbackId cbid,
                         const void *data) {
  const std::vector<Info> &table =
      dom == CUPTI_CB_DOMAIN_RUNTIME_API ? gRuntime : gDriver;
  if ((dom != CUPTI_CB_DOMAIN_RUNTIME_API && dom != CUPTI_CB_DOMAIN_DRIVER_API) ||
      cbid >= table.size() || table[cbid].cls == Cls::None)
    return;
  const auto *cb = static_cast<const CUpti_CallbackData *>(data);
  if (cb->callbackSite == CUPTI_API_ENTER)
    onEnter(table[cbid], cb, dom == CUPTI_CB_DOMAIN_RUNTIME_API);
  else
    onExit(cb);
}

// Layout shared by every CUpti_ActivityMemcpy* version: the fields the
// recorder reads sit at the same offsets in all of them.
struct MemcpyRecordPrefix {
  CUpti_ActivityKind kind;
  uint8_t copyKind, srcKind, dstKind, flags;
  uint64_t bytes, start, end;
  uint32_t deviceId, contextId, streamId, correlationId, runtimeCorrelationId;
};
#if CUPTI_API_VERSION >= 130000
static_assert(offsetof(MemcpyRecordPrefix, runtimeCorrelationId) ==
                  offsetof(CUpti_ActivityMemcpy6, runtimeCorrelationId),
              "memcpy activity layout changed");
static_assert(offsetof(MemcpyRecordPrefix, bytes) ==
                  offsetof(CUpti_ActivityMemcpy6, bytes),
              "memcpy activity layout changed");
#endif

constexpr size_t kActBuf = 4u << 20;

void CUPTIAPI bufferRequested(uint8_t **buffer, size_t *size, size_t *maxRecords) {
  *buffer = static_cast<uint8_t *>(std::aligned_alloc(8, kActBuf));
  *size = *buffer ? kActBuf : 0;
  *maxRecords = 0;
}

HostKind hostOf(uint8_t kind) {
  if (kind == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE)
    return HostKind::Pageable;
  if (kind == CUPTI_ACTIVITY_MEMORY_KIND_PINNED)
    return HostKind::Pinned;
  return HostKind::Unknown;
}

void CUPTIAPI bufferCompleted(CUcontext, uint32_t, uint8_t *buffer, size_t,
                              size_t validSize) {
  CUpti_Activity *rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, validSize, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_MEMCPY)
      continue;
    const auto *m = reinterpret_cast<const MemcpyRecordPrefix *>(rec);
    CopyActivity a;
    a.corr = m->correlationId;
    a.corrRuntime = m->runtimeCorrelationId;
    a.bytes = m->bytes;
    a.startNs = m->start;
    a.endNs = m->end;
    a.stream = m->streamId;
    switch (m->copyKind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      a.dir = Dir::HtoD, a.host = hostOf(m->srcKind);
      break;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      a.dir = Dir::DtoH, a.host = hostOf(m->dstKind);
      break;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      a.dir = Dir::DtoD;
      break;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      a.dir = Dir::HtoH;
      break;
    default:
      break;
    }
    addCopyActivity(a);
  }
  std::free(buffer);
}

void flushActivity() {
  if (gCuptiInit.load())
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

void writeAtExit() { writeTrace("exit"); }

bool gQuiet = false;  // LD_PRELOAD alone: maybe not a CUDA process at all

void warn(const char *what, CUptiResult r) {
  if (gQuiet && !std::getenv("TORCH_TIDY_VERBOSE"))
    return;
  const char *msg = nullptr;
  cuptiGetResultString(r, &msg);
  std::fprintf(stderr, "torch-tidy-rt: %s failed: %s\n", what, msg ? msg : "?");
}

bool setupCupti() {
  static std::once_flag once;
  static bool ok = false;
  std::call_once(once, [] {
    CUptiResult r = cuptiSubscribe(&gSubscriber, onCallback, nullptr);
    if (r != CUPTI_SUCCESS) {
      warn("cuptiSubscribe", r);
      return;
    }
    enableDomain(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE, gRuntime);
    enableDomain(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE, gDriver);
    bool activity =
        cuptiActivityRegisterCallbacks(bufferRequested, bufferCompleted) == CUPTI_SUCCESS;
    if (activity) {
      CUptiResult ar = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
      if (ar != CUPTI_SUCCESS) {
        warn("cuptiActivityEnable(MEMCPY)", ar);
        activity = false;
      }
    }
    gCuptiInit = true;
    setCuptiState(true, activity);
    setFlushHook(flushActivity);
    std::atexit(writeAtExit);
    ok = true;
  });
  return ok;
}

void commonInit() {
  static std::once_flag once;
  std::call_once(once, [] {
    (void)config();
    void *warm[2];
    backtrace(warm, 2);  // loads libgcc_s now, not inside the first callback
    installCrashHandlers();
    std::atexit(writeAtExit);
  });
}

bool injectedByDriver() {
  const char *p = std::getenv("CUDA_INJECTION64_PATH");
  return p && *p;
}

} // namespace
} // namespace ttrt

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  ttrt::commonInit();
  return ttrt::setupCupti() ? 1 : 0;
}

// LD_PRELOAD entry: the throw hook is active as soon as the library is
// loaded. CUPTI is set up here only when the CUDA driver will not call
// InitializeInjection itself.
__attribute__((constructor)) static void torchTidyRtLoad() {
  ttrt::commonInit();
  if (!ttrt::injectedByDriver() && !std::getenv("TORCH_TIDY_NO_CUPTI")) {
    ttrt::gQuiet = true;
    ttrt::setupCupti();
    ttrt::gQuiet = false;
  }
}
