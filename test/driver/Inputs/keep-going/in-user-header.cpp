#include "model.h"

void train(Model &m) {
  m.weight.cuda();
}
