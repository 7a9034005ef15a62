#include "h.h"
int main() {
  auto t = make_on_gpu();
}
