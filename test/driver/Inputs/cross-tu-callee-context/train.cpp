#include <torch/torch.h>

void end_of_epoch();
void end_of_training();
void train_step() {}

void train(int epochs) {
  for (int e = 0; e < epochs; ++e) {
    train_step();
    end_of_epoch();
  }
  end_of_training();
}

int main() { train(3); }
