// No include guard: a TU could not include it again after a PCH of it.
#include <torch/torch.h>
void declared_in_unguarded_header();
