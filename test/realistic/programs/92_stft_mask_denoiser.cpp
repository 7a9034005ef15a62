// Speech enhancement by spectral masking: noisy waveforms go through an
// STFT, a small GRU predicts a [0,1] magnitude mask per time-frequency bin,
// and the masked spectrogram is compared with the clean one. Written as a
// pipeline of free functions sharing one Pipeline struct of settings and
// callbacks.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <vector>

namespace se {

struct Pipeline {
  torch::Device device{torch::kCPU};
  int64_t n_fft = 512, hop = 128, sr = 16000;
  std::function<void(int64_t)> after_batch;
};

struct MaskNetImpl : torch::nn::Module {
  explicit MaskNetImpl(int64_t bins)
      : gru(register_module("gru", torch::nn::GRU(torch::nn::GRUOptions(bins, 256).batch_first(true)))),
        out(register_module("out", torch::nn::Linear(256, bins))) {}
  torch::Tensor forward(const torch::Tensor &mag) {  // [B, T, F]
    return torch::sigmoid(out->forward(std::get<0>(gru->forward(torch::log1p(mag)))));
  }
  torch::nn::GRU gru;
  torch::nn::Linear out;
};
TORCH_MODULE(MaskNet);

// Reads one batch of clips into host memory (synthesised here).
torch::Tensor load_clips(int64_t n, int64_t samples) {
  std::vector<float> buf(n * samples);
  for (size_t i = 0; i < buf.size(); ++i)
    buf[i] = std::sin(0.01f * static_cast<float>(i % samples)) * 0.5f;
  return torch::from_blob(buf.data(), {n, samples}).clone();
}

torch::Tensor magnitude(const torch::Tensor &wave, const torch::Tensor &window, const Pipeline &p) {
  auto spec = torch::stft(wave, p.n_fft, p.hop, p.n_fft, window, /*normalized=*/false, /*onesided=*/true,
                          /*return_complex=*/true);
  return spec.abs().transpose(1, 2);  // [B, T, F]
}

}  // namespace se

int main() {
  se::Pipeline pipe;
  if (torch::cuda::is_available())
    pipe.device = torch::Device(torch::kCUDA);
  pipe.after_batch = [](int64_t) {
    // BUG(torch-empty-cache-in-loop): the pipeline calls this after every
    // batch.
    c10::cuda::CUDACachingAllocator::emptyCache();
  };
  const int64_t bins = pipe.n_fft / 2 + 1;
  se::MaskNet net(bins);
  net->to(pipe.device);
  torch::optim::Adam opt(net->parameters(), 1e-3);
  auto window = torch::hann_window(pipe.n_fft);
  auto window_dev = window.to(pipe.device);

  for (int64_t step = 0; step < 20000; ++step) {
    auto clean = se::load_clips(16, pipe.sr);
    auto noisy = clean + 0.1 * torch::randn_like(clean);
    // BUG(torch-non-blocking-pageable): load_clips() returns pageable host
    // memory; the upload blocks.
    auto noisy_dev = noisy.to(pipe.device, /*non_blocking=*/true);
    auto clean_dev = clean.to(pipe.device);
    // OK(torch-device-mismatch): the window was moved with the waveforms.
    auto noisy_mag = se::magnitude(noisy_dev, window_dev, pipe);
    auto clean_mag = se::magnitude(clean_dev, window_dev, pipe);
    opt.zero_grad();
    auto mask = net->forward(noisy_mag);
    auto loss = torch::l1_loss(mask * noisy_mag, clean_mag);
    loss.backward();
    opt.step();
    // BUG(torch-host-sync-in-loop): a histogram of the mask is pulled to the
    // host every step.
    auto mask_host = mask.detach().cpu();
    if (step % 500 == 0)
      std::cout << "step " << step << " mask>0.5: " << (mask_host > 0.5).to(torch::kFloat).mean().item<float>()
                << "\n";
    pipe.after_batch(step);
  }

  // Enhance a held-out set and report the residual noise energy.
  net->eval();
  auto held_out = se::load_clips(4, pipe.sr * 4);
  // BUG(torch-tensor-to-discarded): to() returns the moved tensor; the
  // held-out clips stay on the host.
  held_out.to(pipe.device);
  // BUG(torch-device-mismatch): the STFT combines the (host) clips with the
  // window on `pipe.device`.
  auto ho_mag = se::magnitude(held_out, window_dev, pipe);
  std::vector<double> residual;
  for (int64_t i = 0; i < 4; ++i) {
    auto one = ho_mag.narrow(0, i, 1);
    // BUG(torch-inference-without-no-grad): enhancement only, no backward,
    // no guard.
    auto m = net->forward(one);
    residual.push_back(((1 - m) * one).pow(2).mean().item<double>());
  }
  if (pipe.device.is_cuda()) {
    torch::NoGradGuard ng;
    // OK(torch-non-blocking-pageable): pinned before the asynchronous upload.
    auto pinned = held_out.pin_memory().to(pipe.device, /*non_blocking=*/true);
    auto mag = se::magnitude(pinned, window_dev, pipe);
    for (int64_t i = 0; i < 4; ++i)
      // OK(torch-inference-without-no-grad): under the guard.
      std::cout << "clip " << i << " mean mask " << net->forward(mag.narrow(0, i, 1)).mean().item<float>() << "\n";
  }
  for (double r : residual)
    std::cout << r << "\n";
  return 0;
}
