// RUN: %check_torch_tidy %s torch-empty-cache-in-loop %t

#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace alloc = c10::cuda::CUDACachingAllocator;

void train_step();

void for_loop() {
  for (int i = 0; i < 10; ++i) {
    train_step();
    c10::cuda::CUDACachingAllocator::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' inside a loop synchronises the device and returns cached blocks with cudaFree every iteration; the next iteration must cudaMalloc them again and the peak memory stays the same [torch-empty-cache-in-loop]
    // CHECK-MESSAGES: :[[@LINE-4]]:3: note: the loop that repeats the call
  }
}

void range_for(std::vector<torch::Tensor> &batches) {
  for (auto &batch : batches) {
    (void)batch;
    alloc::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' inside a loop
  }
}

void while_loop(int steps) {
  while (steps-- > 0)
    c10::cuda::CUDACachingAllocator::emptyCache();
  // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' inside a loop
}

void do_loop(int steps) {
  do {
    using c10::cuda::CUDACachingAllocator::emptyCache;
    emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' inside a loop
  } while (--steps > 0);
}

void through_lambda(int steps) {
  for (int i = 0; i < steps; ++i) {
    auto cleanup = [] { c10::cuda::CUDACachingAllocator::emptyCache(); };
    // CHECK-MESSAGES: :[[@LINE-1]]:25: warning: 'emptyCache()' inside a loop
    // CHECK-MESSAGES: :[[@LINE-3]]:3: note: the loop that repeats the call
    // CHECK-MESSAGES: :[[@LINE-3]]:20: note: called through this lambda
    cleanup();
  }
}

void nested(int epochs, int steps) {
  for (int e = 0; e < epochs; ++e) {
    for (int s = 0; s < steps; ++s)
      train_step();
    if (e % 2 == 0)
      alloc::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:7: warning: 'emptyCache()' inside a loop
  }
}

// Negatives.

void once_after_training(int steps) {
  for (int i = 0; i < steps; ++i)
    train_step();
  c10::cuda::CUDACachingAllocator::emptyCache();
}

void lambda_outside_loop(int steps) {
  auto cleanup = [] { c10::cuda::CUDACachingAllocator::emptyCache(); };
  for (int i = 0; i < steps; ++i)
    train_step();
  cleanup();
}

void local_class_in_loop(int steps) {
  for (int i = 0; i < steps; ++i) {
    struct Cleaner {
      ~Cleaner() { c10::cuda::CUDACachingAllocator::emptyCache(); }
    };
  }
}

namespace other {
void emptyCache();
}

void unrelated_function_of_same_name(int steps) {
  for (int i = 0; i < steps; ++i)
    other::emptyCache();
}

void suppressed(int steps) {
  for (int i = 0; i < steps; ++i)
    c10::cuda::CUDACachingAllocator::emptyCache(); // NOLINT(torch-empty-cache-in-loop)
}

// Callables: what a std::function, a function pointer or a container of
// callbacks holds is a fact of the value; the call runs it.
std::vector<std::function<void()>> make_epoch_hooks() {
  std::vector<std::function<void()>> hooks;
  hooks.push_back([] { train_step(); });
  hooks.push_back([] {
    c10::cuda::CUDACachingAllocator::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' inside a loop
    // CHECK-MESSAGES: :[[@LINE-3]]:19: note: called through this lambda
  });
  return hooks;
}

void run_every_hook_per_epoch(int epochs) {
  auto hooks = make_epoch_hooks();
  for (int e = 0; e < epochs; ++e)
    for (auto &hook : hooks)
      hook();
}

void release_cache() { c10::cuda::CUDACachingAllocator::emptyCache(); }
// CHECK-MESSAGES: :[[@LINE-1]]:24: warning: 'emptyCache()' inside a loop

void through_function_pointer(int steps) {
  void (*after_step)() = &release_cache;
  for (int i = 0; i < steps; ++i) {
    train_step();
    after_step();
  }
}

// An element picked by key may be any of the map's callbacks: unknown.
void hook_picked_by_key(int steps) {
  std::map<std::string, std::function<void()>> hooks;
  hooks["log"] = [] { train_step(); };
  hooks["release"] = [] { c10::cuda::CUDACachingAllocator::emptyCache(); };
  for (int i = 0; i < steps; ++i)
    hooks.at("log")();
  hooks.at("release")();
}

// Named hooks in a map, filled with emplace and operator[], called from a
// range-for through a structured binding: the loop runs each of them.
void named_hooks(int steps) {
  std::map<std::string, std::function<void(int)>> hooks;
  hooks.emplace("log", [](int step) { (void)step; });
  hooks["release"] = [](int) { c10::cuda::CUDACachingAllocator::emptyCache(); };
  // CHECK-MESSAGES: :[[@LINE-1]]:32: warning: 'emptyCache()' inside a loop
  for (int i = 0; i < steps; ++i)
    for (const auto &[name, hook] : hooks)
      hook(i);
}

// A destructor runs where its object's scope ends: in the loop, once per
// iteration; outside, once.
class CacheReclaimer {
public:
  ~CacheReclaimer() { c10::cuda::CUDACachingAllocator::emptyCache(); }
  // CHECK-MESSAGES: :[[@LINE-1]]:23: warning: 'emptyCache()' inside a loop
};

void reclaimer_per_round(int rounds) {
  for (int r = 0; r < rounds; ++r) {
    CacheReclaimer reclaim;
    train_step();
  }
}

class FinalReclaimer {
public:
  ~FinalReclaimer() { c10::cuda::CUDACachingAllocator::emptyCache(); }
};

void reclaimer_once(int steps) {
  FinalReclaimer reclaim;
  for (int i = 0; i < steps; ++i)
    train_step();
}

// A hook in a field of a config struct, copied into a member by the
// constructor: the member holds what each caller's field holds.
struct RunHooks {
  std::function<void(int)> after_step;
  std::function<void(int)> after_epoch;
};
class HookedTrainer {
public:
  explicit HookedTrainer(const RunHooks &hooks)
      : after_step_(hooks.after_step), after_epoch_(hooks.after_epoch) {}
  void fit(int steps) {
    for (int s = 0; s < steps; ++s) {
      train_step();
      after_step_(s);
    }
    after_epoch_(0);
  }

private:
  std::function<void(int)> after_step_, after_epoch_;
};
void run_with_config_hooks() {
  RunHooks hooks;
  hooks.after_step = [](int) {
    alloc::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' inside a loop {{.*}}[torch-empty-cache-in-loop]
  };
  hooks.after_epoch = [](int) { alloc::emptyCache(); };
  HookedTrainer trainer(hooks);
  trainer.fit(100);
}

// A callable handed to a constructor or a setter and kept in a member: the
// member holds what each caller passed.
class StepLoop {
public:
  StepLoop() = default;
  explicit StepLoop(std::function<void()> after) : after_(std::move(after)) {}
  void on_step(std::function<void()> after) { after_ = std::move(after); }
  void run(int steps) {
    for (int s = 0; s < steps; ++s) {
      train_step();
      after_();
    }
  }

private:
  std::function<void()> after_;
};
void hook_by_constructor(int steps) {
  StepLoop loop([] {
    alloc::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' inside a loop {{.*}}[torch-empty-cache-in-loop]
  });
  loop.run(steps);
}
void hook_by_setter(int steps) {
  StepLoop loop;
  loop.on_step([] {
    alloc::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' inside a loop {{.*}}[torch-empty-cache-in-loop]
  });
  loop.run(steps);
}
