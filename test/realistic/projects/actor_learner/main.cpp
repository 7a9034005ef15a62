// Alternates acting and learning; the first update is tried once on its own
// to find out early whether the rollout fits in GPU memory.
#include "rl.h"

#include <c10/cuda/CUDACachingAllocator.h>

#include <cstdlib>
#include <iostream>
#include <string>

namespace {

constexpr int64_t kRolloutSteps = 4096;
constexpr double kGamma = 0.97;

void first_update(Learner &learner, const Rollout &rollout) {
  try {
    learner.update(rollout);
  } catch (const c10::OutOfMemoryError &e) {
    std::cerr << "first update ran out of memory: " << e.what() << '\n';
    // BUG(torch-empty-cache-oom-retry): the same rollout is retried at the
    // same size; the allocator had already released its cache before raising.
    c10::cuda::CUDACachingAllocator::emptyCache();
    learner.update(rollout);
  }
}

void report(int64_t iteration, const Rollout &rollout, Learner &learner, Policy &actor_policy,
            GridWorld &eval_env) {
  torch::NoGradGuard no_grad;
  const double greedy = evaluate(actor_policy, eval_env, 8);
  std::cout << "iteration " << iteration << " return " << rollout.mean_episode_return << " greedy " << greedy
            << " loss " << learner.recent_loss(32) << " explained variance " << learner.explained_variance(rollout)
            << '\n';
}

struct Args {
  int64_t epochs = 4;
  int64_t iterations = 300;
  std::string out = "policy.pt";
};

Args parse(int argc, char **argv) {
  Args args;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    if (key == "--epochs") args.epochs = std::atoll(argv[i + 1]);
    else if (key == "--iterations") args.iterations = std::atoll(argv[i + 1]);
    else if (key == "--out") args.out = argv[i + 1];
    else std::cerr << "ignoring unknown flag " << key << '\n';
  }
  return args;
}

}  // namespace

int main(int argc, char **argv) {
  const Args args = parse(argc, argv);
  Learner learner(args.epochs);
  Policy actor_policy;
  GridWorld env(7), eval_env(11);

  learner.publish(actor_policy);
  auto rollout = collect(actor_policy, env, kRolloutSteps, kGamma);
  first_update(learner, rollout);

  for (int64_t iteration = 1; iteration <= args.iterations; ++iteration) {
    learner.publish(actor_policy);
    rollout = collect(actor_policy, env, kRolloutSteps, kGamma);
    learner.update(rollout);
    if (iteration % 25 == 0)
      report(iteration, rollout, learner, actor_policy, eval_env);
  }
  learner.save(args.out);
  return 0;
}
