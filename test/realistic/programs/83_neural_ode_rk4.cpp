// Neural ODE fitted to a damped spiral: a small MLP is the vector field and a
// fixed-step RK4 integrator (a free function taking the field as a
// std::function) rolls the state forward. Trajectory loss is the mean error
// over the observed time points; evaluation rolls out from held-out initial
// states and reports the endpoint error.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <vector>

namespace ode {

using Field = std::function<torch::Tensor(const torch::Tensor &, double)>;

struct VectorFieldImpl : torch::nn::Module {
  VectorFieldImpl()
      : l1(register_module("l1", torch::nn::Linear(3, 64))),
        l2(register_module("l2", torch::nn::Linear(64, 64))),
        l3(register_module("l3", torch::nn::Linear(64, 2))) {}
  torch::Tensor forward(const torch::Tensor &y, double t) {
    auto tt = torch::full({y.size(0), 1}, t, y.options());
    auto h = torch::tanh(l1->forward(torch::cat({y, tt}, 1)));
    return l3->forward(torch::tanh(l2->forward(h)));
  }
  torch::nn::Linear l1, l2, l3;
};
TORCH_MODULE(VectorField);

// Classic RK4; returns the states at every grid point, stacked on dim 0.
torch::Tensor rk4(const Field &f, torch::Tensor y, double t0, double dt, int64_t steps) {
  std::vector<torch::Tensor> states{y};
  double t = t0;
  for (int64_t i = 0; i < steps; ++i) {
    auto k1 = f(y, t);
    auto k2 = f(y + 0.5 * dt * k1, t + 0.5 * dt);
    auto k3 = f(y + 0.5 * dt * k2, t + 0.5 * dt);
    auto k4 = f(y + dt * k3, t + dt);
    y = y + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4);
    // OK(torch-loss-accumulation-graph): the states leave the function as
    // the returned stack; the solver runs no backward.
    states.push_back(y);
    t += dt;
  }
  return torch::stack(states);
}

torch::Tensor spiral_truth(const torch::Tensor &y0, int64_t steps, double dt) {
  std::vector<torch::Tensor> out{y0};
  auto a = torch::tensor({{-0.1, 2.0}, {-2.0, -0.1}});
  auto y = y0;
  for (int64_t i = 0; i < steps; ++i) {
    y = y + dt * torch::matmul(y, a);
    out.push_back(y);
  }
  return torch::stack(out);
}

}  // namespace ode

int main() {
  const bool cuda = torch::cuda::is_available();
  torch::Device device(cuda ? torch::kCUDA : torch::kCPU);
  const int64_t steps = 40;
  const double dt = 0.05;

  ode::VectorField field;
  field->to(device);
  torch::optim::Adam opt(field->parameters(), torch::optim::AdamOptions(3e-3));
  ode::Field f = [&](const torch::Tensor &y, double t) { return field->forward(y, t); };

  auto y0_train = torch::randn({256, 2}) * 2.0;
  // OK(torch-tensor-to-discarded): the moved target is kept.
  auto target = ode::spiral_truth(y0_train, steps, dt).to(device);
  auto y0 = y0_train.to(device);

  torch::Tensor epoch_loss = torch::zeros({}, device);
  double best = 1e9;
  for (int64_t it = 0; it < 2000; ++it) {
    opt.zero_grad();
    auto traj = ode::rk4(f, y0, 0.0, dt, steps);
    // OK(torch-device-mismatch): both on `device`.
    auto loss = torch::mse_loss(traj, target);
    loss.backward();
    opt.step();
    // BUG(torch-loss-accumulation-graph): the running sum keeps every
    // iteration's rollout graph alive.
    epoch_loss += loss;
    // BUG(torch-host-sync-in-loop): an unconditional item() every iteration.
    const double l = loss.item<double>();
    if (l < best)
      best = l;
    if (it % 200 == 0) {
      // OK(torch-host-sync-in-loop): logging every 200 iterations.
      std::cout << "it " << it << " mean " << (epoch_loss / (it + 1)).item<double>() << "\n";
    }
  }

  field->eval();
  auto held_out = torch::randn({64, 2}).to(device);
  auto truth = ode::spiral_truth(held_out.cpu(), steps, dt);
  // BUG(torch-tensor-to-discarded): the result of to() is thrown away; the
  // reference trajectories stay on the host.
  truth.to(device);
  std::vector<double> endpoint_errors;
  for (int64_t horizon = 10; horizon <= steps; horizon += 10) {
    // BUG(torch-inference-without-no-grad): the evaluation rollouts run with
    // autograd on; nothing here calls backward().
    auto pred = field->forward(held_out, 0.0);
    // BUG(torch-device-mismatch): the prediction is on `device`, the
    // reference was never moved.
    auto err = torch::mse_loss(pred, truth[horizon]);
    endpoint_errors.push_back(err.item<double>());
  }
  {
    torch::NoGradGuard no_grad;
    for (int64_t k = 0; k < 4; ++k) {
      // OK(torch-inference-without-no-grad): under NoGradGuard.
      auto v = field->forward(held_out, 0.1 * k);
      std::cout << "speed " << v.norm().item<double>() << "\n";
    }
  }
  for (double e : endpoint_errors)
    std::cout << e << " ";
  std::cout << "\nbest " << best << "\n";
  return 0;
}
