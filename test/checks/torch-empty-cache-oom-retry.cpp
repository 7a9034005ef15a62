// RUN: %check_torch_tidy %s torch-empty-cache-oom-retry %t

#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <cmath>
#include <stdexcept>
#include <string>

namespace alloc = c10::cuda::CUDACachingAllocator;

torch::Tensor train_step(const torch::Tensor &batch);
void log_line(const std::string &s);

struct Net : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};

// Positives: the same work again, at the same size.

void retry_in_handler(const torch::Tensor &batch) {
  try {
    train_step(batch);
  } catch (const c10::OutOfMemoryError &) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' before retrying after an out-of-memory error does not help: the caching allocator already frees its cached blocks before it raises OOM; retry with a smaller batch and gradient accumulation, or use activation checkpointing [torch-empty-cache-oom-retry]
    // CHECK-MESSAGES: :[[@LINE-3]]:5: note: the out-of-memory handler
    // CHECK-MESSAGES: :[[@LINE+1]]:5: note: the same call is retried here with unchanged arguments
    train_step(batch);
  }
}

void retry_loop(const torch::Tensor &batch) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    try {
      train_step(batch);
      break;
    } catch (c10::OutOfMemoryError &e) {
      alloc::emptyCache();
      // CHECK-MESSAGES: :[[@LINE-1]]:7: warning: 'emptyCache()' before retrying
      // CHECK-MESSAGES: :[[@LINE-3]]:7: note: the out-of-memory handler
      // CHECK-MESSAGES: :[[@LINE-8]]:3: note: this loop runs the try block again with unchanged inputs
    }
  }
}

void while_true_with_continue(std::shared_ptr<Net> net, torch::Tensor x) {
  torch::Tensor out;
  while (true) {
    try {
      out = net->forward(x);
      break;
    } catch (c10::OutOfMemoryError) {
      c10::cuda::CUDACachingAllocator::emptyCache();
      // CHECK-MESSAGES: :[[@LINE-1]]:7: warning: 'emptyCache()' before retrying
      continue;
    }
  }
}

void generic_error_tested_by_message(const torch::Tensor &batch) {
  try {
    train_step(batch);
  } catch (const c10::Error &e) {
    if (std::string(e.what()).find("CUDA out of memory") == std::string::npos)
      throw;
    c10::cuda::CUDACachingAllocator::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' before retrying
    // CHECK-MESSAGES: :[[@LINE-5]]:5: note: the handler that tests for an out-of-memory error
    train_step(batch);
  }
}

void std_exception_tested_by_message(std::shared_ptr<Net> net, torch::Tensor x) {
  do {
    try {
      net->forward(x);
      return;
    } catch (const std::exception &e) {
      const std::string message = e.what();
      if (message.find("out of memory") != std::string::npos)
        c10::cuda::CUDACachingAllocator::emptyCache();
      // CHECK-MESSAGES: :[[@LINE-1]]:9: warning: 'emptyCache()' before retrying
    }
  } while (true);
}

torch::Tensor retry_returned(const torch::Tensor &batch) {
  try {
    return train_step(batch);
  } catch (const c10::OutOfMemoryError &) {
    log_line("OOM, emptying the cache and retrying");
    c10::cuda::CUDACachingAllocator::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' before retrying
    return train_step(batch);
  }
}

void retry_with_counter(const torch::Tensor &batch) {
  int failures = 0;
  while (failures < 3) {
    try {
      auto loss = train_step(batch);
      loss.backward();
      break;
    } catch (const c10::OutOfMemoryError &) {
      ++failures;
      if (failures == 3)
        throw;
      c10::cuda::CUDACachingAllocator::emptyCache();
      // CHECK-MESSAGES: :[[@LINE-1]]:7: warning: 'emptyCache()' before retrying
    }
  }
}

void module_call_retried(Net &net, const torch::Tensor &x) {
  try {
    auto y = net.forward(x);
  } catch (const c10::OutOfMemoryError &) {
    alloc::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' before retrying
    auto y = net.forward(x);
  }
}

struct Runner {
  void run();
  void step(int batch_size);
  int batch_size = 64;
};

void Runner::run() {
  for (;;) {
    try {
      step(batch_size);
      return;
    } catch (const c10::OutOfMemoryError &) {
      c10::cuda::CUDACachingAllocator::emptyCache();
      // CHECK-MESSAGES: :[[@LINE-1]]:7: warning: 'emptyCache()' before retrying
    }
  }
}

torch::Tensor score_recursively(Net &net, const torch::Tensor &inputs) {
  try {
    return net.forward(inputs);
  } catch (const c10::OutOfMemoryError &) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' before retrying
    // CHECK-MESSAGES: :[[@LINE+1]]:12: note: the same call is retried here with unchanged arguments
    return score_recursively(net, inputs);
  }
}

// Negatives (near misses).

void smaller_batch_in_handler(const torch::Tensor &batch) {
  try {
    train_step(batch);
  } catch (const c10::OutOfMemoryError &) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    train_step(batch.view({2, -1})[0]);
  }
}

void batch_size_halved(int64_t batch_size) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    try {
      train_step(torch::randn({batch_size, 3}));
      break;
    } catch (const c10::OutOfMemoryError &) {
      c10::cuda::CUDACachingAllocator::emptyCache();
      batch_size /= 2;
    }
  }
}

void member_batch_size_halved(Runner &r) {
  while (true) {
    try {
      r.step(r.batch_size);
      break;
    } catch (const c10::OutOfMemoryError &) {
      alloc::emptyCache();
      r.batch_size = r.batch_size / 2;
    }
  }
}

void retry_after_variable_changed(const torch::Tensor &input) {
  torch::Tensor batch = input;
  try {
    train_step(batch);
  } catch (const c10::OutOfMemoryError &) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    batch = batch.view({2, -1})[0];
    train_step(batch);
  }
}

void rethrows(const torch::Tensor &batch) {
  while (true) {
    try {
      train_step(batch);
      break;
    } catch (const c10::OutOfMemoryError &) {
      c10::cuda::CUDACachingAllocator::emptyCache();
      throw;
    }
  }
}

void gives_up_with_break(const torch::Tensor &batch) {
  for (int i = 0; i < 3; ++i) {
    try {
      train_step(batch);
    } catch (const c10::OutOfMemoryError &) {
      c10::cuda::CUDACachingAllocator::emptyCache();
      break;
    }
  }
}

void next_batch_each_iteration(std::vector<torch::Tensor> &batches) {
  for (auto &batch : batches) {
    try {
      train_step(batch);
    } catch (const c10::OutOfMemoryError &) {
      c10::cuda::CUDACachingAllocator::emptyCache();
    }
  }
  for (size_t i = 0; i < batches.size(); ++i) {
    try {
      train_step(batches[i]);
    } catch (const c10::OutOfMemoryError &) {
      c10::cuda::CUDACachingAllocator::emptyCache();
    }
  }
}

void generic_handler_without_oom_test(const torch::Tensor &batch) {
  try {
    train_step(batch);
  } catch (const c10::Error &e) {
    log_line(e.what());
    c10::cuda::CUDACachingAllocator::emptyCache();
    train_step(batch);
  }
}

void catch_all(const torch::Tensor &batch) {
  try {
    train_step(batch);
  } catch (...) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    train_step(batch);
  }
}

void runtime_error_is_not_oom(const torch::Tensor &batch) {
  try {
    train_step(batch);
  } catch (const std::runtime_error &e) {
    log_line("out of memory?");
    c10::cuda::CUDACachingAllocator::emptyCache();
    train_step(batch);
  }
}

void no_retry_at_all(const torch::Tensor &batch) {
  try {
    train_step(batch);
  } catch (const c10::OutOfMemoryError &) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    log_line("skipping this batch");
  }
}

void clean_up_is_not_a_retry(Net &net, const torch::Tensor &batch) {
  try {
    net.zero_grad();
    train_step(batch);
  } catch (const c10::OutOfMemoryError &) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    net.zero_grad();
  }
}

void retry_before_empty_cache(const torch::Tensor &batch) {
  try {
    train_step(batch);
  } catch (const c10::OutOfMemoryError &) {
    train_step(batch);
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
}

void empty_cache_in_try_block(const torch::Tensor &batch) {
  for (int i = 0; i < 2; ++i) {
    try {
      c10::cuda::CUDACachingAllocator::emptyCache();
      train_step(batch);
    } catch (const c10::OutOfMemoryError &) {
      log_line("retrying");
    }
  }
}

void lambda_in_handler(const torch::Tensor &batch) {
  try {
    train_step(batch);
  } catch (const c10::OutOfMemoryError &) {
    auto cleanup = [] { c10::cuda::CUDACachingAllocator::emptyCache(); };
    cleanup();
  }
}

void suppressed(const torch::Tensor &batch) {
  try {
    train_step(batch);
  } catch (const c10::OutOfMemoryError &) {
    c10::cuda::CUDACachingAllocator::emptyCache(); // NOLINT(torch-empty-cache-oom-retry)
    train_step(batch);
  }
}

torch::Tensor score_in_halves(Net &net, const torch::Tensor &inputs) {
  try {
    return net.forward(inputs);
  } catch (const c10::OutOfMemoryError &) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    auto halves = inputs.chunk(2);
    return torch::cat({score_in_halves(net, halves[0]),
                       score_in_halves(net, halves[1])});
  }
}

// The work inside a library function of its result (`std::exp(nll(...))`)
// is the same work.
double perplexity(const torch::Tensor &batch);
double nll(const torch::Tensor &batch);
double retry_wrapped_in_library_call(const torch::Tensor &batch) {
  try {
    return std::exp(nll(batch));
  } catch (const c10::OutOfMemoryError &) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' before retrying
    return std::exp(nll(batch));
  }
}
