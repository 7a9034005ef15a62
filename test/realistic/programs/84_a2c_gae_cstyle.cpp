/* Synchronous advantage actor-critic (A2C) with generalised advantage
 * estimation on a toy 1-D reach task, written C-style: the rollout and the
 * statistics are plain structs passed by pointer to free functions, and
 * the environments are stepped in a batch on the host. */
#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#define N_ENVS 16
#define N_STEPS 32
#define OBS_DIM 4
#define N_ACTIONS 3

typedef struct {
  torch::Tensor obs[N_STEPS];
  torch::Tensor actions[N_STEPS];
  torch::Tensor log_probs[N_STEPS];
  torch::Tensor values[N_STEPS];
  torch::Tensor entropies[N_STEPS];
  float rewards[N_STEPS][N_ENVS];
  float dones[N_STEPS][N_ENVS];
} Rollout;

typedef struct {
  double policy_loss;
  double value_loss;
  torch::Tensor entropy_sum;
  int64_t updates;
} Stats;

struct ActorCriticImpl : torch::nn::Module {
  ActorCriticImpl()
      : body(register_module("body", torch::nn::Linear(OBS_DIM, 64))),
        pi(register_module("pi", torch::nn::Linear(64, N_ACTIONS))),
        v(register_module("v", torch::nn::Linear(64, 1))) {}
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor &x) {
    auto h = torch::relu(body->forward(x));
    return {pi->forward(h), v->forward(h).squeeze(-1)};
  }
  torch::nn::Linear body, pi, v;
};
TORCH_MODULE(ActorCritic);

static void env_step(float *pos, const int64_t *act, float *rew, float *done) {
  for (int i = 0; i < N_ENVS; ++i) {
    pos[i] += (act[i] - 1) * 0.1f;
    rew[i] = -std::abs(pos[i] - 1.0f);
    done[i] = std::abs(pos[i] - 1.0f) < 0.05f ? 1.0f : 0.0f;
    if (done[i] > 0.5f)
      pos[i] = 0.0f;
  }
}

static torch::Tensor observe(const float *pos) {
  auto o = torch::zeros({N_ENVS, OBS_DIM});
  for (int i = 0; i < N_ENVS; ++i) {
    o[i][0] = pos[i];
    o[i][1] = 1.0f - pos[i];
  }
  return o;
}

static void collect(ActorCritic net, torch::Device dev, float *pos, Rollout *ro) {
  for (int t = 0; t < N_STEPS; ++t) {
    auto obs = observe(pos).to(dev);
    auto out = net->forward(obs);
    auto dist = torch::softmax(out.first, -1);
    auto a = dist.multinomial(1).squeeze(-1);
    ro->obs[t] = obs;
    ro->actions[t] = a;
    ro->log_probs[t] = torch::log_softmax(out.first, -1).gather(1, a.unsqueeze(1)).squeeze(1);
    ro->values[t] = out.second;
    ro->entropies[t] = -(dist * torch::log(dist + 1e-8)).sum(-1);
    auto a_host = a.cpu();
    env_step(pos, a_host.data_ptr<int64_t>(), ro->rewards[t], ro->dones[t]);
  }
}

/* GAE(lambda) over the rollout; returns advantages [T, N] on `dev`. */
static torch::Tensor gae(const Rollout *ro, torch::Tensor last_value, torch::Device dev, double gamma, double lam) {
  auto adv = torch::zeros({N_STEPS, N_ENVS}, dev);
  auto next_adv = torch::zeros({N_ENVS}, dev);
  auto next_value = last_value.detach();
  for (int t = N_STEPS - 1; t >= 0; --t) {
    auto r = torch::from_blob(const_cast<float *>(ro->rewards[t]), {N_ENVS}).clone().to(dev);
    auto nd = 1.0 - torch::from_blob(const_cast<float *>(ro->dones[t]), {N_ENVS}).clone().to(dev);
    auto delta = r + gamma * next_value * nd - ro->values[t].detach();
    next_adv = delta + gamma * lam * nd * next_adv;
    adv[t] = next_adv;
    next_value = ro->values[t].detach();
  }
  return adv;
}

static void update(ActorCritic net, torch::optim::Optimizer *opt, Rollout *ro, torch::Tensor adv, Stats *st) {
  auto values = torch::stack(std::vector<torch::Tensor>(ro->values, ro->values + N_STEPS));
  auto logp = torch::stack(std::vector<torch::Tensor>(ro->log_probs, ro->log_probs + N_STEPS));
  auto ent = torch::stack(std::vector<torch::Tensor>(ro->entropies, ro->entropies + N_STEPS)).mean();
  auto returns = adv + values.detach();
  auto policy_loss = -(logp * adv).mean();
  auto value_loss = 0.5 * (returns - values).pow(2).mean();
  opt->zero_grad();
  (policy_loss + 0.5 * value_loss - 0.01 * ent).backward();
  torch::nn::utils::clip_grad_norm_(net->parameters(), 0.5);
  opt->step();
  // BUG(torch-host-sync-in-loop): update() runs once per training
  // iteration and copies both losses back to the host every time.
  auto host = torch::stack({policy_loss.detach(), value_loss.detach()}).cpu();
  // OK(torch-loss-accumulation-graph, torch-host-sync-in-loop): plain
  // numbers read from a host copy.
  st->policy_loss += host[0].item<double>();
  st->value_loss += host[1].item<double>();
  // BUG(torch-loss-accumulation-graph): the entropy keeps the whole
  // update's graph in a struct that outlives every update.
  st->entropy_sum += ent;
  st->updates += 1;
}

int main() {
  torch::Device dev = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  ActorCritic net;
  net->to(dev);
  torch::optim::RMSprop opt(net->parameters(), torch::optim::RMSpropOptions(7e-4).eps(1e-5));
  float pos[N_ENVS] = {0};
  Rollout ro;
  Stats st{0.0, 0.0, torch::zeros({}, dev), 0};

  for (int upd = 0; upd < 1000; ++upd) {
    collect(net, dev, pos, &ro);
    torch::Tensor last_value;
    {
      torch::NoGradGuard ng;
      // OK(torch-device-mismatch): the observation is moved to the net's device.
      last_value = net->forward(observe(pos).to(dev)).second;
    }
    auto adv = gae(&ro, last_value, dev, 0.99, 0.95);
    update(net, &opt, &ro, adv, &st);
    if (upd % 50 == 0)
      std::printf("upd %d pi %.4f v %.4f\n", upd, st.policy_loss / st.updates, st.value_loss / st.updates);
  }

  // Greedy evaluation of the learnt policy.
  net->eval();
  float eval_pos[N_ENVS] = {0};
  double total_reward = 0.0;
  for (int t = 0; t < 200; ++t) {
    // BUG(torch-device-mismatch): the observation stays on the host while
    // the network is on `dev`.
    // BUG(torch-inference-without-no-grad): greedy rollout with autograd on.
    auto logits = net->forward(observe(eval_pos)).first;
    auto a = logits.argmax(-1).cpu();
    float rew[N_ENVS], done[N_ENVS];
    env_step(eval_pos, a.data_ptr<int64_t>(), rew, done);
    for (int i = 0; i < N_ENVS; ++i)
      total_reward += rew[i];
  }
  std::printf("eval reward %.3f\n", total_reward / N_ENVS);
  return 0;
}
