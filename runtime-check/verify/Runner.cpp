#include "Runner.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ttv {
namespace {

std::string realPath(const std::string &p) {
  char buf[PATH_MAX];
  return realpath(p.c_str(), buf) ? std::string(buf) : std::string();
}

std::string selfDir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0)
    return ".";
  buf[n] = '\0';
  std::string p(buf);
  return p.substr(0, p.rfind('/'));
}

bool isTraceName(const char *name) {
  size_t n = std::strlen(name);
  return std::strncmp(name, "trace.", 6) == 0 && n > 12 &&
         std::strcmp(name + n - 6, ".jsonl") == 0;
}

} // namespace

std::string findRecorder(const std::string &explicitPath) {
  std::vector<std::string> cands;
  if (!explicitPath.empty()) {
    cands.push_back(explicitPath);
  } else {
    if (const char *env = std::getenv("TORCH_TIDY_RECORDER"))
      cands.push_back(env);
    std::string d = selfDir();
    cands.push_back(d + "/libtorch_tidy_rt.so");
    cands.push_back(d + "/../lib/libtorch_tidy_rt.so");
  }
  for (const auto &c : cands) {
    std::string r = realPath(c);
    if (!r.empty())
      return r;
  }
  return "";
}

std::vector<std::string> listTraces(const std::string &dir) {
  std::vector<std::string> out;
  if (DIR *d = opendir(dir.c_str())) {
    while (dirent *e = readdir(d))
      if (isTraceName(e->d_name))
        out.push_back(dir + "/" + e->d_name);
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool prepareTraceDir(std::string &dir, std::string &err) {
  if (dir.empty()) {
    const char *tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/torch-tidy-verify.XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data())) {
      err = "cannot create a temporary trace directory: " + std::string(std::strerror(errno));
      return false;
    }
    dir = buf.data();
    return true;
  }
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    err = "cannot create " + dir + ": " + std::strerror(errno);
    return false;
  }
  std::string abs = realPath(dir);
  if (abs.empty()) {
    err = "cannot resolve " + dir;
    return false;
  }
  dir = abs;
  // Stale traces from an earlier run would be merged into this one.
  for (const auto &t : listTraces(dir))
    std::remove(t.c_str());
  return true;
}

bool runUnderRecorder(const RunOptions &opts, RunResult &res, std::string &err) {
  if (opts.argv.empty()) {
    err = "no program to run";
    return false;
  }
  pid_t pid = fork();
  if (pid < 0) {
    err = std::string("fork: ") + std::strerror(errno);
    return false;
  }
  if (pid == 0) {
    std::string preload = opts.recorder;
    if (const char *old = std::getenv("LD_PRELOAD"); old && *old)
      preload += std::string(":") + old;
    setenv("LD_PRELOAD", preload.c_str(), 1);
    setenv("CUDA_INJECTION64_PATH", opts.recorder.c_str(), 1);
    setenv("TORCH_TIDY_TRACE", (opts.traceDir + "/trace.%p.jsonl").c_str(), 1);
    std::vector<char *> args;
    for (const auto &a : opts.argv)
      args.push_back(const_cast<char *>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "torch-tidy-verify: cannot run %s: %s\n", args[0],
                 std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      err = std::string("waitpid: ") + std::strerror(errno);
      return false;
    }
  }
  res.status = WIFEXITED(status) ? WEXITSTATUS(status)
               : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                     : -1;
  res.traces = listTraces(opts.traceDir);
  return true;
}

} // namespace ttv
