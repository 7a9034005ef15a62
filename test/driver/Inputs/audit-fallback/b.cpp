#include <unguarded.h>
void b(at::Tensor t) { t.cpu(); }
